package agent

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/fsm"
)

// probeModel asks for the probe tool, then answers with its result; with
// hold set, its answer waits until its context ends (a daemon that dies
// while the model works), after telling arrived.
type probeModel struct {
	hold    bool
	arrived chan struct{}
}

func (probeModel) Name() string { return "probe-model" }
func (m probeModel) Complete(ctx context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	r := llm.Response{Model: "probe-model", ToolCalls: []fsm.ToolCall{{ID: "c1", Name: "probe", Arguments: "{}"}}}
	if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
		if m.hold {
			m.arrived <- struct{}{}
			<-ctx.Done()
			return llm.Response{}, ctx.Err()
		}
		r = llm.Response{Model: "probe-model", Content: "got " + last.Content}
	}
	report(llm.Attempt{Number: 1, Model: "probe-model", Status: 200, Response: &r})
	return r, nil
}

// probeTool records the idempotency key of every call.
type probeTool struct {
	mu   sync.Mutex
	keys []string
}

func (p *probeTool) tool() tools.Tool {
	return tools.Func("probe", "Answers ok.", nil, func(_ context.Context, c tools.Call) (string, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.keys = append(p.keys, c.IdempotencyKey)
		return "ok", nil
	})
}

func (p *probeTool) calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.keys...)
}

// A task that calls one tool is three synced appends: its input with its
// admission (a slot is free), the reasoning with the tool call's start,
// and the tool call's outcome with the next reasoning and the task's end.
func TestOneToolCallTaskInThreeAppends(t *testing.T) {
	probe := runProbeTask(t, probeModel{}, "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED "+
		"TOOL_CALL_COMPLETED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED", 3)
	if len(probe.calls()) != 1 {
		t.Fatalf("tool calls = %v", probe.calls())
	}
}

// runProbeTask runs one task of model calling the probe tool to its end
// and checks its events (their types) and the appends that wrote them.
func runProbeTask(t *testing.T, model llm.Model, events string, appends uint64) *probeTool {
	t.Helper()
	probe := &probeTool{}
	h := newHarness(t, Options{Model: model, Tools: []tools.Tool{probe.tool()}, DisableReflection: true})
	before := h.log.Stats().Appends
	task := h.wait(h.submit("probe it"))
	if task.State != fsm.StateCompleted || task.Context.FinalResult != "got ok" {
		t.Fatalf("task = %s %q", task.State, task.Context.FinalResult)
	}
	if got := types(h.events(task.ID)); got != events {
		t.Fatalf("events = %s, want %s", got, events)
	}
	if n := h.log.Stats().Appends - before; n != appends {
		t.Fatalf("%d appends, want %d", n, appends)
	}
	h.assertNoIssues()
	return probe
}

// The outcome of a tool call is held while the next reasoning's model
// works: a daemon that stops meanwhile loses it, and after the restart the
// call runs again with the same idempotency key (at least once), and the
// task completes.
func TestToolOutcomeHeldForTheModelRunsAgainAfterACrash(t *testing.T) {
	probe := &probeTool{}
	arrived := make(chan struct{}, 1)
	h := newHarness(t, Options{Model: probeModel{hold: true, arrived: arrived}, Tools: []tools.Tool{probe.tool()}, DisableReflection: true})
	id := h.submit("probe it")
	<-arrived
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: the model's call is cancelled, as by a kill
	_ = h.a.Stop(ctx)
	h.a = nil
	h.opts.Model = probeModel{}
	h.start()
	task := h.wait(id)
	if task.State != fsm.StateCompleted || task.Context.FinalResult != "got ok" {
		t.Fatalf("task = %s %q", task.State, task.Context.FinalResult)
	}
	// The first run's outcome never reached the log: the step started
	// twice and completed once.
	if got, want := types(h.events(id)), "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED "+
		"TOOL_CALL_STARTED TOOL_CALL_COMPLETED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	keys := probe.calls()
	if len(keys) != 2 || keys[0] != keys[1] || keys[0] != IdempotencyKey(id, 1, 0) {
		t.Fatalf("tool calls = %v, want two with key %s", keys, IdempotencyKey(id, 1, 0))
	}
	h.assertNoIssues()
}

// retryingModel is probeModel whose answer after the tool's result fails
// once and is retried: the failed attempt is recorded as it happens.
type retryingModel struct{ probeModel }

func (m retryingModel) Complete(ctx context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
		report(llm.Attempt{Number: 1, Model: "probe-model", Status: 500, Err: errors.New("overloaded"), WillRetry: true})
	}
	return m.probeModel.Complete(ctx, req, func(a llm.Attempt) {
		if a.Number == 1 && req.Messages[len(req.Messages)-1].Role == "tool" {
			a.Number = 2
		}
		report(a)
	})
}

// A model call chained after a tool call whose first attempt is retried:
// the failed attempt's MODEL_CALLED is appended with the tool call's
// outcome, which was held for the model call, and the model's answer
// after it, without the outcome again: four appends, each event once.
func TestRetriedAttemptCarriesTheHeldOutcome(t *testing.T) {
	runProbeTask(t, retryingModel{}, "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED "+
		"TOOL_CALL_COMPLETED MODEL_CALLED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED", 4)
}
