package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestOwnAppendBeforeDelivery: a node's append returns, its events in
// the copy, once JetStream acknowledged it, without waiting for the
// stream to deliver it; an append of this node that follows another
// node's in the stream waits for that one, and both copies end the
// stream's events in its order.
func TestOwnAppendBeforeDelivery(t *testing.T) {
	nc := natstest.Start(t, 1)
	a, b := openNode(t, nc, t.TempDir()), openNode(t, nc, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var held atomic.Bool
	open := make(chan struct{})
	var opened sync.Once
	release := func() { opened.Do(func() { close(open) }) }
	t.Cleanup(release) // before the nodes close: their followers wait on it
	a.rl.beforeDeliver = func() {
		if held.Load() {
			<-open
		}
	}
	held.Store(true)
	// Nothing reaches a's follower from the stream from here on.
	res, err := a.rl.Append(ctx, "s1", eventlog.NoStream, eventlog.Event{Type: "ONE"}, eventlog.Event{Type: "TWO"})
	if err != nil {
		t.Fatalf("append while delivery is held: %v", err)
	}
	if v, _ := a.local.StreamVersion("s1"); v != 2 || res.Version != 2 {
		t.Fatalf("s1 at version %d in the copy (result %d), want 2", v, res.Version)
	}
	if _, err := b.rl.Append(ctx, "s2", eventlog.NoStream, eventlog.Event{Type: "OTHER"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.rl.Append(ctx, "s3", eventlog.NoStream, eventlog.Event{Type: "AFTER"})
		done <- err
	}()
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sameCopies(t, a, b)
	// Three messages: a's two events are one (wire.go), then b's and a's.
	if got, last := a.rl.Applied(), lastSeq(t, a); got != 3 || last != 3 {
		t.Fatalf("a applied %d, the stream ends at %d, want 3", got, last)
	}
}
