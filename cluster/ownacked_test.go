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

// TestAcknowledgedAppendsAnsweredFromTheWrite: the appends of one batch
// (two of them to one stream, one over two streams, one part too large
// for one message) are answered with the positions the follower wrote
// them at, which are the copy's: the same as reading them back.
func TestAcknowledgedAppendsAnsweredFromTheWrite(t *testing.T) {
	nc := natstest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a, _, _ := ownerOfAll(t, nc, "A", 3*time.Second)
	a.rl.pack = 64 // a part of several events is several messages
	streams := streamsIn(1, testParts, 3)
	createStreams(ctx, t, a, streams...)
	sizes := batchSizes(a)
	g := gateCombined(a) // the first batch in flight, the others wait
	first := make(chan error, 1)
	go func() {
		_, err := a.rl.Append(ctx, streams[2], eventlog.Exactly(1), eventlog.Event{Type: "STEP"})
		first <- err
	}()
	g.next(t)
	body := []byte(`{"text":"a body longer than the packing limit of this test"}`)
	appends := [][]eventlog.StreamAppend{
		{{Stream: streams[0], Expected: eventlog.Exactly(1), Events: []eventlog.Event{{Type: "A1"}, {Type: "A2", Body: body}, {Type: "A3"}}}},
		{{Stream: streams[1], Expected: eventlog.Exactly(1), Events: []eventlog.Event{{Type: "B1"}}},
			{Stream: streams[2], Expected: eventlog.Exactly(2), Events: []eventlog.Event{{Type: "C1"}}}},
		{{Stream: streams[0], Expected: eventlog.Exactly(4), Events: []eventlog.Event{{Type: "A4"}}}},
	}
	results := make([][]eventlog.AppendResult, len(appends))
	errs := make([]error, len(appends))
	var wg sync.WaitGroup
	for i, parts := range appends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 2 {
				waitWaiting(t, a, 1, 2) // after the other two, in the same batch
			}
			results[i], errs[i] = a.rl.AppendMulti(ctx, parts...)
		}()
		if i < 2 {
			waitWaiting(t, a, 1, i+1)
		}
	}
	waitWaiting(t, a, 1, 3)
	close(g.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n, m := <-sizes, <-sizes; n != 1 || m != 3 {
		t.Fatalf("batches of %d and %d appends, want 1 and 3", n, m)
	}
	wg.Wait()
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("append %d: %v", i, errs[i])
		}
		for k, pr := range res {
			evs := pr.Events
			if len(evs) != len(appends[i][k].Events) || pr.FirstSeq != evs[0].Seq || pr.LastSeq != evs[len(evs)-1].Seq || pr.Version != evs[len(evs)-1].Version {
				t.Fatalf("append %d part %d: %d-%d v%d with %d events", i, k, pr.FirstSeq, pr.LastSeq, pr.Version, len(evs))
			}
			for j, ev := range evs {
				got, err := a.local.Get(ev.ID)
				if err != nil || got.Seq != ev.Seq || got.Version != ev.Version || got.Stream != appends[i][k].Stream ||
					got.Type != appends[i][k].Events[j].Type || string(got.Body) != string(appends[i][k].Events[j].Body) {
					t.Fatalf("append %d part %d event %d: %+v, the copy holds %+v (%v)", i, k, j, ev, got, err)
				}
			}
		}
	}
	if v := [3]uint64{results[0][0].Version, results[1][0].Version, results[2][0].Version}; v != [3]uint64{4, 2, 5} {
		t.Fatalf("versions %v, want [4 2 5]", v)
	}
}
