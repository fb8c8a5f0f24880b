// Package agent is the orchestrator of Pegasus: the only place that does
// task I/O (model calls, tool calls).
//
// It is a thin orchestrator in the shape of etcd raft's loop. For every
// task it asks the pure core what is due (fsm.Next: the work as data), does
// the I/O, and appends the event that records the outcome, expecting the
// task's stream at the version it decided on. It dispatches on the action
// and never names a machine's state (a lint test in internal/lint keeps it
// so), so both task machines (pegasus.task version 0 and 1) run through the
// same loop:
//
//	start       (TASK_CREATED)
//	call_model  one model call for the stage   -> [MODEL_CALLED, the stage's event | TASK_FAILED]
//	            reason: REASON_DONE | NEED_MORE_INFO; perceive: PERCEIVE_DONE; think: THINK_DONE |
//	            NEED_MORE_INFO; plan: PLAN_DONE; reflect: REFLECT_DONE (with a verdict)
//	run_step    a tool_call step               -> TOOL_CALL_STARTED, then [TASK_NOTIFY..., TOOL_CALL_COMPLETED | TOOL_CALL_FAILED]
//	            a built-in tool that only reads -> [TOOL_CALL_STARTED, TASK_NOTIFY..., TOOL_CALL_COMPLETED | TOOL_CALL_FAILED]
//	                                           with the model's answer that asked for it (readers.go)
//	            a respond or generate step     -> [STEP_COMPLETED | ACT_DONE]
//	            a sub_task step                -> SUB_TASK_CREATED, then the child's input on its own stream
//	wait_task   the child ended                -> ACT_DONE with its outcome
//	compile     (TASK_COMPLETED)
//	reflect     post-task reflection           -> [MODEL_CALLED..., REFLECTION_COMPLETE]
//	wait_input, wait_until, none: give the admission slot back (wait_until arms a timer)
//
// When the events of an outcome make the result due (the machine, asked
// through Apply and Next on a copy of the task, says compile), TASK_COMPLETED
// with the compiled result goes in the same append.
//
// The replay follower folds each committed event into the View (the one
// fold of package replay, the same that recovery and the CLI run) and calls
// the agent's hook with the task before and after it; when the work due
// changed, the hook dispatches it on the task's own goroutine and returns.
// The agent holds no task state of its own: the only per-task data it keeps
// is scheduling (does a stage goroutine run, does the task hold an
// admission slot, does a timer wait), in the scheduler (scheduler.go, its
// own lock). The watchers (watch.go, their own lock) wake WaitUntil,
// OnNotify listeners and the intake waiting for the hook; the Agent itself
// keeps the lifecycle, intake and the stages.
//
// A stale outcome never applies: if a user suspended, cancelled or
// messaged the task while its stage worked, the stage's append fails with
// eventlog.ErrConflict and is dropped.
//
// # Invariants
//
//   - Every event records its causation (the event that led to it) and its
//     correlation (the task's root input).
//   - An input is committed alone, as the first event of the task's stream:
//     the task exists from then on, in idle. Admission appends its
//     TASK_CREATED, caused by the input, when a slot is free.
//   - An outcome that completes a task is committed together with
//     TASK_COMPLETED, so a completed task always has its result.
//   - At most MaxActiveTasks tasks hold an admission slot (a stage to run:
//     start, a model call, a step, compile); the others wait, by priority
//     then age. A task waiting for input, a child task or a time holds none.
//   - At most MaxConcurrentLLM model calls and MaxConcurrentTools tool
//     calls run at once.
//
// # At least once
//
// A tool call is recorded as TOOL_CALL_STARTED before it runs, except a
// side-effect-free built-in tool's (tools.SideEffectFree: the clock,
// memory reads), whose start and result go in one append with the model's
// answer that asked for it, after it ran (readers.go): a crash before that
// append calls the model and runs the tool again, which changes nothing.
// If the
// daemon dies before its TOOL_CALL_COMPLETED or TOOL_CALL_FAILED is
// committed, recovery finds the task acting on the same step and runs the
// call again, with the same idempotency key (IdempotencyKey: task id,
// iteration, step index). Tools with outside effects must use the key to
// make the second run harmless. Model calls are at least once too (a
// reasoning stage interrupted by a crash calls the model again), but each
// completed call is recorded, so replay never calls the model.
package agent
