package main

import (
	"log/slog"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	oldPercent, oldLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(oldPercent); debug.SetMemoryLimit(oldLimit) })
	logger := slog.New(slog.DiscardHandler)
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }

	percent, limit := tuneGC(256<<20, env(nil), logger)
	if want := int64(2*(256+40)+130) << 20; percent != 200 || limit != want {
		t.Errorf("defaults: got GOGC=%d limit %d, want 200 and %d (the bound of docs/operations.md)", percent, limit, want)
	}
	if got := debug.SetGCPercent(100); got != 200 {
		t.Errorf("the runtime's GC percent is %d, want 200", got)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("the runtime's memory limit is %d, want %d", got, limit)
	}

	debug.SetMemoryLimit(oldLimit)
	if percent, limit := tuneGC(256<<20, env(map[string]string{"GOGC": "50"}), logger); percent != 0 || limit != 0 {
		t.Errorf("with GOGC set: got %d, %d; want both left alone", percent, limit)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set the GC percent changed to %d", got)
	}
	if percent, limit := tuneGC(256<<20, env(map[string]string{"GOMEMLIMIT": "1GiB"}), logger); percent != 200 || limit != 0 {
		t.Errorf("with GOMEMLIMIT set: got %d, %d; want 200 and the limit left alone", percent, limit)
	}
	if got := debug.SetMemoryLimit(-1); got != oldLimit {
		t.Errorf("with GOMEMLIMIT set the memory limit changed to %d", got)
	}
}
