package main

import (
	"log/slog"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	logger := slog.New(slog.DiscardHandler)
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }

	if got := tuneGC(env(nil), logger); got != 200 {
		t.Errorf("without GOGC: set %d, want 200", got)
	}
	if got := debug.SetGCPercent(100); got != 200 {
		t.Errorf("the runtime's GC percent is %d, want 200", got)
	}
	if got := tuneGC(env(map[string]string{"GOGC": "50"}), logger); got != 0 {
		t.Errorf("with GOGC set: set %d, want it left alone", got)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set the GC percent changed to %d", got)
	}
}
