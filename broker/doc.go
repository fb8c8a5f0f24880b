// Package broker hands dispatch.task tasks to external workers: the
// Dispatch broker of docs/broker.md, built on the log.
//
// It is the only place that does the broker's I/O, in the agent's loop
// shape (etcd raft's Ready): for every live dispatch task it asks the pure
// machine what is due (fsm.Next) and appends the outcome. The machine
// says when (a deadline, run_at, a retry's backoff); the broker's clock
// only wakes the loop then, and at least every Options.CheckInterval. So
// every decision (assigned, timed out, retried, dead-lettered) is an event
// that replays, verifies and explains itself; the broker names no state of
// any machine (a lint test checks it).
//
// Invariants:
//   - A decision is appended at the version of the task it was taken on
//     (eventlog.Exactly): a concurrent report wins, and the loop looks
//     again. The machine refuses a timeout before its deadline and an
//     assignment before run_at, so a wrong clock cannot break a task.
//   - A worker's report is recorded only when the task is assigned to
//     that worker (ErrNotAssigned otherwise, and nothing is written).
//   - Worker registrations and drains are events on projection.WorkersStream,
//     folded in the stream's order (loadWorkers); liveness (the last request
//     carrying X-Agent-ID) is kept in memory: after a restart no worker
//     gets a task before it calls again. In a cluster, only the owner of a
//     task's partition assigns and decides it (Options.Owns), and workers'
//     requests to other daemons reach it (Options.Share, SeenElsewhere).
//   - The broker reads tasks from the daemon's folded view (Tasks); it
//     does not fold events itself. It keeps an index of the live tasks as
//     the view folded them (index.go), so that a step looks only at what
//     changed or fell due and a worker's long poll at its own tasks, and
//     one of parent -> children (children.go), loaded at New and kept as
//     it follows the log. A write through the broker returns once the view
//     and the index hold it.
//
// The built-in agent is a worker too (agentworker.go): "pegasus", which
// runs a broker task assigned to it as a pegasus.task child and reports
// the child's end. It is driven like the broker, by what the machines say
// is due, and resumes what a crash left half done at start, once (the
// child's id is fixed by the attempt; reports are appended at the version
// they were decided on).
package broker
