package cluster

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// lastSeq is the stream's last sequence.
func lastSeq(t *testing.T, n *node) uint64 {
	t.Helper()
	info, err := n.rl.st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// An append's events on one stream are one message (format 2); over two
// streams, one message each; beyond the size limit, several messages in
// the same atomic batch. A stream that an older build wrote (one event a
// message) and the packed messages after it read back identically: in
// the node that wrote them after it restarts, and in a new node that
// parses them all; expected versions map to the packed messages'
// sequences.
func TestPackedAppendIsOneMessage(t *testing.T) {
	nc := natstest.Start(t, 1)
	ctx := context.Background()
	a := openNode(t, nc, t.TempDir())
	a.rl.pack = 0 // an older build: one event a message
	three := func(prefix string) []eventlog.Event {
		return []eventlog.Event{{Type: prefix + "1", Body: []byte("a")}, {Type: prefix + "2"}, {Type: prefix + "3", Body: []byte("c")}}
	}
	before := lastSeq(t, a)
	if _, err := a.rl.Append(ctx, "t1", eventlog.NoStream, three("OLD")...); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(t, a) - before; got != 3 {
		t.Fatalf("the older format wrote %d messages for 3 events, want 3", got)
	}
	a.close()

	a = openNode(t, nc, a.dir)
	before = lastSeq(t, a)
	res, err := a.rl.Append(ctx, "t1", eventlog.Exactly(3), three("NEW")...)
	if err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(t, a) - before; got != 1 {
		t.Fatalf("a packed append of 3 events wrote %d messages, want 1", got)
	}
	if res.FirstSeq != 4 || res.LastSeq != 6 || res.Version != 6 {
		t.Fatalf("packed append = %d..%d version %d", res.FirstSeq, res.LastSeq, res.Version)
	}
	// Each event's position: its message's sequence, shared by the
	// message's events, which are consecutive in the copy, in order.
	for k, ev := range res.Events {
		if ev.Metadata[MetaStreamSeq] != strconv.FormatUint(before+1, 10) || ev.Seq != res.FirstSeq+uint64(k) {
			t.Fatalf("event %d: local %d, stream sequence %q, want %d", k, ev.Seq, ev.Metadata[MetaStreamSeq], before+1)
		}
	}
	// The expected version maps to the packed message: a stale one is
	// refused, the current one stored.
	var conflict *eventlog.ConflictError
	if _, err := a.rl.Append(ctx, "t1", eventlog.Exactly(4), eventlog.Event{Type: "STALE"}); !errors.As(err, &conflict) || conflict.Current != 6 {
		t.Fatalf("a stale append after a packed one: %v, want a conflict at version 6", err)
	}
	before = lastSeq(t, a)
	if _, err := a.rl.AppendMulti(ctx,
		eventlog.StreamAppend{Stream: "t1", Expected: eventlog.Exactly(6), Events: []eventlog.Event{{Type: "PARENT"}}},
		eventlog.StreamAppend{Stream: "t2", Expected: eventlog.NoStream, Events: three("CHILD")}); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(t, a) - before; got != 2 {
		t.Fatalf("an append over two streams wrote %d messages, want 2", got)
	}
	// Beyond the limit: two events a message, in one atomic batch.
	big := eventlog.Event{ID: a.local.NewID(), Time: time.Now(), Type: "BIG1", Body: []byte("a")}
	one, err := wireOf([]eventlog.StreamAppend{{Stream: "t2", Events: []eventlog.Event{big}}}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	a.rl.pack = 2*len(one[0].data) + 40 // two events' forms, not three
	before = lastSeq(t, a)
	if _, err := a.rl.Append(ctx, "t2", eventlog.Exactly(3), append(three("BIG"), three("BIG")...)...); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(t, a) - before; got != 3 {
		t.Fatalf("6 events of which 2 fit a message wrote %d messages, want 3", got)
	}
	a.rl.pack = -1
	if _, err := a.rl.Append(ctx, "t2", eventlog.Exactly(9), eventlog.Event{Type: "AFTER"}); err != nil {
		t.Fatal(err)
	}

	// A new node parses every message; the writer restarts.
	b := openNode(t, nc, t.TempDir())
	sameCopies(t, a, b)
	a.close()
	a = openNode(t, nc, a.dir)
	sameCopies(t, a, b)
	if v, err := a.local.StreamVersion("t2"); err != nil || v != 10 {
		t.Fatalf("t2 at version %d after the restart: %v, want 10", v, err)
	}
	if _, err := a.rl.Append(ctx, "t2", eventlog.Exactly(10), three("LAST")...); err != nil {
		t.Fatal(err)
	}
	sameCopies(t, a, b)
}

// With OneEventPerMessage a node writes the one-event messages a build
// without packed messages reads, and still reads the packed messages
// another node wrote: the two halves of a rolling upgrade.
func TestOneEventPerMessage(t *testing.T) {
	nc := natstest.Start(t, 1)
	ctx := context.Background()
	evs := []eventlog.Event{{Type: "A", Body: []byte("a")}, {Type: "B"}, {Type: "C", Body: []byte("c")}}

	packed := openNode(t, nc, t.TempDir())
	before := lastSeq(t, packed)
	if _, err := packed.rl.Append(ctx, "t1", eventlog.NoStream, evs...); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(t, packed) - before; got != 1 {
		t.Fatalf("the default wrote %d messages for 3 events, want 1", got)
	}

	old := openNodeWith(t, nc, t.TempDir(), LogOptions{OneEventPerMessage: true})
	before = lastSeq(t, old)
	if _, err := old.rl.Append(ctx, "t2", eventlog.NoStream, evs...); err != nil {
		t.Fatal(err)
	}
	if got := lastSeq(t, old) - before; got != 3 {
		t.Fatalf("OneEventPerMessage wrote %d messages for 3 events, want 3", got)
	}
	// Each node reads both forms: the copies are the stream's and equal.
	sameCopies(t, packed, old)
	if v, err := packed.local.StreamVersion("t2"); err != nil || v != 3 {
		t.Fatalf("the packing node holds t2 at version %d: %v, want 3", v, err)
	}
	if v, err := old.local.StreamVersion("t1"); err != nil || v != 3 {
		t.Fatalf("the one-event node holds t1 at version %d: %v, want 3", v, err)
	}
}
