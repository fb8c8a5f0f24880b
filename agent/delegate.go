package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/fsm"
)

// Delegation is the broker task a worker tool's call runs as, as the
// agent asks Options.Delegate to create it.
type Delegation = tools.WorkerCall

// A worker tool's call (a *tools.WorkerTool) runs as a broker task:
//
//  1. the stage draws the broker task's id and records it, with the call,
//     in TOOL_CALL_STARTED.Task (Source "worker:CAPABILITY");
//  2. it asks Options.Delegate to create the task (parent: the agent task,
//     cause: that TOOL_CALL_STARTED, keyed by the call's idempotency key,
//     the arguments as its body) and returns: the machine now says the
//     step waits for that task (fsm.ActWaitTask), which holds no admission
//     slot, no tool semaphore and no goroutine;
//  3. when the broker task ends (completed, or dead-lettered), the hook
//     wakes the agent task (wakeParent), whose stage records the outcome
//     as TOOL_CALL_COMPLETED with the worker's result or TOOL_CALL_FAILED
//     with the broker's reason.
//
// After a crash between 1 and 2 the waiting stage finds no such task and
// asks Delegate again, with the same id and key: one broker task, never
// two.

// delegateTool runs step 1 and 2 for tool w; started is the call's
// TOOL_CALL_STARTED without its Task, result builds its outcome.
func (a *Agent) delegateTool(ctx context.Context, t *fsm.Task, h *held, w *tools.WorkerTool, started *fsm.ToolCallStartedBody,
	result func(tools.Result, error, time.Duration) *fsm.ToolCallResultBody) {
	if a.opts.Delegate == nil {
		a.appendHeld(ctx, t, h, t.Version, a.event(t.ID, t.LastEvent, result(tools.Result{}, noBroker(w), 0)))
		return
	}
	started.Task = a.log.NewID().String()
	res, ok := a.appendHeld(ctx, t, h, t.Version, a.event(t.ID, t.LastEvent, started))
	if !ok {
		return
	}
	a.delegate(ctx, t.ID, started, lastID(res))
}

// noBroker is the error of a call of worker tool w when the agent has no
// Options.Delegate.
func noBroker(w *tools.WorkerTool) error {
	return fmt.Errorf("tool %s runs on a broker worker (capability %s), and this agent has no broker to hand it to", w.Name(), w.Capability)
}

// delegate asks Options.Delegate for the broker task of pending call pc
// of task id, caused by cause. When that fails and no such task exists,
// the call fails (TOOL_CALL_FAILED with the error), so that the task does
// not wait for a task that is not there.
func (a *Agent) delegate(ctx context.Context, id string, pc *fsm.ToolCallStartedBody, cause ulid.ULID) {
	all, _ := a.catalog.current(&a.opts)
	var err error
	tool, _ := all.Lookup(pc.Tool)
	w, ok := tool.(*tools.WorkerTool)
	switch {
	case !ok:
		err = fmt.Errorf("tool %s is no longer a worker tool of this agent", pc.Tool)
	case a.opts.Delegate == nil:
		err = noBroker(w)
	default:
		args := json.RawMessage(pc.Arguments)
		if len(strings.TrimSpace(pc.Arguments)) == 0 {
			args = json.RawMessage("{}")
		}
		err = a.opts.Delegate(ctx, Delegation{Parent: id, Child: pc.Task, Cause: cause, Correlation: a.correlation(id),
			Key: pc.IdempotencyKey, Tool: w, Arguments: args})
	}
	if err == nil || ctx.Err() != nil {
		return
	}
	if _, terr := a.view.Task(pc.Task); terr == nil {
		return // created after all (an answer lost on the way): wait for it
	}
	a.opts.Logger.Warn("a worker tool's broker task could not be created: the call fails", taskIDAttr(id), "tool", pc.Tool, "child", pc.Task, "err", err)
	t, terr := a.view.Task(id)
	if terr != nil {
		return
	}
	if act := fsm.Next(&t); act.Kind != fsm.ActWaitTask || act.Task != pc.Task {
		return // the task moved on
	}
	a.appendTask(ctx, &t, t.Version, a.event(id, t.LastEvent, toolTaskResult(&t, pc, "", fmt.Errorf("tool %s failed: creating its broker task: %w", pc.Tool, err), 0)))
}

// awaitToolTask runs for a task whose tool call waits for its broker task
// (act.Task): if that task ended, it records the call's outcome; if it
// does not exist (a crash between TOOL_CALL_STARTED and its creation), it
// creates it; otherwise it gives the slot back until the broker task's
// end wakes it.
func (a *Agent) awaitToolTask(ctx context.Context, t *fsm.Task, act fsm.Action) {
	pc := t.Context.PendingCall
	child, err := a.view.Task(act.Task)
	switch {
	case errors.Is(err, ErrTaskNotFound):
		a.delegate(ctx, t.ID, pc, t.LastEvent) // TOOL_CALL_STARTED: nothing else is recorded while the call waits
		a.releaseWaiting(t, act.Task)
	case err != nil || !Done(&child):
		a.releaseWaiting(t, act.Task)
	default:
		var (
			out  string
			ferr error
		)
		if child.Dispatch != nil && !child.IsDeadLetter() { // Done: completed, or dead-lettered
			out = child.Dispatch.Result
		} else {
			ferr = fmt.Errorf("tool %s failed: %s", pc.Tool, fsm.DispatchFailure(&child))
		}
		dur := child.UpdatedAt.Sub(child.CreatedAt)
		a.outcome(ctx, t, t.Version, t.LastEvent, toolTaskResult(t, pc, out, ferr, dur))
	}
}

// toolTaskResult is the outcome of the worker tool call pc of t.
func toolTaskResult(t *fsm.Task, pc *fsm.ToolCallStartedBody, out string, err error, dur time.Duration) *fsm.ToolCallResultBody {
	b := &fsm.ToolCallResultBody{StepIndex: pc.StepIndex, Tool: pc.Tool, ToolCallID: pc.ToolCallID, IdempotencyKey: pc.IdempotencyKey,
		Result: out, Source: pc.Source, Task: pc.Task, DurationMS: max(dur.Milliseconds(), 0),
		NewMessages: []fsm.Message{toolMessage(pc.ToolCallID, out, err)}}
	if err != nil {
		b.Result, b.Error = "", err.Error()
	}
	return b
}
