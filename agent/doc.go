// Package agent is the orchestrator of Pegasus: the only place that does
// task I/O (model calls, tool calls).
//
// It is a thin orchestrator in the shape of etcd raft's loop. For every
// task it asks what is due from the task's folded state, does the I/O, and
// appends the event that records the outcome, expecting the task's stream
// at the version it decided on:
//
//	reasoning: call the model  -> [MODEL_CALLED, REASON_DONE | NEED_MORE_INFO | TASK_FAILED]
//	acting:    run one step    -> TOOL_CALL_STARTED, then [TASK_NOTIFY..., TOOL_CALL_COMPLETED | TOOL_CALL_FAILED]
//	                              or [STEP_COMPLETED (, TASK_COMPLETED when it completes the task)]
//	completed: (TASK_COMPLETED folded) notify, maybe reflect -> [MODEL_CALLED..., REFLECTION_COMPLETE]
//
// The replay follower folds each committed event into the View (the one
// fold of package replay, the same that recovery and the CLI run) and calls
// the agent's hook with the task before and after it; the hook dispatches
// the next stage on its own goroutine and returns. The agent holds no task
// state of its own: the only per-task data it keeps is scheduling (does a
// stage goroutine run, does the task hold an admission slot).
//
// A stale outcome never applies: if a user suspended, cancelled or
// messaged the task while its stage worked, the stage's append fails with
// eventlog.ErrConflict and is dropped.
//
// # Invariants
//
//   - Every event records its causation (the event that led to it) and its
//     correlation (the task's root input).
//   - An input and its TASK_CREATED are committed together (AppendMulti).
//   - A respond step that completes a task is committed together with
//     TASK_COMPLETED, so a completed task always has its result.
//   - At most MaxActiveTasks tasks hold an admission slot (reasoning or
//     acting with a stage to run); the others wait, by priority then age.
//   - At most MaxConcurrentLLM model calls and MaxConcurrentTools tool
//     calls run at once.
//
// # At least once
//
// A tool call is recorded as TOOL_CALL_STARTED before it runs. If the
// daemon dies before its TOOL_CALL_COMPLETED or TOOL_CALL_FAILED is
// committed, recovery finds the task acting on the same step and runs the
// call again, with the same idempotency key (IdempotencyKey: task id,
// iteration, step index). Tools with outside effects must use the key to
// make the second run harmless. Model calls are at least once too (a
// reasoning stage interrupted by a crash calls the model again), but each
// completed call is recorded, so replay never calls the model.
package agent
