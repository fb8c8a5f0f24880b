package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/retention"
)

// retentionFlags are serve's retention flags (docs/retention.md).
func retentionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "retain-finished", EnvVars: []string{"PEGASUS_RETAIN_FINISHED"},
			Usage: "archive finished tasks whose last event is older than this (e.g. 720h) and remove them from the live log; 0: keep everything (docs/retention.md)"},
		&cli.DurationFlag{Name: "retention-interval", Value: time.Hour, EnvVars: []string{"PEGASUS_RETENTION_INTERVAL"},
			Usage: "how often retention runs, with --retain-finished"},
		&cli.StringFlag{Name: "archive-dir", EnvVars: []string{"PEGASUS_ARCHIVE_DIR"},
			Usage: "where retention writes its archives (default: DATA_DIR/archive)"},
	}
}

// retentionConfig is the retention part of config.
type retentionConfig struct {
	window, interval time.Duration
	archiveDir       string
}

func retentionConfigFrom(cc *cli.Context, dataDir string) (retentionConfig, error) {
	c := retentionConfig{window: cc.Duration("retain-finished"), interval: cc.Duration("retention-interval"), archiveDir: cc.String("archive-dir")}
	switch {
	case c.window < 0:
		return c, errors.New("--retain-finished must not be negative")
	case c.window > 0 && c.interval <= 0:
		return c, errors.New("--retention-interval must be positive")
	}
	if c.archiveDir == "" {
		c.archiveDir = filepath.Join(dataDir, "archive")
	}
	return c, nil
}

// retainer runs retention every interval until stopped. Runs never
// overlap; stop waits for a running one (which is bounded by the log's
// commit and a compaction, and cancelled by stop's context).
type retainer struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startRetention starts the retention loop, or returns nil when
// --retain-finished is off.
func startRetention(ctx context.Context, c retentionConfig, l *eventlog.Log, checkpoint func(context.Context) error, logger *slog.Logger) *retainer {
	if c.window <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &retainer{cancel: cancel}
	opts := &retention.Options{Window: c.window, ArchiveDir: c.archiveDir, Checkpoint: checkpoint, Logger: logger}
	logger.Info("retention on", "retain_finished", c.window.String(), "interval", c.interval.String(), "archive_dir", c.archiveDir)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(c.interval)
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
