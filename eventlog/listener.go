package eventlog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// StorageEvents receives what the storage engine does in the background
// that can hold an append for a while: write stalls (with how long each
// held the writes), memtable flushes, compactions and slow
// disk operations. Each callback may be nil; they are called from Pebble's
// goroutines, some while Pebble holds its own lock, so they must be quick
// and must not call the Log. Set Options.Events to receive them.
//
// Every event is also logged on Options.Logger: at Info when it took
// SlowAfter or longer (a stall, a flush, a compaction), else at Debug, with its duration, so that a latency spike
// seen by a client can be matched against the log's own record of what it
// was doing at that time.
type StorageEvents struct {
	// Stall is called when a write stall ends, with its duration and the
	// reason Pebble gave when it began ("memtable count limit reached",
	// "L0 file count limit exceeded").
	Stall func(d time.Duration, reason string)
	// Flush is called when a memtable flush ends, with its wall time and
	// the bytes of the memtables it flushed.
	Flush func(d time.Duration, bytes uint64)
	// Compaction is called when a compaction ends, with its wall time.
	Compaction func(d time.Duration)

	// SlowAfter is the duration from which an event is logged at Info.
	// The default value is 100ms.
	SlowAfter time.Duration

	mu         sync.Mutex
	stallBegin time.Time
	stallWhy   string
}

// pebbleListener is the Pebble EventListener that feeds e and logs each
// event on logger.
func (e *StorageEvents) pebbleListener(logger *slog.Logger) pebble.EventListener {
	slow := e.SlowAfter
	if slow <= 0 {
		slow = 100 * time.Millisecond
	}
	level := func(d time.Duration) slog.Level {
		if d >= slow {
			return slog.LevelInfo
		}
		return slog.LevelDebug
	}
	ctx := context.Background()
	return pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			e.mu.Lock()
			e.stallBegin, e.stallWhy = time.Now(), info.Reason
			e.mu.Unlock()
			logger.Info("eventlog: write stall begins", "component", "pebble", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			e.mu.Lock()
			begin, why := e.stallBegin, e.stallWhy
			e.stallBegin = time.Time{}
			e.mu.Unlock()
			if begin.IsZero() {
				return // began before the listener was set
			}
			d := time.Since(begin)
			logger.Info("eventlog: write stall ends", "component", "pebble", "reason", why, "duration", d)
			if e.Stall != nil {
				e.Stall(d, why)
			}
		},
		FlushEnd: func(info pebble.FlushInfo) {
			logger.Log(ctx, level(info.TotalDuration), "eventlog: flush", "component", "pebble",
				"duration", info.TotalDuration, "bytes", info.InputBytes, "reason", info.Reason, "err", info.Err)
			if e.Flush != nil && info.Err == nil {
				e.Flush(info.TotalDuration, info.InputBytes)
			}
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			logger.Log(ctx, level(info.TotalDuration), "eventlog: compaction", "component", "pebble",
				"duration", info.TotalDuration, "reason", info.Reason, "err", info.Err)
			if e.Compaction != nil && info.Err == nil {
				e.Compaction(info.TotalDuration)
			}
		},
	}
}

// withEvents adds e's listener (nil: none) to po's.
func withEvents(po *pebble.Options, e *StorageEvents, logger *slog.Logger) {
	if e == nil {
		return
	}
	l := e.pebbleListener(logger)
	if po.EventListener == nil {
		po.EventListener = &l
		return
	}
	tee := pebble.TeeEventListener(*po.EventListener, l)
	po.EventListener = &tee
}
