package agent

import (
	"context"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/traces"
)

// clockModel asks for current_time, then answers with its result. Its
// answer to the tool's result, when gate is set, first says so on
// arrived, then waits for gate (or for its context, with hold).
type clockModel struct {
	arrived chan struct{}
	gate    chan struct{}
	hold    bool
	calls   chan string // the last message's role of every call, if set
}

func (clockModel) Name() string { return "clock-model" }
func (m clockModel) Complete(ctx context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	if m.calls != nil {
		m.calls <- last.Role
	}
	r := llm.Response{Model: "clock-model", ToolCalls: []fsm.ToolCall{{ID: "c1", Name: "current_time", Arguments: "{}"}}}
	if last.Role == "tool" {
		if m.arrived != nil {
			m.arrived <- struct{}{}
			if m.hold {
				<-ctx.Done()
				return llm.Response{}, ctx.Err()
			}
			<-m.gate
		}
		r = llm.Response{Model: "clock-model", Content: "It is " + last.Content}
	}
	report(llm.Attempt{Number: 1, Model: "clock-model", Status: 200, Response: &r})
	return r, nil
}

const clockTaskEvents = "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED " +
	"TOOL_CALL_COMPLETED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED"

// rawEvents returns a stream's events as stored.
func (h *harness) rawEvents(stream string) []eventlog.Event {
	h.t.Helper()
	it := h.log.ReadStream(stream, 0)
	defer it.Close()
	var out []eventlog.Event
	for it.Next() {
		out = append(out, it.Event())
	}
	if err := it.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// A task that asks the clock (a tool that only reads) is two synced
// appends: its input with its admission, then everything else: the
// reasoning, the call's start and result, the next reasoning and the
// task's end. The start's id is drawn before the call, the result's after
// it, and the trace and the causation tree show the call.
func TestReaderToolTaskInTwoAppends(t *testing.T) {
	h := newHarness(t, Options{Model: clockModel{}, DisableReflection: true})
	before := h.log.Stats().Appends
	id := h.submit("what time is it?")
	task := h.wait(id)
	if task.State != fsm.StateCompleted || task.Context.FinalResult == "" {
		t.Fatalf("task = %s %q", task.State, task.Context.FinalResult)
	}
	if got := types(h.events(id)); got != clockTaskEvents {
		t.Fatalf("events = %s, want %s", got, clockTaskEvents)
	}
	if n := h.log.Stats().Appends - before; n != 2 {
		t.Fatalf("%d appends, want 2", n)
	}
	// One commit, one time; the ids are drawn in order as the events
	// became known: the start's before the call, the result's after it.
	evs := h.rawEvents(id)
	start, result := evs[4], evs[5]
	for _, ev := range evs[2:] {
		if !ev.Time.Equal(evs[2].Time) {
			t.Fatalf("%s at %s, not in the commit at %s", ev.Type, ev.Time, evs[2].Time)
		}
	}
	for i := 3; i < len(evs); i++ {
		if evs[i].ID.Compare(evs[i-1].ID) <= 0 {
			t.Fatalf("%s's id %s is not after %s's %s", evs[i].Type, evs[i].ID, evs[i-1].Type, evs[i-1].ID)
		}
	}
	if result.Causation != start.ID {
		t.Fatalf("result caused by %s, want the start %s", result.Causation, start.ID)
	}

	var tool *traces.Span
	spans := traces.Build(evs, traces.Options{})
	for i := range spans {
		if spans[i].Kind == traces.KindTool {
			tool = &spans[i]
		}
	}
	idTime := func(id ulid.ULID) time.Time { return ulid.Time(id.Time()).UTC() }
	if tool == nil || tool.Name != "execute_tool current_time" || tool.Open || tool.SpanID != traces.SpanID(start.ID) ||
		tool.Start.Before(idTime(start.ID)) || tool.End.Before(tool.Start) || tool.End.After(result.Time) {
		t.Fatalf("tool span = %+v, want one from %s to %s at the latest", tool, idTime(start.ID), result.Time)
	}

	w, err := replay.Explain(testCtx(t), replay.FromLog(h.log), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	var walk func(n *replay.Node)
	walk = func(n *replay.Node) {
		if n.Event.ID == start.ID && len(n.Children) == 1 && n.Children[0].Event.ID == result.ID {
			found = true
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(w.Tree)
	if !found {
		t.Fatalf("why: no TOOL_CALL_STARTED followed by its TOOL_CALL_COMPLETED")
	}
	h.assertNoIssues()
	h.verify()
}

// A daemon that dies after the clock ran, before the append that records
// it (while the next model call works), has recorded nothing of it: after
// the restart the task calls the model and the clock again and ends once.
func TestReaderRunsAgainAfterACrash(t *testing.T) {
	arrived := make(chan struct{}, 1)
	calls := make(chan string, 16)
	h := newHarness(t, Options{Model: clockModel{arrived: arrived, hold: true, calls: calls}, DisableReflection: true})
	id := h.submit("what time is it?")
	<-arrived // the clock ran: the model has its result
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: the model's call is cancelled, as by a kill
	_ = h.a.Stop(ctx)
	h.a = nil
	h.log = openLog(t, h.fs)
	if got, want := types(h.events(id)), "MESSAGE_RECEIVED TASK_CREATED"; got != want {
		t.Fatalf("events before the restart = %s, want %s", got, want)
	}
	if err := h.log.Close(); err != nil {
		t.Fatal(err)
	}
	h.opts.Model = clockModel{calls: calls}
	h.start()
	task := h.wait(id)
	if task.State != fsm.StateCompleted {
		t.Fatalf("task = %s", task.State)
	}
	if got := types(h.events(id)); got != clockTaskEvents {
		t.Fatalf("events = %s, want %s", got, clockTaskEvents)
	}
	// Two model calls per run: the question, then the clock's result.
	close(calls)
	var roles []string
	for r := range calls {
		roles = append(roles, r)
	}
	if len(roles) != 4 || roles[0] != "user" || roles[1] != "tool" || roles[2] != "user" || roles[3] != "tool" {
		t.Fatalf("model calls saw %v, want user tool user tool", roles)
	}
	h.assertNoIssues()
	h.verify()
}

// A task suspended while the model works on the clock's result records
// nothing of the stale stage; once resumed it runs again and ends once.
func TestReaderStaleOutcomeDropped(t *testing.T) {
	arrived, gate := make(chan struct{}, 2), make(chan struct{})
	h := newHarness(t, Options{Model: clockModel{arrived: arrived, gate: gate}, DisableReflection: true})
	id := h.submit("what time is it?")
	<-arrived
	if _, err := h.a.Suspend(testCtx(t), id, "pause"); err != nil {
		t.Fatal(err)
	}
	h.waitState(id, fsm.StateSuspended)
	close(gate) // the stale stage answers now
	if _, err := h.a.Resume(testCtx(t), id, "go on"); err != nil {
		t.Fatal(err)
	}
	task := h.wait(id)
	if task.State != fsm.StateCompleted {
		t.Fatalf("task = %s", task.State)
	}
	want := "MESSAGE_RECEIVED TASK_CREATED TASK_SUSPENDED TASK_RESUMED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED " +
		"TOOL_CALL_COMPLETED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED"
	if got := types(h.events(id)); got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	h.assertNoIssues()
	h.verify()
}
