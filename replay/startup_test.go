package replay

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// countCheckpoints counts the checkpoints a View logs.
type countCheckpoints struct{ n *atomic.Int64 }

func (h countCheckpoints) Enabled(context.Context, slog.Level) bool { return true }
func (h countCheckpoints) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "projections checkpointed" {
		h.n.Add(1)
	}
	return nil
}
func (h countCheckpoints) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countCheckpoints) WithGroup(string) slog.Handler      { return h }

// TestRebuildCheckpointsByBytes: a rebuild from zero checkpoints by the
// bytes pending only (here: once, at the end), not every CheckpointEvery
// events, so that a task is written about once; once recovered, the View
// checkpoints every CheckpointEvery events again.
func TestRebuildCheckpointsByBytes(t *testing.T) {
	ctx := context.Background()
	evs := replaytest.Generate(3, replaytest.Config{Tasks: 40, Concurrency: 8})
	cut := len(evs) - 30
	l, _ := logWith(t, evs[:cut])
	defer l.Close()
	var n atomic.Int64
	v, rec, err := Open(ctx, l, &Options{CheckpointEvery: 10, Logger: slog.New(countCheckpoints{&n})})
	if err != nil || !rec.Rebuilt {
		t.Fatalf("open: %+v %v", rec, err)
	}
	if got := n.Load(); got != 1 {
		t.Fatalf("a rebuild of %d events wrote %d checkpoints, want 1 (the last)", cut, got)
	}
	if err := replaytest.AppendAll(ctx, l, evs[cut:], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Fold(ctx, v, FromLog(l), FoldOptions{}); err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	busy, done := v.ckBusy, v.ckDone
	v.mu.Unlock()
	if busy {
		<-done // the background checkpoint the fold started
	}
	if got := n.Load(); got < 2 {
		t.Fatalf("30 events at CheckpointEvery 10 after recovery started no checkpoint (%d in all)", got)
	}
}
