package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// node is one daemon's view of the replicated log: its local copy.
type node struct {
	dir   string
	local *eventlog.Log
	rl    *ReplicatedLog
}

func openNode(t *testing.T, nc *natstest.Cluster, dir string) *node {
	t.Helper()
	return openNodeWith(t, nc, dir, LogOptions{})
}

// openNodeWith is openNode with options (their URL is the cluster's).
func openNodeWith(t *testing.T, nc *natstest.Cluster, dir string, opts LogOptions) *node {
	t.Helper()
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	opts.URL = nc.URL()
	rl, err := OpenReplicated(ctx, l, opts)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	n := &node{dir: dir, local: l, rl: rl}
	t.Cleanup(n.close)
	return n
}

func (n *node) close() {
	if n.rl != nil {
		n.rl.Close()
		n.local.Close()
		n.rl = nil
	}
}

// sameCopies asserts that the nodes' local copies hold the same events
// in the same order (ids, streams, versions, types, times, bodies) and
// verify.
func sameCopies(t *testing.T, nodes ...*node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	var want []eventlog.Event
	for i, n := range nodes {
		if err := n.rl.catchUp(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := n.local.Verify(ctx); err != nil {
			t.Fatalf("node %d: verify: %v", i, err)
		}
		if covered, err := VerifyCopy(ctx, n.local, n.rl.st); err != nil || covered != n.rl.Applied() {
			t.Fatalf("node %d: the copy holds the stream to %d (applied %d): %v", i, covered, n.rl.Applied(), err)
		}
		var got []eventlog.Event
		it := n.local.Scan(1, eventlog.Forward)
		for it.Next() {
			got = append(got, it.Event())
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		it.Close()
		if i == 0 {
			want = got
			continue
		}
		if len(got) != len(want) {
			t.Fatalf("node %d holds %d events, node 0 %d", i, len(got), len(want))
		}
		for k := range got {
			a, b := got[k], want[k]
			if a.ID != b.ID || a.Seq != b.Seq || a.Stream != b.Stream || a.Version != b.Version || a.Type != b.Type ||
				!a.Time.Equal(b.Time) || string(a.Body) != string(b.Body) || a.Correlation != b.Correlation {
				t.Fatalf("node %d event %d = %+v, node 0 has %+v", i, k+1, a, b)
			}
		}
	}
}

// TestReplicatedOptimisticConcurrency has two nodes append to the same
// streams at expected versions concurrently, on a three-server cluster
// with three replicas: every version is won once, a loser gets a
// ConflictError with the current version (or ErrUnavailable, nothing
// stored, when JetStream refused its check as busy for AckTimeout), and
// both local copies end identical and verify.
func TestReplicatedOptimisticConcurrency(t *testing.T) {
	nc := natstest.Start(t, 3)
	a, b := openNode(t, nc, t.TempDir()), openNode(t, nc, t.TempDir())
	ctx := context.Background()
	const rounds = 15
	won := make([][]uint64, 2)
	var wg sync.WaitGroup
	for i, n := range []*node{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				stream := fmt.Sprintf("task-%d", r%3)
				v, err := n.local.StreamVersion(stream)
				if err != nil {
					t.Error(err)
					return
				}
				res, err := n.rl.Append(ctx, stream, eventlog.Exactly(v), eventlog.Event{Type: "STEP", Body: []byte{byte(i), byte(r)}})
				var conflict *eventlog.ConflictError
				switch {
				case errors.As(err, &conflict):
					if conflict.Current <= v {
						t.Errorf("node %d: conflict at version %d says current %d", i, v, conflict.Current)
					}
				case errors.Is(err, ErrUnavailable):
					// Refused as busy until AckTimeout (a loaded machine):
					// nothing stored, which the count below checks.
				case err != nil:
					t.Errorf("node %d: %v", i, err)
					return
				default:
					if res.Version != v+1 {
						t.Errorf("node %d: appended at %d, got version %d", i, v, res.Version)
					}
					won[i] = append(won[i], res.LastSeq)
				}
			}
		}()
	}
	wg.Wait()
	sameCopies(t, a, b)
	if got := len(won[0]) + len(won[1]); uint64(got) != a.local.Head() {
		t.Fatalf("%d appends won, the log holds %d events", got, a.local.Head())
	}
}

// TestReplicatedAppend checks the append rules through the cluster:
// idempotent retries, NoStream, an atomic multi-event append, a refused
// batch writing nothing, and a node that starts late catching up.
func TestReplicatedAppend(t *testing.T) {
	nc := natstest.Start(t, 1)
	a := openNode(t, nc, t.TempDir())
	ctx := context.Background()
	ev := eventlog.Event{ID: a.local.NewID(), Type: "CREATED", Body: []byte{1}}
	first, err := a.rl.Append(ctx, "t1", eventlog.NoStream, ev)
	if err != nil {
		t.Fatal(err)
	}
	retry, err := a.rl.Append(ctx, "t1", eventlog.NoStream, ev)
	if err != nil || retry.LastSeq != first.LastSeq || retry.Events[0].ID != ev.ID {
		t.Fatalf("retry = %+v, %v; first %+v", retry, err, first)
	}
	if _, err := a.rl.Append(ctx, "t1", eventlog.NoStream, eventlog.Event{Type: "CREATED"}); !errors.Is(err, eventlog.ErrConflict) {
		t.Fatalf("second NoStream append: %v, want a conflict", err)
	}
	changed := ev
	changed.Body = []byte{2}
	if _, err := a.rl.Append(ctx, "t1", eventlog.Any, changed); !errors.Is(err, eventlog.ErrIDReused) {
		t.Fatalf("an id reused with another body: %v, want ErrIDReused", err)
	}
	// Bad input is refused before it reaches the stream, where it would
	// stop every node's follower.
	info, err := a.rl.st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []eventlog.Event{
		{Type: ""},
		{Type: "X", Metadata: map[string]string{MetaStreamSeq: "1"}},
		{Type: "X", Metadata: map[string]string{"": "v"}},
	} {
		if _, err := a.rl.Append(ctx, "t1", eventlog.Any, bad); !errors.Is(err, eventlog.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
	if after, err := a.rl.st.Info(ctx); err != nil || after.State.LastSeq != info.State.LastSeq {
		t.Fatalf("bad appends reached the stream: %v", err)
	}
	res, err := a.rl.Append(ctx, "t1", eventlog.Exactly(1),
		eventlog.Event{Type: "A"}, eventlog.Event{Type: "B"}, eventlog.Event{Type: "C"})
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstSeq != 2 || res.LastSeq != 4 || res.Version != 4 {
		t.Fatalf("batch = %d..%d version %d", res.FirstSeq, res.LastSeq, res.Version)
	}
	head := a.local.Head()
	var conflict *eventlog.ConflictError
	if _, err := a.rl.Append(ctx, "t1", eventlog.Exactly(2), eventlog.Event{Type: "X"}, eventlog.Event{Type: "Y"}); !errors.As(err, &conflict) || conflict.Current != 4 {
		t.Fatalf("stale batch: %v, want a conflict at current version 4", err)
	}
	if a.local.Head() != head {
		t.Fatalf("a refused batch wrote %d events", a.local.Head()-head)
	}
	if _, err := a.rl.Append(ctx, "t2", eventlog.Any, eventlog.Event{Type: "OTHER"}); err != nil {
		t.Fatal(err)
	}
	// A parent and a child in one atomic batch; then the same with the
	// child's expected version stale: nothing of either is written.
	multi, err := a.rl.AppendMulti(ctx,
		eventlog.StreamAppend{Stream: "t1", Expected: eventlog.Exactly(4), Events: []eventlog.Event{{Type: "CHILD_STARTED"}}},
		eventlog.StreamAppend{Stream: "child", Expected: eventlog.NoStream, Events: []eventlog.Event{{Type: "CREATED"}, {Type: "STEP"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(multi) != 2 || multi[0].LastSeq+1 != multi[1].FirstSeq || multi[1].Version != 2 {
		t.Fatalf("multi = %+v", multi)
	}
	head = a.local.Head()
	_, err = a.rl.AppendMulti(ctx,
		eventlog.StreamAppend{Stream: "t1", Expected: eventlog.Exactly(5), Events: []eventlog.Event{{Type: "CHILD_STARTED"}}},
		eventlog.StreamAppend{Stream: "child", Expected: eventlog.NoStream, Events: []eventlog.Event{{Type: "CREATED"}}})
	if !errors.As(err, &conflict) || conflict.Stream != "child" || conflict.Current != 2 {
		t.Fatalf("stale child: %v, want a conflict on child at version 2", err)
	}
	if a.local.Head() != head {
		t.Fatalf("a refused multi-stream append wrote %d events", a.local.Head()-head)
	}
	// A second node, and the first one restarted, follow from the stream.
	b := openNode(t, nc, t.TempDir())
	a.close()
	a = openNode(t, nc, a.dir)
	if _, err := a.rl.Append(ctx, "t1", eventlog.Exactly(5), eventlog.Event{Type: "D"}); err != nil {
		t.Fatal(err)
	}
	sameCopies(t, a, b)
}

// TestReplicatedQuorum stops one of three servers while a node appends:
// appends go on with the remaining quorum (a publish in flight when its
// server stops has an unknown outcome, and its retry with the same id is
// applied once).
func TestReplicatedQuorum(t *testing.T) {
	nc := natstest.Start(t, 3)
	a := openNode(t, nc, t.TempDir())
	ctx := context.Background()
	appendRetry := func(i int) {
		t.Helper()
		ev := eventlog.Event{ID: a.local.NewID(), Type: "STEP", Body: []byte{byte(i)}}
		var err error
		for range 20 {
			if _, err = a.rl.Append(ctx, "t", eventlog.Any, ev); err == nil {
				return
			}
		}
		t.Fatalf("append %d: %v", i, err)
	}
	for i := range 20 {
		appendRetry(i)
	}
	nc.Stop(0)
	for i := 20; i < 40; i++ {
		appendRetry(i)
	}
	if h := a.local.Head(); h != 40 {
		t.Fatalf("the local copy holds %d events, want 40", h)
	}
	v, _ := a.local.StreamVersion("t")
	if v != 40 {
		t.Fatalf("stream version %d, want 40", v)
	}
	sameCopies(t, a)
}

// TestReplicatedRefusesForeignWrites writes to a node's local copy behind
// the follower's back: VerifyCopy finds it, and the copy can no longer be
// opened as a replica.
func TestReplicatedRefusesForeignWrites(t *testing.T) {
	nc := natstest.Start(t, 1)
	a := openNode(t, nc, t.TempDir())
	ctx := context.Background()
	if _, err := a.rl.Append(ctx, "t", eventlog.Any, eventlog.Event{Type: "A"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.local.Append(ctx, "t", eventlog.Any, eventlog.Event{Type: "ROGUE"}); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyCopy(ctx, a.local, a.rl.st); !errors.Is(err, ErrCopyMismatch) {
		t.Fatalf("VerifyCopy: %v, want ErrCopyMismatch", err)
	}
	dir := a.dir
	a.close()
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := OpenReplicated(ctx, l, LogOptions{URL: nc.URL()}); !errors.Is(err, ErrApply) {
		t.Fatalf("OpenReplicated: %v, want ErrApply", err)
	}
}

// TestReplicatedRefusesOtherStreams refuses a copy that is ahead of its
// stream (the stream was re-created) and a stream that is not a log.
func TestReplicatedRefusesOtherStreams(t *testing.T) {
	nc := natstest.Start(t, 1)
	js := nc.JetStream()
	ctx := context.Background()
	a := openNode(t, nc, t.TempDir())
	for range 3 {
		if _, err := a.rl.Append(ctx, "t", eventlog.Any, eventlog.Event{Type: "A"}); err != nil {
			t.Fatal(err)
		}
	}
	dir := a.dir
	a.close()
	if err := js.DeleteStream(ctx, "PEGASUS_LOG"); err != nil {
		t.Fatal(err)
	}
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := OpenReplicated(ctx, l, LogOptions{URL: nc.URL()}); !errors.Is(err, ErrApply) {
		t.Fatalf("a copy ahead of a re-created stream: %v, want ErrApply", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReplicated(ctx, l, LogOptions{URL: nc.URL(), Stream: "OTHER"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a stream that is not a log: %v, want ErrInvalid", err)
	}
}

// TestReplicatedPowerLoss cuts power under a node (Pebble's crashable
// file system, keeping a random part of what was not synced): the
// reopened copy holds every acknowledged append, resumes following the
// stream from its last event, and matches the stream.
func TestReplicatedPowerLoss(t *testing.T) {
	nc := natstest.Start(t, 1)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := vfs.NewCrashableMem()
	ctx := context.Background()
	open := func(fs vfs.FS) (*eventlog.Log, *ReplicatedLog) {
		l, err := eventlog.Open("/data", &eventlog.Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		rl, err := OpenReplicated(ctx, l, LogOptions{URL: nc.URL()})
		if err != nil {
			t.Fatal(err)
		}
		return l, rl
	}
	l, rl := open(fs)
	var acked []eventlog.Event
	for i := range 40 {
		res, err := rl.Append(ctx, fmt.Sprintf("t%d", i%4), eventlog.Any, eventlog.Event{Type: "STEP", Body: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, res.Events...)
	}
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
	rl.Close()
	l.Close()

	l, rl = open(clone)
	defer l.Close()
	defer rl.Close()
	for _, ev := range acked {
		if _, err := l.Get(ev.ID); err != nil {
			t.Fatalf("acknowledged event %d lost: %v", ev.Seq, err)
		}
	}
	if _, err := rl.Append(ctx, "t0", eventlog.Any, eventlog.Event{Type: "AFTER"}); err != nil {
		t.Fatal(err)
	}
	covered, err := VerifyCopy(ctx, l, rl.st)
	if err != nil || covered != 41 {
		t.Fatalf("the copy holds the stream to %d, want 41: %v", covered, err)
	}
}
