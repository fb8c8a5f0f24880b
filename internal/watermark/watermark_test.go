package watermark

import (
	"context"
	"testing"
)

func TestWaitReturnsOnceReached(t *testing.T) {
	var m Mark
	if err := m.Wait(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- m.Wait(context.Background(), 3) }()
	m.Advance(2)
	select {
	case err := <-done:
		t.Fatalf("returned at 2 of 3: %v", err)
	default:
	}
	m.Advance(5)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m.Advance(4) // never backwards
	if got := m.Seq(); got != 5 {
		t.Fatalf("Seq = %d, want 5", got)
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	var m Mark
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Wait(ctx, 1); err != context.Canceled {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}
