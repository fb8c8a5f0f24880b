package replay

import (
	"context"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestTraceEvents: a task's events and those of the tasks it caused,
// recursively (a broker task caused by its tool call, the task the
// built-in agent runs for that broker task), in log order, without
// another task's events, a later event another stream causes, or memory
// writes; the same from a Pebble log as from memory, and from a
// TraceGatherer given the log in order.
func TestTraceEvents(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var n uint64
	var evs []eventlog.Event
	vers := map[string]uint64{}
	add := func(stream string, typ string, cause ulid.ULID) eventlog.Event {
		n++
		id := ulid.MustNew(ulid.Timestamp(t0)+n, nil)
		if stream == "" {
			stream = id.String()
		}
		vers[stream]++
		ev := eventlog.Event{ID: id, Seq: n, Stream: stream, Version: vers[stream], Type: typ, Time: t0, Causation: cause, Schema: 1}
		evs = append(evs, ev)
		return ev
	}
	in := add("", "MESSAGE_RECEIVED", ulid.ULID{})
	task := in.Stream
	other := add("", "MESSAGE_RECEIVED", ulid.ULID{})
	created := add(task, "TASK_CREATED", in.ID)
	add(other.Stream, "TASK_CREATED", other.ID)
	started := add(task, "TOOL_CALL_STARTED", created.ID)
	add("$memory", "MEMORY_WRITTEN", started.ID)
	bt := add("", "DISPATCH_CREATED", started.ID)
	st := add(bt.Stream, "DISPATCH_STARTED", bt.ID)
	child := add("", "MESSAGE_RECEIVED", st.ID)
	add(other.Stream, "TASK_FAILED", child.ID) // caused by the tree, but not a task it created
	cdone := add(child.Stream, "TASK_COMPLETED", child.ID)
	add(bt.Stream, "DISPATCH_COMPLETED", cdone.ID)
	add(task, "TOOL_CALL_COMPLETED", started.ID)

	want := []string{task, task, task, bt.Stream, bt.Stream, child.Stream, child.Stream, bt.Stream, task}
	checkEvents := func(name string, got []eventlog.Event) {
		t.Helper()
		var streams []string
		for i, ev := range got {
			streams = append(streams, ev.Stream)
			if i > 0 && got[i-1].Seq >= ev.Seq {
				t.Errorf("%s: not in log order at %d", name, i)
			}
		}
		if len(streams) != len(want) {
			t.Fatalf("%s: got streams %v, want %v", name, streams, want)
		}
		for i := range want {
			if streams[i] != want[i] {
				t.Fatalf("%s: got streams %v, want %v", name, streams, want)
			}
		}
	}
	check := func(name string, r Reader) {
		got, err := TraceEvents(context.Background(), r, task)
		if err != nil {
			t.Fatal(err)
		}
		checkEvents(name, got)
		none, err := TraceEvents(context.Background(), r, ulid.Make().String())
		if err != nil || len(none) != 0 {
			t.Errorf("%s: an unknown task: %d events, %v", name, len(none), err)
		}
	}
	check("memory", mustMem(t, evs))
	l, _ := logWith(t, evs)
	check("log", FromLog(l))

	g := NewTraceGatherer(1<<20, 1<<20)
	for _, ev := range evs {
		g.Add(ev, ev.Version == 1 && ev.Causation.IsZero())
	}
	checkEvents("gatherer", g.Take(task))
	if again := g.Take(task); again != nil {
		t.Errorf("gatherer: a second Take gave %d events", len(again))
	}
}
