package main

import (
	"log/slog"
	"math"
	"runtime/debug"

	"github.com/pegasus-engine/pegasus/replay"
)

// The garbage collector's settings when the environment gives none.
//
// Enqueueing is CPU-bound and a sixth of its CPU is the collector's: each
// task allocates its request, its events and its view's records, and every
// cycle marks the tasks the view holds. The daemon collects when the heap
// reaches three times what is live (GOGC=200, half as many cycles as Go's
// default), but never lets it grow past what docs/operations.md promises
// for GOGC=100 with a full budget: 2 × (budget + 40 MiB) + 130 MiB, set as
// the runtime's soft memory limit, so that the worst case stays the
// documented one. GOGC and GOMEMLIMIT, when set, are used as given.
const (
	daemonGCPercent = 200
	// fixedHeap is the documented bound's allowance beside the budget.
	fixedHeap, fixedRest = 40 << 20, 130 << 20
)

// tuneGC applies the daemon's collector settings for a memory budget of
// budget bytes; getenv reads the environment. It returns what it set (0:
// left as the environment or Go's default has it).
func tuneGC(budget int64, getenv func(string) string, logger *slog.Logger) (percent int, limit int64) {
	if getenv("GOGC") == "" {
		percent = daemonGCPercent
		debug.SetGCPercent(percent)
	}
	if getenv("GOMEMLIMIT") == "" && percent != 0 {
		if budget <= 0 {
			budget = replay.DefaultMemoryBudget
		}
		limit = math.MaxInt64
		if budget < (math.MaxInt64-fixedRest)/2-fixedHeap {
			limit = 2*(budget+fixedHeap) + fixedRest
		}
		debug.SetMemoryLimit(limit)
	}
	if percent != 0 {
		logger.Debug("garbage collector", "gc_percent", percent, "soft_memory_limit_bytes", limit)
	}
	return percent, limit
}
