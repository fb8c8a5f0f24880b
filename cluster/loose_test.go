package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// waitLooseQueued waits until k appends wait for the committer of streams
// of no partition.
func waitLooseQueued(t *testing.T, c *looseCommitter, k int) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for len(c.reqs) != k {
		if time.Now().After(deadline) {
			t.Fatalf("%d appends never queued", k)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLooseCommitterBatches: appends to streams of no partition that wait
// together go as one atomic batch, one request, each with its own check;
// an append to a stream already in that batch waits for its outcome and
// is checked against it (sent in the same batch, its check would have
// been refused).
func TestLooseCommitterBatches(t *testing.T) {
	nc := natstest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a := openNodeWith(t, nc, t.TempDir(), LogOptions{Partitions: testParts, Node: "A"})
	// The committer, not started yet: the appends queue.
	lc := &looseCommitter{r: a.rl, reqs: make(chan *commitReq, maxBatch)}
	a.rl.mu.Lock()
	a.rl.loose = lc
	a.rl.mu.Unlock()
	sizes := make(chan int, 4)
	a.rl.beforeLoose = func(n int) { sizes <- n }
	before := a.rl.CommitStats()
	errs := make(chan error, 6)
	for i := range 5 {
		go func() {
			_, err := a.rl.Append(ctx, fmt.Sprintf("$t%d", i), eventlog.NoStream, eventlog.Event{Type: "A"})
			errs <- err
		}()
	}
	waitLooseQueued(t, lc, 5)
	go func() {
		_, err := a.rl.Append(ctx, "$t0", eventlog.Exactly(1), eventlog.Event{Type: "B"})
		errs <- err
	}()
	waitLooseQueued(t, lc, 6)
	go lc.run(a.rl.ctx)
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := <-sizes; n != 5 {
		t.Fatalf("the first batch holds %d appends, want the 5 of distinct streams", n)
	}
	st := a.rl.CommitStats()
	if got := st.Batches - before.Batches; got != 1 {
		t.Errorf("%d batches, want 1 (the append that waited went alone)", got)
	}
	if got := st.Appends - before.Appends; got != 5 {
		t.Errorf("%d appends in batches, want 5", got)
	}
	if st.Refused != before.Refused {
		t.Errorf("%d batches refused", st.Refused-before.Refused)
	}
	wantVersions(t, a, map[string]uint64{"$t0": 2, "$t1": 1, "$t2": 1, "$t3": 1, "$t4": 1})
}

// TestPartialBatchNotStored: an atomic batch one of whose checks fails,
// on its last message, is refused whole: none of its messages is in the
// stream or the copy, and the next append goes on from where the stream
// was.
func TestPartialBatchNotStored(t *testing.T) {
	nc := natstest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a := openNodeWith(t, nc, t.TempDir(), LogOptions{Partitions: testParts, Node: "A"})
	if _, err := a.rl.Append(ctx, "$b", eventlog.NoStream, eventlog.Event{Type: "B0"}); err != nil {
		t.Fatal(err)
	}
	js := nc.JetStream()
	s, err := js.Stream(ctx, a.rl.Stream())
	if err != nil {
		t.Fatal(err)
	}
	info0, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parts, wire, _, err := a.rl.prepare([]eventlog.StreamAppend{
		{Stream: "$a", Expected: eventlog.NoStream, Events: []eventlog.Event{{Type: "A1"}, {Type: "A2"}}},
		{Stream: "$b", Expected: eventlog.Exactly(1), Events: []eventlog.Event{{Type: "B1"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// $b's check on its message (the batch's last) expects a sequence its
	// subject is not at.
	checks := []check{{seq: 0}, {seq: int64(info0.State.LastSeq) + 7}}
	if _, err := a.rl.publish(ctx, wire, checks); !isWrongLastSeq(err) {
		t.Fatalf("publish: %v, want JetStream's wrong last sequence", err)
	}
	info1, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info1.State.Msgs != info0.State.Msgs || info1.State.LastSeq != info0.State.LastSeq {
		t.Fatalf("the stream went from %d messages (last %d) to %d (last %d): part of a refused batch was stored",
			info0.State.Msgs, info0.State.LastSeq, info1.State.Msgs, info1.State.LastSeq)
	}
	if _, err := a.rl.Append(ctx, "$b", eventlog.Exactly(1), eventlog.Event{Type: "B1"}); err != nil {
		t.Fatal(err)
	}
	wantVersions(t, a, map[string]uint64{"$a": 0, "$b": 2})
	for _, sa := range parts {
		for _, ev := range sa.Events {
			if _, err := a.local.Get(ev.ID); err == nil {
				t.Errorf("event %s of the refused batch is in the copy", ev.Type)
			}
		}
	}
}
