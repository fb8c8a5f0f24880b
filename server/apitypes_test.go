package server

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/broker"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// TestAPITypesMatchTheServer: the wire types of package api, which
// package client speaks, have the JSON fields of what the server sends
// and reads, name for name, so that a client decodes every field the
// server writes and the server can adopt them.
func TestAPITypesMatchTheServer(t *testing.T) {
	type listed struct {
		projection.Summary
		Queued bool `json:"queued"`
	}
	for _, c := range []struct {
		name        string
		server, api any
	}{
		{"task", TaskJSON{}, api.Task{}},
		{"created", CreatedJSON{}, api.Created{}},
		{"create task", createRequest{}, api.CreateTask{}},
		{"transition", fsm.Transition{}, api.Transition{}},
		{"listed task", listed{}, api.TaskSummary{}},
		{"progress", projection.Progress{}, api.Progress{}},
		{"pending tool", projection.PendingTool{}, api.PendingTool{}},
		{"event", replay.EventJSON{}, api.Event{}},
		{"error", apiError{}, api.ErrorDetail{}},
		{"dispatch task", DispatchJSON{}, api.DispatchTask{}},
		{"create dispatch", broker.CreateRequest{}, api.CreateDispatch{}},
		{"worker", broker.WorkerInfo{}, api.Worker{}},
		{"broker stats", projection.BrokerStats{}, api.BrokerStats{}},
		{"duration quantile", projection.DurationQuantile{}, api.DurationQuantile{}},
		{"DLQ filter", projection.DLQFilter{}, api.DLQFilter{}},
		{"batch item error", batchItemError{}, api.ItemError{}},
		{"batch task", struct {
			createRequest
			batchKey
		}{}, api.CreateTaskItem{}},
		{"batch dispatch", struct {
			broker.CreateRequest
			batchKey
		}{}, api.CreateDispatchItem{}},
	} {
		s, a := jsonFields(reflect.TypeOf(c.server)), jsonFields(reflect.TypeOf(c.api))
		if sk, ak := slices.Sorted(maps.Keys(s)), slices.Sorted(maps.Keys(a)); !slices.Equal(sk, ak) {
			t.Errorf("%s: the server's fields %v, api's %v", c.name, sk, ak)
		}
	}
	// An event converts both ways: the same fields, in the same order,
	// of the same types.
	_ = replay.EventJSON(api.Event{})
	_ = api.Event(replay.EventJSON{})
}
