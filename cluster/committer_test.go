package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// batchGate holds a committer's batches before they are published: each
// batch's size is sent on sizes, and the batch waits for a value on open.
type batchGate struct {
	sizes chan int
	open  chan struct{}
}

func gateBatches(n *node) *batchGate {
	g := &batchGate{sizes: make(chan int, 16), open: make(chan struct{})}
	n.rl.beforeBatch = func(_, size int) {
		g.sizes <- size
		<-g.open
	}
	return g
}

// next waits for the next batch to reach the gate and returns its size.
func (g *batchGate) next(t *testing.T) int {
	t.Helper()
	select {
	case n := <-g.sizes:
		return n
	case <-time.After(testWait):
		t.Fatal("no batch reached the gate")
		return 0
	}
}

// waitQueued waits until k appends wait in partition p's committer's
// queue.
func waitQueued(t *testing.T, n *node, p, k int) {
	t.Helper()
	waitCommitter(t, n, p, k, func(c *committer) int { return len(c.reqs) })
}

// waitWaiting waits until k appends handed to partition p's committer
// are in no batch yet (queued, or taken for its next batch).
func waitWaiting(t *testing.T, n *node, p, k int) {
	t.Helper()
	waitCommitter(t, n, p, k, func(c *committer) int { return int(c.waiting.Load()) })
}

// waitCommitter waits until count gives k for partition p's committer.
func waitCommitter(t *testing.T, n *node, p, k int, count func(*committer) int) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for {
		n.rl.mu.Lock()
		c := n.rl.committers[p]
		n.rl.mu.Unlock()
		if c != nil && count(c) == k {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d appends never waited for partition %d's committer", k, p)
		}
		time.Sleep(time.Millisecond)
	}
}

// streamsIn returns k distinct task streams of partition p of n.
func streamsIn(p, n, k int) []string {
	var out []string
	for i := 0; len(out) < k; i++ {
		if s := fmt.Sprintf("task-%d", i); PartitionOf(s, n) == p {
			out = append(out, s)
		}
	}
	return out
}

// appendAll appends one event to each stream at once, at the version the
// versions map gives, and returns each append's error.
func appendAll(ctx context.Context, n *node, streams []string, exp eventlog.ExpectedVersion, ids []ulid.ULID) []error {
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = n.rl.Append(ctx, s, exp, eventlog.Event{ID: ids[i], Type: "STEP"})
		}()
	}
	wg.Wait()
	return errs
}

// noAppendErrors fails the test at the first append (appendAll) that
// failed.
func noAppendErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

func newIDs(n *node, k int) []ulid.ULID {
	ids := make([]ulid.ULID, k)
	for i := range ids {
		ids[i] = n.local.NewID()
	}
	return ids
}

// testParts is the partition count of the committer tests.
const testParts = 4

// ownerOfAll opens node name with testParts partitions and returns it
// once it holds them all, with its leases (TTL ttl, no balancing) and
// the channel of the partitions it takes later.
func ownerOfAll(t *testing.T, nc *natstest.Cluster, name string, ttl time.Duration) (*node, *Leases, chan int) {
	t.Helper()
	// A batch's deadline (AckTimeout) runs while a test holds it at a
	// gate: it is as long as the test's wait, so a loaded machine never
	// ends a held batch.
	n := openNodeWith(t, nc, t.TempDir(), LogOptions{Partitions: testParts, Node: name, AckTimeout: testWait})
	l, took := startLeases(t, n, LeaseOptions{TTL: ttl, NoBalance: true})
	waitTook(t, took, 0, 1, 2, 3)
	return n, l, took
}

// createStreams appends a first event to each stream.
func createStreams(ctx context.Context, t *testing.T, n *node, streams ...string) {
	t.Helper()
	for _, s := range streams {
		if _, err := n.rl.Append(ctx, s, eventlog.NoStream, eventlog.Event{Type: "CREATED"}); err != nil {
			t.Fatal(err)
		}
	}
}

// wantVersions checks the streams' versions in n's copy.
func wantVersions(t *testing.T, n *node, want map[string]uint64) {
	t.Helper()
	for s, v := range want {
		if got, _ := n.local.StreamVersion(s); got != v {
			t.Errorf("stream %s at version %d, want %d", s, got, v)
		}
	}
}

// batchSizes records the size of every batch a committer checks, without
// holding it.
func batchSizes(n *node) chan int {
	sizes := make(chan int, 16)
	n.rl.beforeBatch = func(_, size int) { sizes <- size }
	return sizes
}

// TestCommitterJoinsTheNextBatch: while a partition's batch is in flight,
// the owner's appends that arrive gather and go as the next batch, one
// request, with no refusal and no pause: the owner never races itself.
func TestCommitterJoinsTheNextBatch(t *testing.T) {
	nc := natstest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a, _, _ := ownerOfAll(t, nc, "A", 3*time.Second)
	streams := streamsIn(1, testParts, 6)
	createStreams(ctx, t, a, streams...)
	before, commits := a.rl.CommitStats(), a.local.Stats().Commits
	sizes := batchSizes(a)
	g := gateCombined(a) // the batch is in flight: taken for a request
	first := make(chan error, 1)
	go func() {
		_, err := a.rl.Append(ctx, streams[0], eventlog.Exactly(1), eventlog.Event{Type: "STEP"})
		first <- err
	}()
	if n := g.next(t); n != 1 {
		t.Fatalf("the first request carries %d batches, want 1", n)
	}
	rest := make(chan []error, 1)
	go func() { rest <- appendAll(ctx, a, streams[1:], eventlog.Exactly(1), newIDs(a, 5)) }()
	waitWaiting(t, a, 1, 5)
	close(g.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	noAppendErrors(t, <-rest)
	if a, b := <-sizes, <-sizes; a != 1 || b != 5 {
		t.Fatalf("batches of %d and %d appends, want 1 and the 5 that waited", a, b)
	}
	st := a.rl.CommitStats()
	if got := st.Batches - before.Batches; got != 2 {
		t.Errorf("%d batches, want 2", got)
	}
	if st.Refused != before.Refused {
		t.Errorf("%d batches refused: the owner raced itself", st.Refused-before.Refused)
	}
	if st.Joined != before.Joined {
		t.Errorf("%d appends joined a batch already in flight", st.Joined-before.Joined)
	}
	// The follower writes a batch in one local commit (two batches: two
	// commits, or a few more if something else appended meanwhile), not
	// one per append (six).
	if got := a.local.Stats().Commits - commits; got >= 6 {
		t.Errorf("the local copy took %d commits for 2 batches of 6 appends", got)
	}
	want := map[string]uint64{}
	for _, s := range streams {
		want[s] = 2
	}
	wantVersions(t, a, want)
}

// TestCommitterJoinsTheWaitingBatch: a partition's batch that waits for
// the combiner (another partition's request is in flight) is not sealed:
// the owner's appends to the partition that arrive meanwhile, checked
// against the batch's view, join it, and go in the same request instead
// of waiting for its outcome. One that conflicts with the batch is
// answered at once and the others still join.
func TestCommitterJoinsTheWaitingBatch(t *testing.T) {
	nc := natstest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a, _, _ := ownerOfAll(t, nc, "A", 3*time.Second)
	streams := streamsIn(1, testParts, 6)
	blocker := streamsIn(3, testParts, 1)[0]
	createStreams(ctx, t, a, append(streams, blocker)...)
	before := a.rl.CommitStats()
	g, first := holdRequest(ctx, t, a, blocker)
	// Partition 1's batch, checked, waits for the combiner.
	waiting := make(chan error, 1)
	go func() {
		_, err := a.rl.Append(ctx, streams[0], eventlog.Exactly(1), eventlog.Event{Type: "STEP"})
		waiting <- err
	}()
	waitCombinerWaiting(t, a, 1)
	// Five appends to its other streams, and one to its first stream at
	// the version the waiting batch moves it from: a conflict.
	rest := make(chan []error, 1)
	go func() { rest <- appendAll(ctx, a, streams[1:], eventlog.Exactly(1), newIDs(a, 5)) }()
	_, err := a.rl.Append(ctx, streams[0], eventlog.Exactly(1), eventlog.Event{Type: "LATE"})
	if !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("an append at the version the waiting batch moves on: %v, want a conflict", err)
	}
	deadline := time.Now().Add(testWait)
	for a.rl.CommitStats().Joined-before.Joined != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d appends joined the waiting batch, want 5", a.rl.CommitStats().Joined-before.Joined)
		}
		time.Sleep(time.Millisecond)
	}
	g.open <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := g.next(t); n != 1 {
		t.Fatalf("the next request carries %d batches, want partition 1's", n)
	}
	close(g.open)
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	noAppendErrors(t, <-rest)
	st := a.rl.CommitStats()
	if got := st.Batches - before.Batches; got != 2 {
		t.Errorf("%d batches, want 2: the blocker's and partition 1's", got)
	}
	if got := st.Appends - before.Appends; got != 7 {
		t.Errorf("%d appends stored, want 7", got)
	}
	if st.Refused != before.Refused {
		t.Errorf("%d batches refused", st.Refused-before.Refused)
	}
	want := map[string]uint64{blocker: 2}
	for _, s := range streams {
		want[s] = 2
	}
	wantVersions(t, a, want)
}

// TestCommitterStaleOwnerBatchNotStored: two owners of one partition at
// once. A's lease expires (it stops renewing, as a paused process) while
// its batch of appends is checked and about to be published; B takes the
// partition and records itself. A's batch, sent with the partition's old
// last sequence, is refused whole by JetStream, every append of it is
// ErrFenced, and none of its events is in the stream.
func TestCommitterStaleOwnerBatchNotStored(t *testing.T) {
	nc := natstest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a, la, _ := ownerOfAll(t, nc, "A", time.Second)
	b := openNodeWith(t, nc, t.TempDir(), LogOptions{Node: "B"})
	_, tookB := startLeases(t, b, LeaseOptions{TTL: time.Second, NoBalance: true})
	streams := streamsIn(2, testParts, 5)
	createStreams(ctx, t, a, streams...)
	// The first batch is held in flight (taken for a request); the next,
	// of the four appends that wait meanwhile, is held once checked.
	inFlight := gateCombined(a)
	g := &batchGate{sizes: make(chan int, 16), open: make(chan struct{})}
	a.rl.beforeBatch = func(_, size int) {
		if size == 4 {
			g.sizes <- size
			<-g.open
		}
	}
	first := make(chan error, 1)
	go func() {
		_, err := a.rl.Append(ctx, streams[0], eventlog.Exactly(1), eventlog.Event{Type: "STEP"})
		first <- err
	}()
	inFlight.next(t)
	ids := newIDs(a, 4)
	rest := make(chan []error, 1)
	go func() { rest <- appendAll(ctx, a, streams[1:], eventlog.Exactly(1), ids) }()
	waitWaiting(t, a, 2, 4)
	close(inFlight.open) // the first batch goes while A still holds the partition
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := g.next(t); n != 4 {
		t.Fatalf("the stale batch holds %d appends, want 4", n)
	}
	// The batch is checked and waits at the gate: A stops renewing and B
	// takes over and records itself before A publishes.
	la.pause()
	waitTook(t, tookB, 0, 1, 2, 3)
	refused := a.rl.CommitStats().Refused
	close(g.open)
	for i, err := range <-rest {
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("stale append %d: %v, want ErrFenced", i, err)
		}
	}
	if a.rl.CommitStats().Refused == refused {
		t.Fatal("the stale batch was never sent to JetStream: the test did not exercise the fence")
	}
	if err := b.rl.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := b.local.Get(id); !errors.Is(err, eventlog.ErrNotFound) {
			t.Fatalf("the stale owner's event %s is in the log (%v)", id, err)
		}
	}
	want := map[string]uint64{}
	for _, s := range streams[1:] {
		want[s] = 1
	}
	wantVersions(t, b, want)
}

// TestCommitterHoldsForAnAppendOverPartitions: an append over two
// partitions the node holds (a task and the one it admits next) waits for
// the batch in flight on one of them, is published while both committers
// hold still, and the next batch follows it: nothing is refused.
func TestCommitterHoldsForAnAppendOverPartitions(t *testing.T) {
	nc := natstest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a, _, _ := ownerOfAll(t, nc, "A", 3*time.Second)
	s1, s2 := streamsIn(1, testParts, 2), streamsIn(2, testParts, 1)[0]
	createStreams(ctx, t, a, append(s1, s2)...)
	before := a.rl.CommitStats()
	g := gateBatches(a)
	first := make(chan error, 1)
	go func() {
		_, err := a.rl.Append(ctx, s1[0], eventlog.Exactly(1), eventlog.Event{Type: "STEP"})
		first <- err
	}()
	g.next(t)
	cross := make(chan error, 1)
	go func() {
		_, err := a.rl.AppendMulti(ctx,
			eventlog.StreamAppend{Stream: s1[1], Expected: eventlog.Exactly(1), Events: []eventlog.Event{{Type: "DONE"}}},
			eventlog.StreamAppend{Stream: s2, Expected: eventlog.Exactly(1), Events: []eventlog.Event{{Type: "ADMITTED"}}})
		cross <- err
	}()
	waitQueued(t, a, 1, 1) // the hold waits behind the batch in flight
	close(g.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-cross; err != nil {
		t.Fatalf("the append over two partitions: %v", err)
	}
	// The committer's next batch comes after it.
	if _, err := a.rl.Append(ctx, s1[0], eventlog.Exactly(2), eventlog.Event{Type: "STEP"}); err != nil {
		t.Fatal(err)
	}
	if st := a.rl.CommitStats(); st.Refused != before.Refused {
		t.Fatalf("%d batches refused", st.Refused-before.Refused)
	}
	wantVersions(t, a, map[string]uint64{s1[0]: 3, s1[1]: 2, s2: 2})
}
