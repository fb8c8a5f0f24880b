package agent

import (
	"context"
	"testing"

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
// task's end. The start keeps the call's start time (its id's), the
// result its end, and the trace and the causation tree show the call.
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
	evs := h.rawEvents(id)
	called, start, result, answer := evs[2], evs[4], evs[5], evs[6]
	if start.Time.IsZero() || !start.Time.Equal(idTime(start.ID)) || !result.Time.Equal(idTime(result.ID)) ||
		start.Time.Before(called.Time) || result.Time.Before(start.Time) || answer.Time.Before(result.Time) {
		t.Fatalf("times: model %s, start %s (id %s), result %s (id %s), next model %s",
			called.Time, start.Time, idTime(start.ID), result.Time, idTime(result.ID), answer.Time)
	}
	if result.Causation != start.ID || evs[4].Seq+1 != evs[5].Seq {
		t.Fatalf("result caused by %s, want the start %s", result.Causation, start.ID)
	}

	var tool *traces.Span
	spans := traces.Build(evs, traces.Options{})
	for i := range spans {
		if spans[i].Kind == traces.KindTool {
			tool = &spans[i]
		}
	}
	if tool == nil || tool.Name != "execute_tool current_time" || tool.Open ||
		!tool.Start.Equal(start.Time) || !tool.End.Equal(result.Time) || tool.SpanID != traces.SpanID(start.ID) {
		t.Fatalf("tool span = %+v, want one from %s to %s", tool, start.Time, result.Time)
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
