package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
)

type seenAt struct {
	worker string
	at     time.Time
}

// shareSightings opens a node's Sightings and returns the channel that
// gets every sighting it is told of.
func shareSightings(t *testing.T, n *node) (*Sightings, chan seenAt) {
	t.Helper()
	got := make(chan seenAt, 64)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	s, err := n.rl.ShareSightings(ctx, SightingOptions{TTL: time.Minute}, func(w string, at time.Time) { got <- seenAt{w, at} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, got
}

// waitSeen waits until a node is told that worker was seen at at. The
// test's malformed value (under mallory's key, naming eve) must never be
// handed on.
func waitSeen(t *testing.T, got chan seenAt, worker string, at time.Time) {
	t.Helper()
	timeout := time.After(testWait)
	for {
		select {
		case s := <-got:
			if s.worker == "eve" || s.worker == "mallory" {
				t.Fatalf("a value that is not a sighting under its key was handed on: %+v", s)
			}
			if s.worker == worker && s.at.Equal(at) {
				return
			}
		case <-timeout:
			t.Fatalf("node never told that %q was seen at %v", worker, at)
		}
	}
}

// TestSightings: a sighting one node shares reaches every node, those up
// then and one that starts later (from the bucket); worker ids that are
// not keys are shared too, and a value that is not a sighting is
// skipped, not handed on.
func TestSightings(t *testing.T) {
	nc := natstest.Start(t, 3)
	a := openNode(t, nc, t.TempDir())
	b := openNode(t, nc, t.TempDir())
	sa, gotA := shareSightings(t, a)
	_, gotB := shareSightings(t, b)

	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	const worker = "gpu box/1 é*>"
	sa.Share(worker, t0)
	waitSeen(t, gotB, worker, t0)
	waitSeen(t, gotA, worker, t0) // its own, too: harmless

	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := sa.kv.Put(ctx, sightingKey("mallory"), []byte(`{"worker":"eve","at":"2026-01-02T03:04:05Z"}`)); err != nil {
		t.Fatal(err)
	}
	sa.Share("w2", t0.Add(time.Second))
	sa.Share("w2", t0) // older than the one queued: not put
	waitSeen(t, gotB, "w2", t0.Add(time.Second))

	c := openNode(t, nc, t.TempDir())
	_, gotC := shareSightings(t, c)
	waitSeen(t, gotC, worker, t0)
	waitSeen(t, gotC, "w2", t0.Add(time.Second)) // after mallory's key in the bucket's order
}
