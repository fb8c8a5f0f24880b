package main

import (
	"log/slog"
	"runtime/debug"
)

// daemonGCPercent is the garbage collector's setting when the environment
// gives none (GOGC unset).
//
// Enqueueing is CPU-bound and a sixth of its CPU was the collector's: each
// task allocates its request, its events and its view's records, and
// every cycle marks the tasks the daemon holds. At GOGC=200 the collector
// lets the heap reach three times what is live before it collects, half
// as many cycles as Go's default, for a larger heap (docs/operations.md).
// A soft memory limit in place of the environment's was tried and not
// kept: with deep queues the live heap neared it and the collector ran
// more often than at Go's default. GOGC and GOMEMLIMIT, when set, are used
// as given.
const daemonGCPercent = 200

// tuneGC applies daemonGCPercent unless getenv("GOGC") is set, and
// returns what it set (0: left as the environment has it).
func tuneGC(getenv func(string) string, logger *slog.Logger) int {
	if getenv("GOGC") != "" {
		return 0
	}
	debug.SetGCPercent(daemonGCPercent)
	logger.Debug("garbage collector", "gc_percent", daemonGCPercent)
	return daemonGCPercent
}
