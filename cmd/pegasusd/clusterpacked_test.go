package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestClusterPackedMessages runs tasks on pegasusd --cluster and checks
// that the stream carries each append's events on one stream as one
// message (several events a message, format 2), and that the daemon's
// copy reads back the same after a restart, and a new node's copy from
// the stream alone, each the stream's events in order (cluster.VerifyCopy).
func TestClusterPackedMessages(t *testing.T) {
	nats := natstest.Start(t, 3)
	js := nats.JetStream()
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	flags := []string{"--cluster", nats.URL(), "--cluster-node", "a"}
	p := startProc(t, bin, data, flags...)
	runTasks(t, 20, p.url)
	p.stop(t)
	head := checkCopy(t, data, js)
	before := copyEvents(t, data)

	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	st, info := logStream(ctx, t, js)
	packed := 0
	eachLogMessage(ctx, t, st, info, func(_ *jetstream.RawStreamMsg, evs []eventlog.Event) {
		if len(evs) > 1 {
			packed++
		}
	})
	// Each task's steps are appends of several events to its stream.
	if info.State.Msgs >= head || packed < 20 {
		t.Fatalf("%d messages for %d events, %d of them packed: want fewer messages than events, a packed one per task at least", info.State.Msgs, head, packed)
	}

	// The restarted daemon and a new one append their own start events
	// after the first run's.
	p = startProc(t, bin, data, flags...)
	p.stop(t)
	checkCopy(t, data, js)
	samePrefix(t, "the restarted daemon's copy", copyEvents(t, data), before)
	fresh := filepath.Join(t.TempDir(), "fresh")
	p = startProc(t, bin, fresh, "--cluster", nats.URL(), "--cluster-node", "b")
	p.stop(t)
	checkCopy(t, fresh, js)
	samePrefix(t, "a new node's copy", copyEvents(t, fresh), before)
	t.Logf("%d events in %d messages, %d of them packed", head, info.State.Msgs, packed)
}

// samePrefix fails unless got begins with want.
func samePrefix(t *testing.T, name string, got, want []string) {
	t.Helper()
	if len(got) < len(want) {
		t.Fatalf("%s holds %d events, fewer than the %d before", name, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: event %d is %s, was %s", name, i+1, got[i], want[i])
		}
	}
}

// copyEvents is a stopped node's copy, each event as a line of what
// identifies it and its place.
func copyEvents(t *testing.T, data string) []string {
	t.Helper()
	l, err := eventlog.Open(data, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out []string
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		out = append(out, fmt.Sprintf("%d %s %s %d %s %s %x %s", ev.Seq, ev.ID, ev.Stream, ev.Version, ev.Type, ev.Time, ev.Body, ev.Metadata[cluster.MetaStreamSeq]))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
