package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestReserveKeyAcrossNodes: an idempotency key is bound once for the
// whole cluster. Requests racing with one key on two nodes all get the
// same id, exactly one of them binds it, and a node asked later (or after
// a restart) finds the binding and, in its copy, the event appended under
// it by the other node.
func TestReserveKeyAcrossNodes(t *testing.T) {
	nc := natstest.Start(t, 3)
	dir := t.TempDir()
	a := openNode(t, nc, filepath.Join(dir, "a"))
	b := openNode(t, nc, filepath.Join(dir, "b"))
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()

	const racers = 8
	for k := range 3 {
		key := fmt.Sprintf("order-%d", k)
		ids := make([]ulid.ULID, racers)
		existed := make([]bool, racers)
		var wg sync.WaitGroup
		for i := range racers {
			n := a
			if i%2 == 1 {
				n = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				if ids[i], existed[i], err = n.rl.ReserveKey(ctx, key, n.local.NewID()); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		binders := 0
		for i := range racers {
			if ids[i] != ids[0] {
				t.Fatalf("key %s: racers got %v", key, ids)
			}
			if !existed[i] {
				binders++
			}
		}
		if binders != 1 {
			t.Fatalf("key %s: %d racers bound it (existed: %v), want 1", key, binders, existed)
		}
	}

	// The event appended under a binding on a is found by b once b is
	// told the key was bound.
	id, existed, err := a.rl.ReserveKey(ctx, "task-1", a.local.NewID())
	if err != nil || existed {
		t.Fatalf("ReserveKey: %v, existed %v", err, existed)
	}
	if _, err := a.rl.Append(ctx, "t-1", eventlog.NoStream, eventlog.Event{ID: id, Type: "CREATED", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	got, existed, err := b.rl.ReserveKey(ctx, "task-1", b.local.NewID())
	if err != nil || !existed || got != id {
		t.Fatalf("b: %v existed %v, err %v; a bound %v", got, existed, err, id)
	}
	if _, err := b.local.Get(id); err != nil {
		t.Fatalf("b's copy lacks the event appended under the binding: %v", err)
	}
	// A retry on b under the bound id is the same append, stored once.
	res, err := b.rl.Append(ctx, "t-1", eventlog.NoStream, eventlog.Event{ID: id, Type: "CREATED", Body: []byte("x")})
	if err != nil || res.FirstSeq != res.LastSeq {
		t.Fatalf("retry under the bound id: %+v, %v", res, err)
	}
	if _, err := b.rl.Append(ctx, "t-1", eventlog.NoStream, eventlog.Event{ID: id, Type: "CREATED", Body: []byte("y")}); err == nil {
		t.Fatal("another body under the bound id was accepted")
	}
	// A binding survives the node: reopened, b finds it.
	bdir := b.dir
	b.close()
	b = openNode(t, nc, bdir)
	if got, existed, err := b.rl.ReserveKey(ctx, "task-1", b.local.NewID()); err != nil || !existed || got != id {
		t.Fatalf("after a restart: %v existed %v, err %v", got, existed, err)
	}
}

// TestReserveKeyKeepsALocalBinding: a key bound in a node's copy before
// the cluster's bucket held the bindings keeps its id.
func TestReserveKeyKeepsALocalBinding(t *testing.T) {
	nc := natstest.Start(t, 1)
	n := openNode(t, nc, t.TempDir())
	ctx := context.Background()
	old := n.local.NewID()
	if _, _, err := n.local.ReserveKey(ctx, "legacy", old); err != nil {
		t.Fatal(err)
	}
	got, existed, err := n.rl.ReserveKey(ctx, "legacy", n.local.NewID())
	if err != nil || got != old || existed {
		t.Fatalf("got %v existed %v err %v, want the local binding %v", got, existed, err, old)
	}
}

// TestOpenWaitsForJetStream: nodes started while no NATS server is up
// yet, at the same moment on a new cluster, wait for JetStream and all
// open the one stream and its buckets.
func TestOpenWaitsForJetStream(t *testing.T) {
	nc := natstest.Start(t, 3)
	for i := range 3 {
		nc.Stop(i)
	}
	dir := t.TempDir()
	const nodes = 3
	opened := make([]*node, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := eventlog.Open(filepath.Join(dir, fmt.Sprint(i)), nil)
			if err != nil {
				errs[i] = err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), testWait)
			defer cancel()
			rl, err := OpenReplicated(ctx, l, LogOptions{URL: nc.URL(), Partitions: 4})
			if err != nil {
				l.Close()
				errs[i] = err
				return
			}
			opened[i] = &node{dir: filepath.Join(dir, fmt.Sprint(i)), local: l, rl: rl}
		}()
	}
	for i := range 3 {
		nc.Restart(i)
	}
	wg.Wait()
	for i, n := range opened {
		if n != nil {
			t.Cleanup(n.close)
		}
		if errs[i] != nil {
			t.Fatalf("node %d: %v", i, errs[i])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := opened[0].rl.Append(ctx, "t-1", eventlog.NoStream, eventlog.Event{Type: "CREATED"}); err != nil {
		t.Fatal(err)
	}
	id, _, err := opened[1].rl.ReserveKey(ctx, "k", opened[1].local.NewID())
	if err != nil {
		t.Fatal(err)
	}
	if got, existed, err := opened[2].rl.ReserveKey(ctx, "k", opened[2].local.NewID()); err != nil || !existed || got != id {
		t.Fatalf("node 2: %v existed %v err %v", got, existed, err)
	}
	for _, n := range opened {
		if err := n.rl.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
		if n.rl.Partitions() != 4 {
			t.Fatalf("partitions %d", n.rl.Partitions())
		}
	}
	sameCopies(t, opened...)
}

// TestStartRetryable: at start, what JetStream did not answer or answered
// as not ready is tried again; what it refused is not.
func TestStartRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("cluster: stream X: %w", nats.ErrNoResponders), true},
		{fmt.Errorf("cluster: stream X: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{fmt.Errorf("cluster: stream X: %w", &jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"}), true},
		{fmt.Errorf("cluster: stream X: %w", &jetstream.APIError{Code: 400, ErrorCode: 10065, Description: "subjects overlap with an existing stream"}), false},
		{fmt.Errorf("%w: stream X is not a Pegasus log", ErrInvalid), false},
		{fmt.Errorf("%w: the local copy is ahead", ErrApply), false},
	} {
		if got := startRetryable(c.err); got != c.want {
			t.Errorf("startRetryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
