package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// kindOf returns the task's type, "general" for a task whose type this
// agent does not know (a log written with other types).
func (a *Agent) kindOf(t *fsm.Task) *taskKind {
	_, kinds := a.catalog.current(&a.opts)
	if k, ok := kinds[t.Type]; ok {
		return k
	}
	return kinds[TypeGeneral]
}

// fail records TASK_FAILED for t at version v, after what h holds.
func (a *Agent) fail(ctx context.Context, t *fsm.Task, h *held, v uint64, cause ulid.ULID, reason, msg string) {
	a.appendHeld(ctx, t, h, v, a.event(t.ID, cause, &fsm.TaskFailedBody{Reason: reason, Error: msg}))
}

// admit starts a task that waited in idle: TASK_CREATED, caused by the
// input that created the task, with the input copied into its body. It is
// appended on its own, not held for the first reasoning (chain.go): the
// task is reasoning, for its readers too, while the model works.
func (a *Agent) admit(ctx context.Context, t *fsm.Task) {
	a.appendTask(ctx, t, t.Version, a.admission(t))
}

// admission is the TASK_CREATED that admits t, with the version of its
// task type and the model it runs with as they are now.
func (a *Agent) admission(t *fsm.Task) eventlog.Event {
	kind := a.kindOf(t)
	return a.event(t.ID, t.LastEvent, &fsm.TaskCreatedBody{
		Machine: t.Machine, TaskType: t.Type, InputText: t.Context.InputText,
		InputMetadata: t.Context.InputMetadata, Source: t.Context.Source, Priority: t.Priority, Metadata: t.Metadata,
		ParentTaskID: t.ParentID, TypeVersion: kind.version, Model: kind.modelName, ConcurrencyKey: t.ConcurrencyKey,
	})
}

// callModel is a model-call stage (act.Stage: reason for version 1;
// perceive, think, plan or reflect for version 0): the iteration guard,
// one model call under the LLM semaphore (each attempt recorded as
// MODEL_CALLED), then the stage's outcome event. Failed attempts that will
// be retried are recorded as they happen; the final attempt is recorded in
// the same append as the outcome.
//
// h holds the events of the stages before it that are not appended yet
// (nil: none); its first append carries them (chain.go).
func (a *Agent) callModel(ctx context.Context, t *fsm.Task, act fsm.Action, h *held) {
	v, cause := t.Version, t.LastEvent
	kind := a.kindOf(t)
	if t.Context.Iteration > kind.maxIterations {
		a.fail(ctx, t, h, v, cause, "max_iterations",
			fmt.Sprintf("the task did not finish within %d reasoning iterations (max-iterations)", kind.maxIterations))
		return
	}
	req, decision, err := a.stageRequest(ctx, t, kind, act.Stage)
	if err != nil {
		a.fail(ctx, t, h, v, cause, "unknown_stage", err.Error())
		return
	}
	purpose := req.Purpose

	if a.testLLMWait != nil {
		a.testLLMWait()
	}
	over, release := a.checkBudget(t, kind, req)
	if over != nil {
		a.outcomeHeld(ctx, t, h, v, cause, over, fsm.BudgetOutcome(over))
		return
	}
	committed := false // the outcome is in the log: the hook drops the reservation once it folds it
	defer func() {
		if !committed {
			release()
		}
	}()
	rateCtx, unreserve, err := a.reserveRate(ctx, kind, req)
	if err != nil {
		return
	}
	defer unreserve()
	if err := a.llmSem.acquire(ctx); err != nil {
		return
	}
	callCtx, cancel := context.WithCancel(rateCtx)
	// What the attempts' report changes, and the call's live text (its
	// reply goes to the task's stream as it arrives: deltas.go), in one
	// allocation: the callbacks escape, and so does everything they write.
	at := &modelAttempts{v: v, task: refOf(t)}
	if h != nil {
		// The report's copy of what h holds: a retried attempt's append
		// carries it; h is written back once the call returns.
		at.held, at.holds = *h, true
	}
	live := &at.live
	a.deltas.beginIn(live, t.ID, cause)
	req.Deltas = live.write
	resp, err := kind.model.Complete(callCtx, req, func(att llm.Attempt) {
		a.logAttempt(at.task, purpose, att)
		at.attempts = att.Number
		if !att.WillRetry {
			at.last, at.hasLast = att, true
			return
		}
		// Recorded now: a retry waits, and the log should show why.
		live.restart(att.Number+1, att.Err)
		res, ok := a.appendHeldRef(ctx, at.task, at.heldPtr(), at.v, a.event(at.task.id, cause, modelCalled(purpose, att)))
		if !ok {
			at.dropped = true
			cancel()
			return
		}
		at.v = res.Version
	})
	// The call leaves the hub before its outcome is appended: a reader
	// that comes now reads its text from the log (everything streamed so
	// far is with the readers already there).
	live.end()
	cancel()
	a.llmSem.release()
	if h != nil {
		*h = at.held
	}
	if at.dropped || ctx.Err() != nil {
		return // the task moved, or the agent is stopping: nothing to record
	}
	bodies := make([]fsm.Body, 0, 2)
	if at.hasLast {
		bodies = append(bodies, modelCalled(purpose, at.last))
	}
	if err != nil {
		bodies = append(bodies, &fsm.TaskFailedBody{Reason: "model_error",
			Error: fmt.Sprintf("model call failed after %d attempt(s): %v", max(at.attempts, 1), err)})
		_, committed = a.outcomeHeld(ctx, t, h, at.v, cause, bodies...)
		return
	}
	_, committed = a.outcomeHeld(ctx, t, h, at.v, cause, append(bodies, decision.decide(resp))...)
}

// modelAttempts is what a model call's attempts report (callModel), with
// the call's live text, and what the report needs to append a retried
// attempt: the task's reference and a copy of the events held (holds: a
// held was given). The report holds neither the task nor the held, which
// so stay where the stage put them.
type modelAttempts struct {
	live     liveCall
	v        uint64
	last     llm.Attempt
	hasLast  bool
	attempts int
	dropped  bool
	task     taskRef
	held     held
	holds    bool
}

// heldPtr is the held the report appends after, nil for none.
func (at *modelAttempts) heldPtr() *held {
	if !at.holds {
		return nil
	}
	return &at.held
}

// stageRequest builds the model request of a model-call stage and what
// turns the reply into the stage's outcome body, for t of kind (resolved
// once per stage: the request, its budget and its model are of one
// resolution).
func (a *Agent) stageRequest(ctx context.Context, t *fsm.Task, kind *taskKind, stage fsm.Stage) (llm.Request, stageDecision, error) {
	if stage == fsm.StageReason {
		var opening []fsm.Message
		if firstReasoning(t) {
			opening = openingMessages(t, a.memoryIndex(ctx, t, kind))
		}
		return buildRequest(kind, t, opening), stageDecision{t: t, opening: opening}, nil
	}
	// A version 0 stage's closures hold the task: a copy of it, so that
	// the caller's stays where it is (version 0 stages only pay for it).
	lt := *t
	req, legacy, err := a.legacyRequest(ctx, &lt, kind, stage)
	return req, stageDecision{legacy: legacy}, err
}

// stageDecision turns a model-call stage's reply into its outcome body: a
// reasoning stage's decision (decide), or a version 0 stage's (legacy).
// A value rather than a closure: a reasoning stage, every call of the
// current machine, allocates none.
type stageDecision struct {
	t       *fsm.Task
	opening []fsm.Message
	legacy  func(llm.Response) fsm.Body
}

func (d stageDecision) decide(r llm.Response) fsm.Body {
	if d.legacy != nil {
		return d.legacy(r)
	}
	return decide(d.t, d.opening, r)
}

// memoryIndex is the long-term memory index a task's first model call
// sees, if its type may list memory ("" otherwise).
func (a *Agent) memoryIndex(ctx context.Context, t *fsm.Task, kind *taskKind) string {
	if t.Context.Iteration != 1 || !kind.registry.Has(tools.MemoryList) {
		return ""
	}
	if entries, err := a.memory.List(ctx); err == nil && len(entries) > 0 {
		return tools.FormatIndex(entries)
	}
	return ""
}

// runStep is the acting stage: it runs the plan step the machine says is
// due. A tool call is recorded as TOOL_CALL_STARTED (with its idempotency
// key), runs under the tool semaphore with the per-call timeout, and is
// recorded as TOOL_CALL_COMPLETED or TOOL_CALL_FAILED (after any
// TASK_NOTIFY it sent, in the same append). A sub_task step creates its
// child task. Any other step completes with its text, in the event the
// machine names (act.Done); when that completes the task, TASK_COMPLETED
// goes in the same append (see outcome).
func (a *Agent) runStep(ctx context.Context, t *fsm.Task, act fsm.Action) {
	step := t.Context.Plan.CurrentStep()
	if step == nil || step.Index != act.Step {
		return
	}
	switch act.StepType {
	case fsm.ActionToolCall:
		a.runTool(ctx, t, step, nil)
	case fsm.ActionSubTask:
		a.startSubTask(ctx, t, step)
	default: // respond, generate
		if b := pureStep(t, act); b != nil {
			a.outcome(ctx, t, t.Version, t.LastEvent, b)
		}
	}
}

// wakeUp runs when the time a task waited for (act.At) may have come: if
// it has, it records the event the machine named (act.Done); if not, it
// gives the slot back and waits again.
func (a *Agent) wakeUp(ctx context.Context, t *fsm.Task, act fsm.Action) {
	b := fsm.StepDone(act, "", false)
	switch {
	case b == nil:
		a.sched.release(t.ID, false) // nothing to record: something else moves the task
	case a.opts.Now().Before(act.At):
		a.sched.release(t.ID, false)
		a.sched.wakeAt(t.ID, t.Priority, t.ConcurrencyKey, act.At)
	default:
		a.outcome(ctx, t, t.Version, t.LastEvent, b)
	}
}

// IdempotencyKey is the key of the tool call of a step: the same every time
// the step runs, including after a crash, and different for every step of
// every iteration.
func IdempotencyKey(taskID string, iteration, stepIndex int) string {
	return taskID + ":" + strconv.Itoa(iteration) + ":" + strconv.Itoa(stepIndex)
}

// runTool runs the tool call of step, after the events h holds (nil: none),
// which the append of TOOL_CALL_STARTED (or of the step's failure) carries.
// Its outcome goes through outcome, so that the next stage may chain.
func (a *Agent) runTool(ctx context.Context, t *fsm.Task, step *fsm.PlanStep, h *held) {
	v, cause := t.Version, t.LastEvent
	name := step.ActionParams["tool"]
	callID := step.ActionParams["tool_call_id"]
	args := step.ActionParams["arguments"]
	var key, source string // the call's idempotency key once known (startedBody's)
	kind := a.kindOf(t)
	result := func(out tools.Result, err error, dur time.Duration) *fsm.ToolCallResultBody {
		return toolResult(&fsm.ToolCallStartedBody{StepIndex: step.Index, Tool: name, ToolCallID: callID,
			IdempotencyKey: key, Source: source}, out, err, dur)
	}

	// A provider that has not listed its tools yet (an MCP server starting
	// with the daemon) may have the tool: wait for it.
	var down error // why the tool's provider cannot have it now
	if !kind.registry.Has(name) {
		down = a.awaitTool(ctx, name)
		kind = a.kindOf(t)
	}
	// A tool outside the task's type fails the step without running.
	if !kind.registry.Has(name) {
		var err error
		if all, _ := a.catalog.current(&a.opts); all.Has(name) {
			err = fmt.Errorf("tool %q is not available to %s tasks (available: %s)", name, kind.Name, strings.Join(kind.registry.Names(), ", "))
		} else if down != nil {
			err = fmt.Errorf("tool %q is unknown: %w", name, down)
		} else {
			err = fmt.Errorf("unknown tool %q (available: %s)", name, strings.Join(kind.registry.Names(), ", "))
		}
		key = IdempotencyKey(t.ID, t.Context.Iteration, step.Index)
		a.outcomeHeld(ctx, t, h, v, cause, result(tools.Result{}, err, 0))
		return
	}
	tool, _ := kind.registry.Lookup(name)
	started := startedBody(t, step, tool)
	key, source = started.IdempotencyKey, started.Source
	// A tool that only reads is recorded with its outcome (readers.go).
	if tools.SideEffectFree(tool) {
		a.runReader(ctx, t, kind, tool, started, h)
		return
	}
	// The calls of one model turn run side by side (parallel.go).
	if steps := parallelSteps(t, kind, step); steps != nil {
		pt := *t // runTools' goroutines hold the task: a copy, made on this path only
		a.runTools(ctx, &pt, kind, steps, h)
		return
	}
	if w, ok := tool.(*tools.WorkerTool); ok {
		a.delegateTool(ctx, t, h, w, started, result)
		return
	}
	if started.Handle == "" || (h != nil && len(h.evs) > 0) {
		res, ok := a.appendHeld(ctx, t, h, v, a.event(t.ID, cause, started))
		if !ok {
			return
		}
		v, cause = res.Version, lastID(res)
	}
	// (Otherwise a run after a crash resumes from the handle the last run
	// recorded: its start, with the handle, is the last one in the log.)

	if a.testToolWait != nil {
		a.testToolWait()
	}
	if err := a.toolSem.acquire(ctx); err != nil {
		return
	}
	// What the tool's goroutine writes (it notifies and records handles),
	// in one place, under mu.
	var cs struct {
		mu    sync.Mutex
		notes []string
		v     uint64
	}
	cs.v = v
	ref := refOf(t) // the callbacks hold it, not t: a late one (an abandoned call's) reads no stage's task
	call := tools.Call{
		TaskID: t.ID, TaskType: kind.Name, IdempotencyKey: key, Arguments: json.RawMessage(args),
		Cause: cause, Correlation: a.correlation(t.ID), Handle: started.Handle,
		Notify: func(msg string) { cs.mu.Lock(); cs.notes = append(cs.notes, msg); cs.mu.Unlock() },
		RecordHandle: func(ctx context.Context, handle string) error {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			b := *started
			b.Handle = handle
			res, ok := a.appendRef(ctx, ref, cs.v, a.event(ref.id, cause, &b))
			if !ok {
				return errHandleNotRecorded
			}
			cs.v = res.Version
			return nil
		},
	}
	out, err, dur := a.callHeld(ctx, tool, call)
	if ctx.Err() != nil {
		// Suspended, cancelled or stopping: the outcome is not recorded.
		// After a restart the call runs again with the same key.
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	a.outcomeHeld(ctx, t, nil, cs.v, cause, withNotes(cs.notes, result(out, err, dur))...)
}

// toolAwaiter is a tools.Provider that may not know all its tools yet
// (agent/mcp's Manager while a server starts): AwaitTool returns once the
// tool named name is listed, the provider knows it will not be soon, or
// ctx ends, with why the provider cannot offer it now, if it can say.
type toolAwaiter interface {
	AwaitTool(ctx context.Context, name string) error
}

// awaitTool waits for the providers that may still list the tool named
// name, and returns why one cannot offer it now (nil: none said); the
// caller looks the tool up again.
func (a *Agent) awaitTool(ctx context.Context, name string) error {
	var errs []error
	for _, p := range a.opts.Providers {
		if w, ok := p.(toolAwaiter); ok {
			errs = append(errs, w.AwaitTool(ctx, name))
		}
	}
	return errors.Join(errs...)
}

// errHandleNotRecorded is what Call.RecordHandle returns when the task
// moved (suspended, cancelled) or the agent stops: the handle is not
// recorded and the call's outcome will not be either.
var errHandleNotRecorded = errors.New("agent: the tool call's handle was not recorded: the task moved or the agent is stopping")

// callHeld runs call of tool, for which the caller holds the tool
// semaphore, gives the semaphore back, and says how long the call took.
func (a *Agent) callHeld(ctx context.Context, tool tools.Tool, call tools.Call) (tools.Result, error, time.Duration) {
	begin := a.opts.Now()
	out, err := a.callTool(ctx, tool, call)
	dur := a.opts.Now().Sub(begin)
	a.toolSem.release()
	return out, err, dur
}

// callTool runs one call with the per-call timeout. The tool runs on a
// goroutine of its own so that a tool that ignores its context cannot hold
// the task past the timeout (it is abandoned, and its late result ignored); a
// panic becomes an error so that one bad tool cannot take the daemon down.
func (a *Agent) callTool(ctx context.Context, tool tools.Tool, call tools.Call) (tools.Result, error) {
	cctx, cancel := context.WithTimeout(ctx, a.opts.ToolTimeout)
	defer cancel()
	// The call's goroutine writes its outcome in r, then closes done; r is
	// read only after that.
	r := &toolCallRun{ctx: cctx, tool: tool, call: call, done: make(chan struct{})}
	select {
	case a.toolIdle <- r: // a call goroutine waited for work
	default:
		go a.toolWorker(r)
	}
	select {
	case <-r.done:
		if r.err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			r.err = fmt.Errorf("tool %s timed out after %s", tool.Name(), a.opts.ToolTimeout)
		}
		return r.out, r.err
	case <-cctx.Done():
		if ctx.Err() != nil {
			return tools.Result{}, ctx.Err()
		}
		return tools.Result{}, fmt.Errorf("tool %s timed out after %s", tool.Name(), a.opts.ToolTimeout)
	}
}

// toolWorker is a call goroutine: it runs r, then the calls handed to it
// on toolIdle, until the agent stops. Call goroutines are reused, as stage
// goroutines are (scheduler.idle), so that a call does not start a
// goroutine and grow its stack again (a tool's call, an MCP server's
// answer decoded, needs more than a new goroutine's stack). One whose
// call was abandoned waits for work once that call returns.
func (a *Agent) toolWorker(r *toolCallRun) {
	for {
		r.run()
		select {
		case r = <-a.toolIdle:
		case <-a.runCtx.Done():
			return
		}
	}
}

// toolCallRun is one call of callTool on a call goroutine.
type toolCallRun struct {
	ctx  context.Context
	tool tools.Tool
	call tools.Call
	out  tools.Result
	err  error
	done chan struct{} // closed once out and err are written
}

func (r *toolCallRun) run() {
	defer close(r.done)
	defer func() {
		if p := recover(); p != nil {
			r.out, r.err = tools.Result{}, fmt.Errorf("tool %s panicked: %v", r.tool.Name(), p)
		}
	}()
	if pt, ok := r.tool.(tools.PartsTool); ok {
		r.out, r.err = pt.CallParts(r.ctx, r.call)
		return
	}
	var text string
	text, r.err = r.tool.Call(r.ctx, r.call)
	r.out = tools.Result{Text: text}
}
