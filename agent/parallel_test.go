package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/fsm"
)

// fanModel asks for n calls of the gate tool in one turn, then answers
// with their results joined.
type fanModel struct{ n int }

func (fanModel) Name() string { return "fan-model" }
func (m fanModel) Complete(_ context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	r := llm.Response{Model: "fan-model"}
	if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
		var got []string
		for _, msg := range req.Messages {
			if msg.Role == "tool" {
				got = append(got, msg.Content)
			}
		}
		r.Content = strings.Join(got, ",")
	} else {
		for i := range m.n {
			r.ToolCalls = append(r.ToolCalls, fsm.ToolCall{ID: fmt.Sprintf("c%d", i), Name: "gate", Arguments: fmt.Sprintf(`{"n":%d}`, i)})
		}
	}
	report(llm.Attempt{Number: 1, Model: "fan-model", Status: 200, Response: &r})
	return r, nil
}

// gate is a tool whose calls answer only once want of them are running
// at once (or fail at their context's end): calls made one after the
// other never get there.
type gate struct {
	want    int
	mu      sync.Mutex
	keys    []string
	running int
	open    chan struct{}
	hold    map[int]bool // calls (by argument n) that wait for their context's end
}

func newGate(want int) *gate { return &gate{want: want, open: make(chan struct{})} }

func (g *gate) tool() tools.Tool {
	return tools.Func("gate", "Answers once every call of the turn runs.", nil, func(ctx context.Context, c tools.Call) (string, error) {
		var in struct{ N int }
		_ = json.Unmarshal(c.Arguments, &in)
		g.mu.Lock()
		g.keys = append(g.keys, c.IdempotencyKey)
		if g.running++; g.running == g.want {
			close(g.open)
		}
		hold := g.hold[in.N]
		g.mu.Unlock()
		select {
		case <-g.open:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if hold {
			<-ctx.Done()
			return "", ctx.Err()
		}
		return fmt.Sprintf("ok%d", in.N), nil
	})
}

func (g *gate) calls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.keys...)
}

// The calls a model asks for in one turn run side by side: their starts
// go in one append with the reasoning, before any runs, and their results
// are recorded in plan order. One after the other, the first call would
// wait for the others until its timeout.
func TestParallelToolCallsRunSideBySide(t *testing.T) {
	g := newGate(3)
	h := newHarness(t, Options{Model: fanModel{n: 3}, Tools: []tools.Tool{g.tool()}, DisableReflection: true,
		ToolTimeout: testTimeout})
	before := h.log.Stats().Appends
	task := h.wait(h.submit("fan out"))
	if task.State != fsm.StateCompleted || task.Context.FinalResult != "ok0,ok1,ok2" {
		t.Fatalf("task = %s %q", task.State, task.Context.FinalResult)
	}
	evs := h.events(task.ID)
	if got, want := types(evs), "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED TOOL_CALL_STARTED TOOL_CALL_STARTED "+
		"TOOL_CALL_COMPLETED TOOL_CALL_COMPLETED TOOL_CALL_COMPLETED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	// The reasoning and the three starts are one commit: one time.
	for _, ev := range evs[3:7] {
		if !ev.Time.Equal(evs[2].Time) {
			t.Fatalf("%s at %s, not in MODEL_CALLED's commit at %s", ev.Type, ev.Time, evs[2].Time)
		}
	}
	for i, ev := range evs[7:10] {
		b := ev.Body.(*fsm.ToolCallResultBody)
		if b.StepIndex != i || ev.Causation != evs[4+i].ID {
			t.Fatalf("result %d: step %d caused by %s, want step %d caused by its start %s", i, b.StepIndex, ev.Causation, i, evs[4+i].ID)
		}
	}
	// input, admission, reasoning with the starts, then one to three
	// appends for the results (the last with the next reasoning).
	if n := h.log.Stats().Appends - before; n < 4 || n > 6 {
		t.Fatalf("%d appends, want 4 to 6", n)
	}
	keys := g.calls()
	if len(keys) != 3 {
		t.Fatalf("tool calls = %v", keys)
	}
	h.assertNoIssues()
}

// A stop while calls of one turn run records no more results; after the
// restart the steps without a result run again, side by side, with the
// same keys, and the task completes with every result once.
func TestParallelToolCallsRunAgainAfterAStop(t *testing.T) {
	g := newGate(3)
	g.hold = map[int]bool{1: true, 2: true}
	h := newHarness(t, Options{Model: fanModel{n: 3}, Tools: []tools.Tool{g.tool()}, DisableReflection: true,
		ToolTimeout: testTimeout})
	id := h.submit("fan out")
	// Step 0's result is recorded while steps 1 and 2 still run.
	h.a.WaitUntil(testCtx(t), id, func(t *fsm.Task) bool { return len(t.Context.ActionsDone) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	<-ctx.Done()
	_ = h.a.Stop(ctx) // no grace: the calls are cancelled, as by a kill
	cancel()
	h.a = nil

	g2 := newGate(2)
	h.opts.Tools = []tools.Tool{g2.tool()}
	h.start()
	task := h.wait(id)
	if task.State != fsm.StateCompleted || task.Context.FinalResult != "ok0,ok1,ok2" {
		t.Fatalf("task = %s %q", task.State, task.Context.FinalResult)
	}
	if got, want := types(h.events(id)), "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED TOOL_CALL_STARTED TOOL_CALL_STARTED "+
		"TOOL_CALL_COMPLETED TOOL_CALL_STARTED TOOL_CALL_STARTED TOOL_CALL_COMPLETED TOOL_CALL_COMPLETED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	again := g2.calls()
	want := map[string]bool{IdempotencyKey(id, 1, 1): true, IdempotencyKey(id, 1, 2): true}
	if len(again) != 2 || !want[again[0]] || !want[again[1]] || again[0] == again[1] {
		t.Fatalf("calls after the restart = %v, want steps 1 and 2's keys", again)
	}
	h.assertNoIssues()
}

// A call of a turn that records a durable handle while an earlier call of
// the turn still runs records it again once the earlier result is in, so
// that after a crash the call resumes from its handle as a single call
// does.
func TestParallelToolCallHandleSurvivesARestart(t *testing.T) {
	ht := &handleTool{arrived: make(chan struct{}, 1)}
	release := make(chan struct{})
	first := tools.Func("first", "Answers once released.", nil, func(ctx context.Context, _ tools.Call) (string, error) {
		select {
		case <-release:
			return "first done", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	fake := newFakeModel(t, func(r *chatReq) reply {
		if role, content := r.last(); role == "tool" {
			return text(content)
		}
		return calls("first", `{}`, "job", `{}`)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil), Tools: []tools.Tool{first, ht}, DisableReflection: true})
	id := h.submit("run both")
	<-ht.arrived // step 1 recorded its handle while step 0 runs
	close(release)
	h.a.WaitUntil(testCtx(t), id, func(t *fsm.Task) bool {
		return len(t.Context.ActionsDone) == 1 && t.Context.PendingCall != nil && t.Context.PendingCall.Handle == "task-42"
	})
	h.crash()
	ht.checkResumed(t, h.wait(id))
	h.verify()
}

// While the calls of one turn run, the progress view awaits the current
// step's call, named by its own TOOL_CALL_STARTED (not the later starts
// of the same append).
func TestParallelToolCallsAwaitTheCurrentStart(t *testing.T) {
	g := newGate(4) // three calls never open it: they run until the stop
	h := newHarness(t, Options{Model: fanModel{n: 3}, Tools: []tools.Tool{g.tool()}, DisableReflection: true,
		ToolTimeout: testTimeout})
	id := h.submit("fan out")
	defer func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // no grace: the calls end with the stop
		_ = h.a.Stop(ctx)
		h.a = nil
	}()
	if _, err := h.a.WaitUntil(testCtx(t), id, func(t *fsm.Task) bool { return t.Version >= 7 }); err != nil {
		t.Fatal(err)
	}
	evs := h.events(id)
	if got, want := types(evs[4:7]), "TOOL_CALL_STARTED TOOL_CALL_STARTED TOOL_CALL_STARTED"; got != want {
		t.Fatalf("events = %s, want %s", types(evs), want)
	}
	p, err := h.a.View().Progress(id)
	if err != nil {
		t.Fatal(err)
	}
	if a := p.AwaitingTool; a == nil || a.StepIndex != 0 || a.EventID != evs[4].ID || a.ToolCallID != "c0" {
		t.Fatalf("awaiting %+v, want step 0's call started by %s", a, evs[4].ID)
	}
}

// A call of a turn that recorded a durable handle as the current step
// resumes from it after a crash, side by side with the rest of the turn,
// without a third TOOL_CALL_STARTED: the one with the handle is in the
// log.
func TestParallelToolCallResumedFromItsHandle(t *testing.T) {
	ht := &handleTool{arrived: make(chan struct{}, 1)}
	second := tools.Func("second", "Answers at once.", nil, func(context.Context, tools.Call) (string, error) { return "second done", nil })
	fake := newFakeModel(t, func(r *chatReq) reply {
		if role, content := r.last(); role == "tool" {
			return text(content)
		}
		return calls("job", `{}`, "second", `{}`)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil), Tools: []tools.Tool{ht, second}, DisableReflection: true})
	id := h.submit("run both")
	<-ht.arrived // step 0 recorded its handle
	h.a.WaitUntil(testCtx(t), id, func(t *fsm.Task) bool {
		return t.Context.PendingCall != nil && t.Context.PendingCall.Handle == "task-42"
	})
	h.crash()
	task := h.wait(id)
	if task.State != fsm.StateCompleted {
		t.Fatalf("task = %s", task.State)
	}
	var jobStarts []string
	for _, ev := range h.events(id) {
		if b, ok := ev.Body.(*fsm.ToolCallStartedBody); ok && b.StepIndex == 0 {
			jobStarts = append(jobStarts, b.Handle)
		}
	}
	if len(jobStarts) != 2 || jobStarts[0] != "" || jobStarts[1] != "task-42" {
		t.Fatalf("step 0's starts (their handles): %q, want \"\" then task-42", jobStarts)
	}
	ht.mu.Lock()
	handles := slices.Clone(ht.handles)
	ht.mu.Unlock()
	if !slices.Equal(handles, []string{"", "task-42"}) {
		t.Fatalf("handles the job's runs got: %q", handles)
	}
	h.assertNoIssues()
	h.verify()
}
