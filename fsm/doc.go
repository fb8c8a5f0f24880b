// Package fsm is the task state machine of Pegasus: a pure function from
// (task, event) to task. The event log is the truth; a Task is what folding
// a task stream's events with Apply gives. Recovery, the live agent, replay
// and audit all call the same Apply, like etcd raft's Step.
//
// Two machines live side by side, and a task keeps the one it was created
// with for life (Task.Machine, recorded from its creating event): the
// current pegasus.task version 1, described below, and the legacy
// nine-state pegasus.task version 0 (perceive, think, plan, act, reflect;
// see task_machine_v0.go and docs/fsm.md). Apply and Next pick the task's
// machine.
//
// Beside Apply, every machine says what work is due for a task as data:
// Next returns an Action (start, call the model for a stage, run plan step
// i, compile the result, reflect, wait for input, a child task or a time,
// nothing), and the event types that answer it. The agent dispatches on
// it, never on state names, and verify checks that every event the agent
// appended answered the work that was due.
//
// The current machine (pegasus.task version 1) has six states. A task is created
// from the zero Task (StateNone) by an external input on its own stream,
// which leaves it in idle waiting for admission (the spec's fromEvent), or by
// TASK_CREATED, which creates and starts it at once. Its legal edges:
//
//	none      -(MESSAGE_RECEIVED | WEBHOOK_TRIGGERED | SCHEDULE_FIRED)-> idle (creation)
//	none      -(TASK_CREATED)->        reasoning (creation and start)
//	idle      -(TASK_CREATED)->        reasoning
//	idle      -(TASK_FAILED)->         failed
//	reasoning -(REASON_DONE)->         acting
//	reasoning -(NEED_MORE_INFO)->      suspended
//	suspended -(MESSAGE_RECEIVED)->    reasoning
//	acting    -(TOOL_CALL_COMPLETED)-> acting | reasoning
//	acting    -(TOOL_CALL_FAILED)->    acting | reasoning
//	acting    -(STEP_COMPLETED)->      acting | reasoning | completed
//	suspended -(TASK_RESUMED)->        the state saved at suspension (reasoning | acting)
//	reasoning -(TASK_SUSPENDED)->      suspended
//	acting    -(TASK_SUSPENDED)->      suspended
//	reasoning -(TASK_FAILED)->         failed
//	acting    -(TASK_FAILED)->         failed
//	suspended -(TASK_FAILED)->         failed
//
// A step event (TOOL_CALL_COMPLETED, TOOL_CALL_FAILED for a tool_call step;
// STEP_COMPLETED for a respond or generate step) marks the plan's current
// step done and routes: more steps -> acting; all done and the plan has a
// tool_call step -> reasoning (the model must see the results); all done
// otherwise -> completed.
//
// Context.Iteration counts reason/act iterations: TASK_CREATED sets it to
// 1; MESSAGE_RECEIVED (from suspended) and the acting -> reasoning route add
// one; TASK_RESUMED does not (a resume continues the same iteration). The
// agent fails a task that enters reasoning beyond its maximum.
//
// Fact events record what happened without moving the state or adding to
// History: TOOL_CALL_STARTED and TASK_NOTIFY in acting, MODEL_CALLED and
// TASK_NOTIFY in reasoning, MODEL_CALLED, TASK_COMPLETED (once) and
// REFLECTION_COMPLETE (once) in completed. Nothing is accepted in failed.
//
// Invariants, checked by the tests in this package:
//
//   - Apply returns a *TransitionError (unwrapping to ErrInvalidTransition)
//     exactly when CanTransition(state, type) is false, and an *EventError
//     (unwrapping to ErrInvalidEvent) for every other refusal. On error the
//     task is returned unchanged.
//   - A terminal state (completed, failed) is never left.
//   - History has one entry per state change (self-transitions included),
//     each From equal to the previous To, the last To equal to State.
//   - Every field of a Task follows from event bodies and envelopes: times
//     and ids come from events, never from a clock. Folding the same events
//     twice gives byte-identical EncodeTask output.
//   - Nothing panics, whatever the input (hostile bodies, hostile bytes).
//
// The package is pure: no clock, randomness, I/O, goroutines or logging.
// docs/fsm.md describes the machine for users and docs/events.md catalogues
// the events and their bodies.
package fsm
