package otlp_test

import (
	"context"
	"slices"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/traces/otlp"
)

// TestRootTasks: the tasks no other task caused, in log order: an input
// or a broker task without a parent, not a child task nor a "$" stream. A
// task that names a parent but that none of the parent's events caused
// (a broker task created through the API with parent_task_id) is a root
// too: nothing places it in its parent's trace.
func TestRootTasks(t *testing.T) {
	var evs []eventlog.Event
	vers := map[string]uint64{}
	var cause ulid.ULID // of the next event
	add := func(stream string, b fsm.Body) string {
		data, err := fsm.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		id := ulid.MustNew(uint64(len(evs)+1), nil)
		if stream == "" {
			stream = id.String()
		}
		vers[stream]++
		evs = append(evs, eventlog.Event{ID: id, Seq: uint64(len(evs) + 1), Stream: stream, Version: vers[stream],
			Causation: cause, Type: string(b.EventType()), Schema: fsm.SchemaVersion, Body: data})
		cause = ulid.ULID{}
		return stream
	}
	task := add("", &fsm.Input{Kind: fsm.MessageReceived, Text: "hi", Source: "http"})
	add(task, &fsm.TaskCreatedBody{Source: "http"})
	cause = evs[0].ID
	child := add("", &fsm.Input{Kind: fsm.MessageReceived, Text: "sub", Source: "broker", ParentTaskID: task})
	add(child, &fsm.TaskCreatedBody{Source: "broker", ParentTaskID: task})
	cause = evs[1].ID
	add("", &fsm.DispatchCreatedBody{Title: "sub", ParentTaskID: task})
	orphan := add("", &fsm.DispatchCreatedBody{Title: "through the API", ParentTaskID: task})
	bt := add("", &fsm.DispatchCreatedBody{Title: "resize"})
	add("$memory", &fsm.Input{Kind: fsm.MessageReceived, Text: "not a task"})
	r, err := replay.NewMemLog(evs...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := otlp.RootTasks(context.Background(), r)
	if want := []string{task, orphan, bt}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("RootTasks = %v, %v; want %v", got, err, want)
	}
}
