package agent

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// Parallel tool calls. When one model turn asks for several tool calls
// (the plan's steps from the current one on are tool calls), the calls
// run side by side instead of one after the other:
//
//   - their TOOL_CALL_STARTED events go in one append (with the events
//     the stage holds, chain.go), before any of them runs: each call's
//     start is durable before the call, as a single call's is;
//   - each call runs on its own goroutine, under the tool semaphore and
//     the per-call timeout, with its own idempotency key;
//   - the results are recorded in plan order (the machine completes the
//     current step only): as soon as the first steps not yet recorded
//     have their results, those results are appended together, and the
//     appends of the tasks running at once share the log's group commit.
//     The last step's result goes through outcome like a single call's,
//     so it is held for the next model call (chain.go).
//
// Only tools that run in the process or on an MCP server run this way:
// a worker tool (a broker task) or a tool the task's type does not have
// ends the batch, and its step runs on its own when its turn comes.
//
// A crash, a stop, a suspend or a cancel while the calls run records no
// more results: the steps whose results are not in the log run again
// with the same keys when the task next runs (the at-least-once rule).

// parallelSteps returns the steps of t's plan from step on that may run
// side by side (at least two), or nil: consecutive tool_call steps whose
// tools kind has and that are not worker tools.
func parallelSteps(t *fsm.Task, kind *taskKind, step *fsm.PlanStep) []*fsm.PlanStep {
	var out []*fsm.PlanStep
	for i := step.Index; i < len(t.Context.Plan.Steps); i++ {
		s := &t.Context.Plan.Steps[i]
		if s.ActionType != fsm.ActionToolCall || s.Completed {
			break
		}
		tool, err := kind.registry.Lookup(s.ActionParams["tool"])
		if err != nil {
			break
		}
		if _, worker := tool.(*tools.WorkerTool); worker {
			break
		}
		out = append(out, s)
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

// toolRun is one call of a batch.
type toolRun struct {
	step    *fsm.PlanStep
	tool    tools.Tool
	started *fsm.ToolCallStartedBody
	cause   ulid.ULID // its TOOL_CALL_STARTED
	out     tools.Result
	err     error
	dur     time.Duration
	notes   []string
	done    bool
	// ahead is a handle recorded while the step was not yet the current
	// one: the fold keeps no call pending for it, so it is recorded again
	// once the step before it has its result.
	ahead string
}

// bodies are the events that record r's outcome: its notes, then its
// result.
func (r *toolRun) bodies() []fsm.Body {
	return withNotes(r.notes, toolResult(r.started, r.out, r.err, r.dur))
}

// withNotes are the events that record a call's outcome: a TASK_NOTIFY
// for each of the notes it sent, then its result.
func withNotes(notes []string, result fsm.Body) []fsm.Body {
	bs := make([]fsm.Body, 0, len(notes)+1)
	for _, n := range notes {
		bs = append(bs, &fsm.TaskNotifyBody{Message: n})
	}
	return append(bs, result)
}

// toolResult is the TOOL_CALL_COMPLETED (or _FAILED, with err) body of
// the call that started.
func toolResult(started *fsm.ToolCallStartedBody, out tools.Result, err error, dur time.Duration) *fsm.ToolCallResultBody {
	b := &fsm.ToolCallResultBody{StepIndex: started.StepIndex, Tool: started.Tool, ToolCallID: started.ToolCallID,
		IdempotencyKey: started.IdempotencyKey, Result: out.Text, Parts: out.Parts, Source: started.Source,
		DurationMS: dur.Milliseconds(), NewMessages: []fsm.Message{toolMessage(started.ToolCallID, out.Text, err)}}
	if err != nil {
		b.Error = err.Error()
		b.Result, b.Parts = "", nil
	}
	return b
}

// startedBody is the TOOL_CALL_STARTED of step's call of tool, with the
// handle the last run recorded when this is a run after a crash.
func startedBody(t *fsm.Task, step *fsm.PlanStep, tool tools.Tool) *fsm.ToolCallStartedBody {
	key := IdempotencyKey(t.ID, t.Context.Iteration, step.Index)
	var source string
	if src := tools.SourceOf(tool); src.Kind != tools.SourceBuiltin {
		source = src.String()
	}
	b := &fsm.ToolCallStartedBody{StepIndex: step.Index, Tool: step.ActionParams["tool"], ToolCallID: step.ActionParams["tool_call_id"],
		Arguments: step.ActionParams["arguments"], IdempotencyKey: key, Source: source}
	if pc := t.Context.PendingCall; pc != nil && pc.StepIndex == step.Index && pc.IdempotencyKey == key {
		b.Handle = pc.Handle // a run after a crash resumes from the handle the last one recorded
	}
	return b
}

// runTools runs the calls of steps (parallelSteps) side by side, after the
// events h holds (nil: none), and records their results in plan order.
func (a *Agent) runTools(ctx context.Context, t *fsm.Task, kind *taskKind, steps []*fsm.PlanStep, h *held) {
	v := t.Version
	runs := make([]*toolRun, len(steps))
	evs := make([]eventlog.Event, 0, len(steps))
	starting := make([]*toolRun, 0, len(steps)) // the runs of evs
	for i, s := range steps {
		tool, _ := kind.registry.Lookup(s.ActionParams["tool"])
		runs[i] = &toolRun{step: s, tool: tool, started: startedBody(t, s, tool)}
		if runs[i].started.Handle != "" {
			// A run after a crash resumes from the handle the last one
			// recorded: its start, with the handle, is in the log.
			runs[i].cause = t.LastEvent
			continue
		}
		evs = append(evs, a.event(t.ID, t.LastEvent, runs[i].started))
		starting = append(starting, runs[i])
	}
	// The log draws the starts' ids (an id the caller draws costs the log
	// a lookup): each is its result's cause, read from the append's result.
	res, ok := a.appendHeld(ctx, t, h, v, evs...)
	if !ok {
		return
	}
	v = res.Version
	for i, ev := range res.Events[len(res.Events)-len(starting):] {
		starting[i].cause = ev.ID
	}
	// The task as folded once the starts are: the results are predicted on
	// it, so that the last one may chain the next stage (outcome).
	pred := t.Fork() // a prediction: Apply writes none of the memory it shares with t
	now := a.opts.Now()
	for i := range evs {
		evs[i].ID = starting[i].cause
		predict(&pred, &evs[i], starting[i].started, now)
	}

	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex // guards v and the runs' notes: the calls' goroutines notify and record handles
		finished = make(chan int, len(runs))
		wg       sync.WaitGroup
		next     int // the first step whose result is not recorded
	)
	defer wg.Wait() // a stop waits for the calls the stage started
	for i, r := range runs {
		wg.Go(func() {
			defer func() { finished <- i }()
			if a.testToolWait != nil {
				a.testToolWait()
			}
			if err := a.toolSem.acquire(callCtx); err != nil {
				r.err = err
				return
			}
			call := tools.Call{
				TaskID: t.ID, TaskType: kind.Name, IdempotencyKey: r.started.IdempotencyKey, Arguments: json.RawMessage(r.started.Arguments),
				Cause: r.cause, Correlation: a.correlation(t.ID), Handle: r.started.Handle,
				Notify: func(msg string) { mu.Lock(); r.notes = append(r.notes, msg); mu.Unlock() },
				RecordHandle: func(ctx context.Context, handle string) error {
					mu.Lock()
					defer mu.Unlock()
					b := *r.started
					b.Handle = handle
					res, ok := a.appendTask(ctx, t, v, a.event(t.ID, r.cause, &b))
					if !ok {
						return errHandleNotRecorded
					}
					v = res.Version
					if i > next {
						r.ahead = handle
					}
					return nil
				},
			}
			r.out, r.err, r.dur = a.callHeld(callCtx, r.tool, call)
		})
	}

	// Record the results in plan order as they come, all but the last.
	last := len(runs) - 1
	for range runs {
		runs[<-finished].done = true
		if ctx.Err() != nil {
			cancel()
			continue
		}
		var ready []eventlog.Event
		mu.Lock()
		for ; next < last && runs[next].done; next++ {
			ready = a.resultEvents(t, &pred, runs, next, ready, now, false)
		}
		if len(ready) > 0 {
			res, ok := a.appendTask(ctx, t, v, ready...)
			if !ok {
				mu.Unlock()
				cancel() // the task moved: no more results are recorded
				wg.Wait()
				return
			}
			v = res.Version
		}
		mu.Unlock()
	}
	wg.Wait()
	if ctx.Err() != nil {
		// Suspended, cancelled or stopping: the results not recorded are
		// not; after a restart those calls run again with the same keys.
		return
	}
	// The last result, after any before it that came with it, as a single
	// call's: it may chain the next model call.
	var rest []eventlog.Event
	for ; next < last; next++ {
		rest = a.resultEvents(t, &pred, runs, next, rest, now, true)
	}
	var hh *held
	if len(rest) > 0 {
		hh = &held{base: v, evs: rest}
	}
	pred.Version = v + uint64(len(rest)) // handles recorded meanwhile are facts the prediction did not see
	a.outcomeHeld(ctx, &pred, hh, v, runs[last].cause, runs[last].bodies()...)
}

// resultEvents appends to evs the events that record the outcome of
// runs[j], predicted on pred, and, when the next call recorded a handle
// while it was not the current step, its TOOL_CALL_STARTED with the
// handle again, now that it is: the fold keeps it pending, so that a run
// after a crash resumes from it. withIDs draws the events' ids now, for
// events held for a later append (outcome's hand-over names them before
// the commit); otherwise the log draws them.
func (a *Agent) resultEvents(t *fsm.Task, pred *fsm.Task, runs []*toolRun, j int, evs []eventlog.Event, now time.Time, withIDs bool) []eventlog.Event {
	add := func(cause ulid.ULID, b fsm.Body) {
		ev := a.event(t.ID, cause, b)
		if withIDs {
			ev.ID = a.log.NewID()
		}
		evs = append(evs, ev)
		predict(pred, &evs[len(evs)-1], b, now)
	}
	for _, b := range runs[j].bodies() {
		add(runs[j].cause, b)
	}
	if j+1 < len(runs) && runs[j+1].ahead != "" {
		b := *runs[j+1].started
		b.Handle = runs[j+1].ahead
		add(runs[j+1].cause, &b)
	}
	return evs
}
