package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/retention"
)

// retainer runs retention every interval until stopped. Runs never
// overlap; stop waits for a running one (which is bounded by the log's
// commit and a compaction, and cancelled by stop's context).
type retainer struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startRetention starts the retention loop, or returns nil when
// retention is off (no window).
func startRetention(ctx context.Context, c RetentionOptions, l *eventlog.Log, checkpoint func(context.Context) error, logger *slog.Logger) *retainer {
	if c.Window <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &retainer{cancel: cancel}
	opts := &retention.Options{Window: c.Window, ArchiveDir: c.ArchiveDir, Checkpoint: checkpoint, Logger: logger}
	logger.Info("retention on", "retain_finished", c.Window.String(), "interval", c.Interval.String(), "archive_dir", c.ArchiveDir)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(c.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := retention.Run(ctx, l, opts); err != nil && ctx.Err() == nil {
				logger.Error("retention run failed; the next run retries", "err", fmt.Sprint(err))
			}
		}
	}()
	return r
}

// stop ends the loop and waits for a running run; nil-safe.
func (r *retainer) stop() {
	if r == nil {
		return
	}
	r.cancel()
	r.wg.Wait()
}
