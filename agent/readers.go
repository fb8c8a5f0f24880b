package agent

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// Side-effect-free tools. A built-in tool that only reads
// (tools.SideEffectFree: current_time, memory_list, memory_read) changes
// nothing when it runs, so running it again after a crash is harmless
// whatever its key. Its call is not recorded before it runs:
//
//   - its TOOL_CALL_STARTED gets its id (log.NewID) when the call starts,
//     so the id's time is the call's start, and is held with the events the
//     stage holds (the model's answer that asked for the call, chain.go);
//   - the call runs under the tool semaphore and the per-call timeout;
//   - its result (after any TASK_NOTIFY) goes through outcome with the
//     start held (its id, drawn there, tells the call's end), so the start, the
//     result and whatever the machine says follows (a respond step,
//     TASK_COMPLETED, the next model call's outcome) share one append with
//     the model's answer.
//
// The next model call may chain with a model's answer held (which chain.go
// otherwise refuses) when the events held end with such calls: a task that
// asks the clock and answers is then two synced appends, its input and
// everything else. At most one model answer is held across a model call: a
// daemon that dies during the second call loses the first call's answer
// and the reader's result, and after the restart the task calls the model
// again and runs the reader again (at least once). A suspend, a cancel or a
// message meanwhile makes the append a conflict: everything held is dropped,
// as a stale outcome is.

// runReader runs step's call of tool, a side-effect-free tool, whose
// start is started, after the events h holds (nil: none).
func (a *Agent) runReader(ctx context.Context, t *fsm.Task, kind *taskKind, tool tools.Tool, started *fsm.ToolCallStartedBody, h *held) {
	if a.testToolWait != nil {
		a.testToolWait()
	}
	if err := a.toolSem.acquire(ctx); err != nil {
		return
	}
	begin := a.opts.Now()
	start := a.event(t.ID, t.LastEvent, started)
	start.ID = a.log.NewID() // drawn now: its time is the call's start
	pred := t.Fork()         // a prediction: Apply writes none of the memory it shares with t
	if !predict(&pred, &start, started, begin) {
		// The machine refuses the start: record it on its own, so that the
		// fold says why (it never does for a step that is due).
		a.toolSem.release()
		a.appendHeld(ctx, t, h, t.Version, start)
		return
	}
	base, evs, _ := h.take(t.Version, nil)
	next := &held{base: base, evs: append(evs, start), readers: true}

	var (
		mu    sync.Mutex // guards notes: the tool's goroutine notifies
		notes []string
	)
	call := tools.Call{
		TaskID: t.ID, TaskType: kind.Name, IdempotencyKey: started.IdempotencyKey, Arguments: json.RawMessage(started.Arguments),
		Cause: start.ID, Correlation: start.Correlation,
		Notify:       func(msg string) { mu.Lock(); notes = append(notes, msg); mu.Unlock() },
		RecordHandle: func(context.Context, string) error { return errHandleNotRecorded },
	}
	out, err, dur := a.callHeld(ctx, tool, call)
	if ctx.Err() != nil {
		// Suspended, cancelled or stopping: nothing is recorded; the task
		// runs the stage again when it next runs.
		return
	}
	mu.Lock()
	bodies := withNotes(notes, toolResult(started, out, err, dur))
	mu.Unlock()
	res, ok := a.outcomeHeld(ctx, &pred, next, pred.Version, start.ID, bodies...)
	if h != nil {
		h.res, h.ok = res, ok
	}
}

// modelCalls counts the model calls that h and evs record.
func modelCalls(h *held, evs []eventlog.Event) int {
	n := 0
	count := func(evs []eventlog.Event) {
		for _, ev := range evs {
			if ev.Type == string(fsm.ModelCalled) {
				n++
			}
		}
	}
	if h != nil {
		count(h.evs)
	}
	count(evs)
	return n
}
