package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// streamIn returns a task stream name in partition p of n.
func streamIn(p, n int) string {
	for i := 0; ; i++ {
		if s := fmt.Sprintf("task-%d", i); PartitionOf(s, n) == p {
			return s
		}
	}
}

// startLeases starts a node's leases and returns a channel that gets each
// partition it takes.
func startLeases(t *testing.T, n *node, opts LeaseOptions) (*Leases, chan int) {
	t.Helper()
	took := make(chan int, 64)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	l, err := n.rl.StartLeases(ctx, opts, func(p int) { took <- p })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l, took
}

// waitTook waits until a node took every partition in ps (in any order).
func waitTook(t *testing.T, took chan int, ps ...int) {
	t.Helper()
	want := map[int]bool{}
	for _, p := range ps {
		want[p] = true
	}
	timeout := time.After(testWait)
	for len(want) > 0 {
		select {
		case p := <-took:
			delete(want, p)
		case <-timeout:
			t.Fatalf("partitions %v never taken", want)
		}
	}
}

// TestLeasesFenceAStaleOwner: node A takes every partition of a
// three-replica log (without balancing) and appends to a task (fenced: its appends carry the
// partition's last sequence); a second node, B, takes nothing while A
// renews. A then stops renewing, as a paused process would; once the
// leases expire B takes them and records itself as the owner. An append A
// prepared before (the check a paused owner would send when it wakes) is
// refused by JetStream, even though B never touched the task, and A's
// appends are refused with ErrFenced from then on, while B's go through:
// nothing of the stale owner is applied.
func TestLeasesFenceAStaleOwner(t *testing.T) {
	nc := natstest.Start(t, 3)
	const parts = 4
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	// The appends' time bound is the test's: under -race on a loaded
	// machine a node's copy has taken over 5 s (the default) to apply the
	// other node's append that its refused batch waits for.
	a := openNodeWith(t, nc, t.TempDir(), LogOptions{Partitions: parts, Node: "A", AckTimeout: testWait})
	b := openNodeWith(t, nc, t.TempDir(), LogOptions{Partitions: 8, Node: "B", AckTimeout: testWait}) // the stream's recorded count wins
	if a.rl.parts != parts || b.rl.parts != parts {
		t.Fatalf("partitions %d and %d, want %d", a.rl.parts, b.rl.parts, parts)
	}
	la, tookA := startLeases(t, a, LeaseOptions{TTL: time.Second, NoBalance: true})
	waitTook(t, tookA, 0, 1, 2, 3)
	lb, tookB := startLeases(t, b, LeaseOptions{TTL: time.Second, NoBalance: true})

	task, other := streamIn(2, parts), streamIn(2, parts)+"x"
	for PartitionOf(other, parts) != 2 {
		other += "x"
	}
	if _, err := a.rl.Append(ctx, task, eventlog.NoStream, eventlog.Event{Type: "STEP"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.rl.Append(ctx, task, eventlog.Exactly(1), eventlog.Event{Type: "STEP"}); err != nil {
		t.Fatalf("the owner's fenced append: %v", err)
	}
	// Another node's append to the partition moves it: a fenced check
	// made before fails at JetStream, and a fenced append checks again.
	stale := eventlog.StreamAppend{Stream: task, Expected: eventlog.Exactly(2), Events: []eventlog.Event{{ID: a.local.NewID(), Type: "STEP", Time: time.Now()}}}
	chk, err := a.rl.check(ctx, stale)
	if err != nil || chk.subj != partitionFilter(2) {
		t.Fatalf("the owner's check %+v: %v", chk, err)
	}
	if _, err := b.rl.Append(ctx, other, eventlog.NoStream, eventlog.Event{Type: "STEP"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.rl.publish(ctx, wireOfT(t, stale), []check{chk}); !isWrongLastSeq(err) {
		t.Fatalf("a fenced append behind its partition: %v, want a wrong last sequence", err)
	}
	if _, err := a.rl.Append(ctx, task, eventlog.Exactly(2), eventlog.Event{Type: "STEP"}); err != nil {
		t.Fatalf("the owner's fenced append after another node's: %v", err)
	}
	if held := lb.Held(); len(held) != 0 {
		t.Fatalf("B holds %v while A renews", held)
	}

	// A pauses; B takes over.
	stale.Expected = eventlog.Exactly(3)
	if chk, err = a.rl.check(ctx, stale); err != nil {
		t.Fatal(err)
	}
	la.pause()
	waitTook(t, tookB, 0, 1, 2, 3)
	if _, err := a.rl.publish(ctx, wireOfT(t, stale), []check{chk}); !isWrongLastSeq(err) {
		t.Fatalf("the stale owner's prepared append: %v, want refused", err)
	}
	_, err = a.rl.Append(ctx, task, eventlog.Exactly(3), eventlog.Event{Type: "STALE"})
	if !errors.Is(err, ErrFenced) || !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("the stale owner's append: %v, want ErrFenced", err)
	}
	if _, err := b.rl.Append(ctx, task, eventlog.Exactly(3), eventlog.Event{Type: "STEP"}); err != nil {
		t.Fatalf("the new owner's append: %v", err)
	}
	sameCopies(t, a, b)
	it := a.local.ReadStream(task, 1)
	defer it.Close()
	n := 0
	for it.Next() {
		n++
		if it.Event().Type != "STEP" {
			t.Errorf("version %d is %s", it.Event().Version, it.Event().Type)
		}
	}
	if n != 4 {
		t.Fatalf("the task has %d events, want 4", n)
	}
	// The owners are recorded in the log.
	if o := a.rl.owners[2]; o.Node != "B" {
		t.Fatalf("partition 2's last PARTITION_OWNED names %+v", o)
	}
}

// TestLeasesBalance: node A holds all four partitions; once B is live, A
// gives back the two above its share (ceil(4 / 2)), keeping their leases
// (and its fence) until its Release returns, and B takes them. When B
// stops cleanly, A takes them back at once. A singleton runs on one node
// at a time and moves to the other when its holder stops.
func TestLeasesBalance(t *testing.T) {
	nc := natstest.Start(t, 1)
	const parts = 4
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	a := openNodeWith(t, nc, t.TempDir(), LogOptions{Partitions: parts, Node: "A"})
	b := openNodeWith(t, nc, t.TempDir(), LogOptions{Partitions: parts, Node: "B"})
	runs := make(chan string, 8) // "+A" when A starts the singleton, "-A" when it stops it
	singleton := func(node string) []Singleton {
		return []Singleton{{Name: "job", Start: func() error { runs <- "+" + node; return nil }, Stop: func() { runs <- "-" + node }}}
	}
	released, hold := make(chan int, parts), make(chan struct{})
	// Nothing here waits for a lease to expire: a TTL far longer than the
	// renewals keeps A's leases alive while the test holds A's Release,
	// however slowly a loaded machine renews them.
	const ttl, renew = 10 * time.Second, 250 * time.Millisecond
	la, tookA := startLeases(t, a, LeaseOptions{TTL: ttl, Renew: renew, Singletons: singleton("A"),
		Release: func(_ context.Context, p int) { released <- p; <-hold }})
	waitTook(t, tookA, 0, 1, 2, 3)
	if r := <-runs; r != "+A" {
		t.Fatalf("the singleton: %s, want +A", r)
	}
	lb, tookB := startLeases(t, b, LeaseOptions{TTL: ttl, Renew: renew, Singletons: singleton("B")})

	gave := map[int]bool{<-released: true, <-released: true}
	if !gave[2] || !gave[3] {
		t.Fatalf("A gives back %v, want 2 and 3", gave)
	}
	// Until Release returns A still holds the leases, but no longer
	// runs the partitions' tasks.
	for p := range gave {
		if e, err := la.kv.Get(ctx, leaseKey(p)); err != nil || string(e.Value()) != "A" {
			t.Fatalf("partition %d's lease while A releases it: %v", p, err)
		}
		if la.Owns(streamIn(p, parts)) {
			t.Fatalf("A still runs partition %d's tasks", p)
		}
	}
	if !la.Owns(streamIn(0, parts)) {
		t.Fatal("A no longer runs partition 0")
	}
	close(hold)
	waitTook(t, tookB, 2, 3)
	if got := la.Held(); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Fatalf("A holds %v, want [0 1]", got)
	}
	// B's PARTITION_OWNED is in A's copy: A's appends to 2 and 3 are
	// those of a node that does not hold them.
	if err := a.rl.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if o := a.rl.owners[3]; o.Node != "B" {
		t.Fatalf("partition 3's owner in A's copy: %+v", o)
	}
	if _, err := a.rl.Append(ctx, streamIn(3, parts), eventlog.NoStream, eventlog.Event{Type: "STEP"}); err != nil {
		t.Fatalf("A's append to a partition it gave back: %v", err)
	}

	// B stops cleanly: its leases and announcement are deleted, A's
	// share is all four again and it takes them back at once.
	lb.Close(ctx)
	waitTook(t, tookA, 2, 3)

	// B again; A stops taking: the singleton moves to B.
	lb, tookB = startLeases(t, b, LeaseOptions{TTL: ttl, Renew: renew, Singletons: singleton("B")})
	waitTook(t, tookB, 2, 3)
	la.StopTaking(ctx)
	if r := <-runs; r != "-A" {
		t.Fatalf("the singleton: %s, want -A", r)
	}
	if r := <-runs; r != "+B" {
		t.Fatalf("the singleton: %s, want +B", r)
	}
	la.StopTaking(ctx) // a second call changes nothing
	lb.Close(ctx)
	if r := <-runs; r != "-B" {
		t.Fatalf("the singleton: %s, want -B", r)
	}
	sameCopies(t, a, b)
}

// wireOfT is the messages of sa's events (wireOf).
func wireOfT(t *testing.T, sa eventlog.StreamAppend) []wireMsg {
	t.Helper()
	wire, err := wireOf([]eventlog.StreamAppend{sa}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return wire
}
