package engine

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/trace"
	"sync"
	"time"
)

// The spike trace (Options.SpikeTraceDir, docs/operations.md "A latency
// spike"): a runtime/trace flight recorder keeps the last seconds
// of the process's execution trace in memory, and an append slower than
// spikeAfter or a write stall of the storage engine writes them to a file,
// so that what held the append (a goroutine not scheduled, a syscall, the
// GC, a lock) can be read afterwards with go tool trace.

const (
	spikeAfter  = 50 * time.Millisecond // an append this slow is a spike
	spikeWindow = 10 * time.Second      // the trace kept in memory
	spikeQuiet  = 30 * time.Second      // at most one file per this
	spikeDelay  = time.Second           // the trace also shows what followed
	spikeFiles  = 20                    // files written per run, at most
)

// spikeTracer writes the flight recorder's window on a spike.
type spikeTracer struct {
	dir string
	log *slog.Logger
	fr  *trace.FlightRecorder

	// later runs f after d (time.AfterFunc; tests run it at once).
	later func(d time.Duration, f func())

	mu      sync.Mutex
	last    time.Time
	written int
}

// startSpikeTrace starts the flight recorder, or returns nil when dir is
// empty or the recorder cannot start (logged: the daemon serves anyway).
func startSpikeTrace(dir string, logger *slog.Logger) *spikeTracer {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		logger.Error("spike traces off: cannot create the directory", "dir", dir, "err", err)
		return nil
	}
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: spikeWindow, MaxBytes: 64 << 20})
	if err := fr.Start(); err != nil {
		logger.Error("spike traces off: the flight recorder did not start", "err", err)
		return nil
	}
	logger.Info("spike traces on", "dir", dir, "after", spikeAfter.String())
	return &spikeTracer{dir: dir, log: logger, fr: fr, later: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// spike records that something took d (what says what); when d is a
// spike, and none was written lately, it writes the window a second later.
func (t *spikeTracer) spike(what string, d time.Duration) {
	if t == nil || d < spikeAfter {
		return
	}
	now := time.Now()
	t.mu.Lock()
	if now.Sub(t.last) < spikeQuiet || t.written >= spikeFiles {
		t.mu.Unlock()
		return
	}
	t.last = now
	t.written++
	t.mu.Unlock()
	t.later(spikeDelay, func() {
		name := filepath.Join(t.dir, fmt.Sprintf("spike-%s.trace", now.UTC().Format("20060102T150405.000")))
		if err := t.write(name); err != nil {
			t.log.Error("spike trace not written", "file", name, "err", err)
			return
		}
		t.log.Info("spike trace written", "file", name, "what", what, "duration", d.String(), "at", now.UTC())
	})
}

func (t *spikeTracer) write(name string) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := t.fr.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// stop stops the flight recorder; nil-safe.
func (t *spikeTracer) stop() {
	if t != nil {
		t.fr.Stop()
	}
}
