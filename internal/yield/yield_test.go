package yield

import "testing"

// TestPacerResets checks when Step yields: after 32 KiB or 128 steps.
func TestPacerResets(t *testing.T) {
	var p Pacer
	for range 127 {
		p.Step(1)
	}
	if p.steps != 127 {
		t.Fatalf("steps %d before the 128th", p.steps)
	}
	p.Step(1)
	if p.steps != 0 || p.bytes != 0 {
		t.Fatalf("no yield after 128 steps: %+v", p)
	}
	p.Step(32 << 10)
	if p.steps != 0 || p.bytes != 0 {
		t.Fatalf("no yield after 32 KiB: %+v", p)
	}
}
