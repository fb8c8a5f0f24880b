package projection

import (
	"fmt"
	"maps"
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

// TestStatsStateCells: the counts by state kept in cells give what a map
// update per count gives, across an encoding and decoding, and past the
// bound of cells (which settles them into the maps).
func TestStatsStateCells(t *testing.T) {
	st := NewStats(StatsOptions{})
	wantState, wantMS := map[fsm.State]int64{}, map[string]int64{}
	states := []fsm.State{fsm.StateIdle, fsm.StateCompleted, fsm.StateFailed}
	count := func(st *Stats, i int, d int64) {
		task := fsm.Task{Machine: fsm.MachineRef{Name: fmt.Sprintf("m%d", i%(maxStateKeys+7))}, State: states[i%len(states)]}
		if i%5 == 0 {
			task.Machine.Name = fsm.DispatchMachineName
		}
		st.byState(&task, d)
		if task.Machine.Name != fsm.DispatchMachineName {
			bump(&wantState, task.State, d)
		}
		bump(&wantMS, task.Machine.Name+" "+string(task.State), d)
	}
	check := func(what string, st *Stats) {
		t.Helper()
		byState, byMS := st.states()
		if !maps.Equal(byState, wantState) || !maps.Equal(byMS, wantMS) {
			t.Fatalf("%s: by state %v, want %v; by machine and state: %d keys, want %d", what, byState, wantState, len(byMS), len(wantMS))
		}
	}
	for i := range 3 * maxStateKeys {
		count(st, i, 1)
	}
	for i := 0; i < 3*maxStateKeys; i += 2 {
		count(st, i, -1) // half the counts go back to zero
	}
	check("folded", st)
	b, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeStats(b, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("decoded", back)
	for i := range maxStateKeys / 2 {
		count(back, i, 1)
	}
	check("decoded, then folded", back)
	if r := back.Report(); r.ByState[fsm.StateIdle] != wantState[fsm.StateIdle] {
		t.Fatalf("report: %d idle, want %d", r.ByState[fsm.StateIdle], wantState[fsm.StateIdle])
	}
}
