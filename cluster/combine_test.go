package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// gateCombined stops every request of the node's combiner at a gate,
// reporting how many partitions' batches it carries.
func gateCombined(n *node) *batchGate {
	g := &batchGate{sizes: make(chan int, 16), open: make(chan struct{})}
	n.rl.beforeCombine = func(size int) {
		g.sizes <- size
		<-g.open
	}
	return g
}

// holdRequest gates a's combiner and holds a first request, an append
// to blocker (at version 1), at the gate; first gets its outcome.
func holdRequest(ctx context.Context, t *testing.T, a *node, blocker string) (*batchGate, chan error) {
	t.Helper()
	g := gateCombined(a)
	first := make(chan error, 1)
	go func() {
		_, err := a.rl.Append(ctx, blocker, eventlog.Exactly(1), eventlog.Event{Type: "STEP"})
		first <- err
	}()
	if n := g.next(t); n != 1 {
		t.Fatalf("the first request carries %d batches, want 1", n)
	}
	return g, first
}

// waitCombinerWaiting waits until k partitions' batches wait for the
// combiner's next request.
func waitCombinerWaiting(t *testing.T, n *node, k int) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		n.rl.mu.Lock()
		c := n.rl.combine
		n.rl.mu.Unlock()
		if c != nil && int(c.waiting.Load()) == k {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d batches never waited for the combiner", k)
		}
		time.Sleep(time.Millisecond)
	}
}

// combinedSetup opens node A owning every partition and holds a first
// request (an append to a third partition) at the combiner's gate while
// one append to each of s1 (partition 1) and s2 (partition 2), with the
// given ids, is checked and waits for the next request; it returns once
// that request, of both partitions' batches, is at the gate.
func combinedSetup(ctx context.Context, t *testing.T, nc *natstest.Cluster, ttl time.Duration) (a *node, la *Leases, g *batchGate, streams []string, ids []ulidPair, rest chan []error) {
	t.Helper()
	a, la, _ = ownerOfAll(t, nc, "A", ttl)
	streams = []string{streamsIn(1, testParts, 1)[0], streamsIn(2, testParts, 1)[0]}
	blocker := streamsIn(3, testParts, 1)[0]
	createStreams(ctx, t, a, append(streams, blocker)...)
	g, first := holdRequest(ctx, t, a, blocker)
	fresh := newIDs(a, 2)
	rest = make(chan []error, 1)
	go func() { rest <- appendAll(ctx, a, streams, eventlog.Exactly(1), fresh) }()
	waitCombinerWaiting(t, a, 2)
	g.open <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := g.next(t); n != 2 {
		t.Fatalf("the next request carries %d batches, want 2 (partitions 1 and 2)", n)
	}
	for i := range fresh {
		ids = append(ids, ulidPair{stream: streams[i], id: fresh[i]})
	}
	return a, la, g, streams, ids, rest
}

// ulidPair is an event's id and the stream it was appended to.
type ulidPair struct {
	stream string
	id     ulid.ULID
}

// TestCombinedRequestOfAStaleOwnerNotStored: the batches of two
// partitions go as one request (the combiner), checked while the node
// holds both; before it is published another node takes the partitions.
// JetStream refuses the whole request, and each append is answered
// ErrFenced: no event of the stale owner is stored.
func TestCombinedRequestOfAStaleOwnerNotStored(t *testing.T) {
	nc := natstest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a, la, g, streams, ids, rest := combinedSetup(ctx, t, nc, time.Second)
	b := openNodeWith(t, nc, t.TempDir(), LogOptions{Node: "B"})
	_, tookB := startLeases(t, b, LeaseOptions{TTL: time.Second, NoBalance: true})
	before := a.rl.CommitStats()
	la.pause()
	waitTook(t, tookB, 0, 1, 2, 3)
	close(g.open)
	for i, err := range <-rest {
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("stale append %d: %v, want ErrFenced", i, err)
		}
	}
	after := a.rl.CommitStats()
	if after.Combined == before.Combined || after.Refused == before.Refused {
		t.Fatalf("combined requests %d -> %d, refused %d -> %d: the combined request was not refused by JetStream",
			before.Combined, after.Combined, before.Refused, after.Refused)
	}
	if err := b.rl.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range ids {
		if _, err := b.local.Get(p.id); !errors.Is(err, eventlog.ErrNotFound) {
			t.Fatalf("the stale owner's event %s in %s is in the log (%v)", p.id, p.stream, err)
		}
	}
	wantVersions(t, b, map[string]uint64{streams[0]: 1, streams[1]: 1})
}

// TestCombinedRequestRefusedForOnePartition: another node's append moves
// partition 1 while a request of the batches of partitions 1 and 2 waits
// to be published. JetStream refuses the whole request; the batch of
// partition 2 is sent again by itself and stored, the batch of partition
// 1 is checked again against the moved partition and stored too (its
// stream did not move): neither append fails, each event is stored once.
func TestCombinedRequestRefusedForOnePartition(t *testing.T) {
	nc := natstest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a, _, g, streams, ids, rest := combinedSetup(ctx, t, nc, 3*time.Second)
	b := openNodeWith(t, nc, t.TempDir(), LogOptions{Node: "B"})
	before := a.rl.CommitStats()
	// B (no lease) creates another stream of partition 1.
	other := streamsIn(1, testParts, 2)[1]
	if _, err := b.rl.Append(ctx, other, eventlog.NoStream, eventlog.Event{Type: "CREATED"}); err != nil {
		t.Fatal(err)
	}
	close(g.open)
	noAppendErrors(t, <-rest)
	if after := a.rl.CommitStats(); after.Refused < before.Refused+2 {
		t.Fatalf("refused batches %d -> %d: the combined request was not refused as a whole", before.Refused, after.Refused)
	}
	if err := b.rl.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range ids {
		if _, err := b.local.Get(p.id); err != nil {
			t.Fatalf("event %s of %s: %v", p.id, p.stream, err)
		}
	}
	wantVersions(t, b, map[string]uint64{streams[0]: 2, streams[1]: 2, other: 1})
}
