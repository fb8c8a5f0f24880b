package agent

import (
	"context"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// Chaining stages. A stage's outcome is appended together with the first
// event of the task's next stage when the machine says that stage is due
// once the outcome is folded (Apply, then Next on a copy) and it is one
// the agent can start at once:
//
//   - a tool call: its TOOL_CALL_STARTED is appended with the outcome
//     before the tool runs, so the start is as durable before the call as
//     it is on its own, and nothing is held back that was durable before;
//   - a model call, after an outcome that holds no model call (a tool
//     call's outcome): the model call runs first, and its outcome is
//     appended with the held events. A crash meanwhile loses the held
//     events: the tool call whose TOOL_CALL_STARTED is in the log runs
//     again with the same idempotency key, which the at-least-once rule
//     allows. A model's answer is never held across another model call
//     (but one, when side-effect-free tools' calls follow it: readers.go),
//     and the admission (TASK_CREATED) is never held: the task is
//     reasoning, for every reader, while its model works.
//
// The held events carry their ids (a later event's cause) and the chained
// stage runs on the copy, expecting the stream at the version before the
// held events: if the task moved meanwhile (a suspend, a cancel, a
// message), the append is refused as a conflict and everything held is
// dropped with it, as a stale outcome is. Nothing chains once the agent
// stops or gives the task's slot up (Stop, Disown, a cancel): a stage then
// ends with its current step, as before.

// held is what a chained stage must append first: the previous stages'
// events, expecting the stream at base.
type held struct {
	base uint64
	evs  []eventlog.Event
	res  eventlog.AppendResult // the append that carried evs, once done
	ok   bool
	// readers: evs end with the start of a side-effect-free tool's call
	// (readers.go), after which the next model call may chain with one
	// model's answer held.
	readers bool
	// own: the array of evs is the held's alone, room to spare included,
	// so the events appended after them may be written into it (take,
	// room) instead of into a new array.
	own bool
}

// take returns the version to expect and the events to append for evs
// appended at v after what h holds, and whether h's events are among
// them (h is then empty).
func (h *held) take(v uint64, evs []eventlog.Event) (uint64, []eventlog.Event, bool) {
	if h == nil || len(h.evs) == 0 {
		return v, evs, false
	}
	held := h.evs
	if !h.own {
		held = held[:len(held):len(held)]
	}
	// (When evs are the room after h.evs, this copies nothing.)
	all := append(held, evs...)
	v, h.evs = h.base, nil
	return v, all, true
}

// room returns an empty slice with room for n events that take will
// append after h's events without a new array: the room after them in
// h's array, made large enough. Without events held, or an array of its
// own, it is a new slice with room for n events.
func (h *held) room(n int) []eventlog.Event {
	if h == nil || len(h.evs) == 0 || !h.own {
		return make([]eventlog.Event, 0, n)
	}
	h.evs = slices.Grow(h.evs, n)
	return h.evs[len(h.evs):len(h.evs)]
}

// chainRoom is the room an outcome's array of events leaves for the
// stage due after it, act, which may run with them held (chain): a tool
// call's start; a model call's outcome (MODEL_CALLED and the decision)
// and the stages chained after it that need no I/O (a step's completion,
// the task's); none for anything else. The events of a stage that needs
// more (a turn of several tool calls) go to a larger array, made then.
func chainRoom(act fsm.Action) int {
	switch {
	case act.Kind == fsm.ActRunStep && act.StepType == fsm.ActionToolCall:
		return 1
	case act.Kind == fsm.ActCallModel:
		return 2 + modelChainRoom
	}
	return 0
}

// modelChainRoom is the room chainRoom leaves for the stages chained
// after a model call's outcome.
const modelChainRoom = 3

// carry appends evs at version v after what h holds (h may be nil) with
// appendFn, and records the result in h when it carried h's events.
func (h *held) carry(v uint64, evs []eventlog.Event,
	appendFn func(uint64, []eventlog.Event) (eventlog.AppendResult, bool)) (eventlog.AppendResult, bool) {
	v, evs, took := h.take(v, evs)
	res, ok := appendFn(v, evs)
	if took {
		h.res, h.ok = res, ok
	}
	return res, ok
}

// appendHeld appends evs to t's stream at version v, after what h holds
// (h may be nil), and records the result in h when it carried h's events.
func (a *Agent) appendHeld(ctx context.Context, t *fsm.Task, h *held, v uint64, evs ...eventlog.Event) (eventlog.AppendResult, bool) {
	return a.appendHeldRef(ctx, refOf(t), h, v, evs...)
}

// appendHeldRef is appendHeld for the task t refers to.
func (a *Agent) appendHeldRef(ctx context.Context, t taskRef, h *held, v uint64, evs ...eventlog.Event) (eventlog.AppendResult, bool) {
	return h.carry(v, evs, func(v uint64, evs []eventlog.Event) (eventlog.AppendResult, bool) {
		return a.appendRef(ctx, t, v, evs...)
	})
}

// predict applies ev, of body b, to pred (a copy of the task), with its id
// and a time of now, and reports whether the machine took it.
func predict(pred *fsm.Task, ev *eventlog.Event, b fsm.Body, now time.Time) bool {
	n, err := fsm.Apply(*pred, fsm.Event{ID: ev.ID, Type: b.EventType(), Stream: pred.ID, Version: pred.Version + 1, Time: now, Body: b})
	if err != nil {
		return false
	}
	*pred = n
	return true
}

// chain runs the stage act of pred (t once evs, appended at v after what
// h holds, are folded) with those events held, if it can start at once
// (see above), and reports whether it did; the result is that of the
// append that carried the events, if one did.
//
// pred is taken by value so that the caller's copy stays on its stack; the
// chained stage's copy and what it holds (chained) stay on this one: the
// stages keep no pointer to them once they return (their callbacks hold a
// taskRef and copies), which go build -gcflags=-m confirms.
func (a *Agent) chain(ctx context.Context, pred fsm.Task, act fsm.Action, h *held, v uint64, evs []eventlog.Event) (eventlog.AppendResult, bool, bool) {
	if ctx.Err() != nil || !a.owns(pred.ID) || !a.sched.holds(pred.ID) {
		return eventlog.AppendResult{}, false, false
	}
	step := pred.Context.Plan.CurrentStep()
	switch {
	case act.Kind == fsm.ActRunStep && act.StepType == fsm.ActionToolCall && step != nil && step.Index == act.Step:
	case act.Kind == fsm.ActCallModel && !holdsModelCall(h, evs):
	case act.Kind == fsm.ActCallModel && h != nil && h.readers && modelCalls(h, evs) <= 1:
	default:
		return eventlog.AppendResult{}, false, false
	}
	base, all, _ := h.take(v, evs)
	c := &chained{task: pred, held: held{base: base, evs: all, own: true}} // take's array, or outcome's
	next := &c.held
	if act.Kind == fsm.ActCallModel {
		a.callModel(ctx, &c.task, act, next)
	} else {
		a.runTool(ctx, &c.task, step, next)
	}
	if h != nil {
		h.res, h.ok = next.res, next.ok
	}
	return next.res, next.ok, true
}

// chained is a stage chain runs: the task as its prediction has it, and
// the events held for its first append.
type chained struct {
	task fsm.Task
	held held
}

// holdsModelCall reports whether h or evs record a model call.
func holdsModelCall(h *held, evs []eventlog.Event) bool {
	modelCall := func(ev eventlog.Event) bool { return ev.Type == string(fsm.ModelCalled) }
	return (h != nil && slices.ContainsFunc(h.evs, modelCall)) || slices.ContainsFunc(evs, modelCall)
}

// lastID is the id of the last event of res.
func lastID(res eventlog.AppendResult) ulid.ULID { return res.Events[len(res.Events)-1].ID }
