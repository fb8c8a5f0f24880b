package projection

import (
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestStatsByMachineState: a broker task is counted in its own machine's
// states, never in the pegasus.task figures of by_state (which share the
// names completed and failed), and a broker task that fails and is retried
// is not a finished task until it completes or is dead-lettered.
func TestStatsByMachineState(t *testing.T) {
	st := NewStats(StatsOptions{})
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tasks := map[string]fsm.Task{}
	apply := func(stream string, b fsm.Body) {
		t.Helper()
		before := tasks[stream]
		ev := fsm.Event{Type: b.EventType(), Stream: stream, Version: before.Version + 1, Time: t0, Body: b}
		after, err := fsm.Apply(before, ev)
		if err != nil {
			t.Fatal(err)
		}
		st.task(ev, &before, &after)
		tasks[stream] = after
	}
	apply("P", &fsm.TaskCreatedBody{Machine: fsm.CurrentMachine, TaskType: "general", InputText: "hi", Source: "cli"})
	apply("P", &fsm.TaskFailedBody{Reason: "cancelled", Error: "cancelled"})
	apply("D", &fsm.DispatchCreatedBody{AgentID: "a", Title: "x", Owner: "a", TimeoutSeconds: 1, MaxRetries: 1, RetryEligible: true, Source: "agent"})
	apply("D", &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "w"})
	apply("D", &fsm.DispatchReportBody{Kind: fsm.DispatchStarted, AgentID: "w"})
	apply("D", &fsm.DispatchReportBody{Kind: fsm.DispatchFailed, AgentID: "w", Error: "boom"})
	apply("D", &fsm.DispatchRetriedBody{AgentID: "$broker"})
	apply("E", &fsm.DispatchCreatedBody{AgentID: "a", Title: "y", Owner: "a", TimeoutSeconds: 1, Source: "agent"})
	apply("E", &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "w"})
	apply("E", &fsm.DispatchReportBody{Kind: fsm.DispatchStarted, AgentID: "w"})
	apply("E", &fsm.DispatchReportBody{Kind: fsm.DispatchCompleted, AgentID: "w", Result: "{}"})

	r := st.Report()
	if r.ByState[fsm.StateFailed] != 1 || r.ByState[fsm.StateCompleted] != 0 || r.ByState[fsm.StatePending] != 0 {
		t.Fatalf("by_state counts broker tasks: %v", r.ByState)
	}
	d := r.ByMachineState[fsm.DispatchMachineName]
	if d[fsm.StatePending] != 1 || d[fsm.StateCompleted] != 1 || d[fsm.StateFailed] != 0 || len(d) != 2 {
		t.Fatalf("dispatch.task states: %v", d)
	}
	if p := r.ByMachineState[fsm.MachineName]; p[fsm.StateFailed] != 1 || len(p) != 1 {
		t.Fatalf("pegasus.task states: %v", p)
	}
	if r.Failed != 1 || r.Completed != 1 {
		t.Fatalf("finished: %d failed (a retried broker failure is not one), %d completed", r.Failed, r.Completed)
	}
	// The persisted form keeps them apart too.
	data, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeStats(data, st.Options())
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Report().ByMachineState[fsm.DispatchMachineName][fsm.StatePending]; got != 1 {
		t.Fatalf("decoded: %v", back.Report().ByMachineState)
	}
}
