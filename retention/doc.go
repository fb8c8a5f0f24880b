// Package retention removes finished tasks from the live log once they are
// older than a window, after archiving them, so that a log that runs for
// months stays bounded on disk while its audit stays honest.
//
// One run (Run) does, in this order:
//
//  1. deletes archive files no manifest names (left by a run that crashed
//     before its removal committed);
//  2. picks the tasks to remove: finished (fsm.Task.IsTerminal: completed,
//     failed, or a dead-lettered dispatch task), last event older than
//     the window, already in the persisted projections; minus any task
//     whose events a task still in the log points at through its
//     causation (transitively). Events on reserved streams ("$system",
//     "$inputs", "$memory", "$workers", ...) are never removed:
//     long-term memory is the agent's knowledge;
//  3. writes them to one archive file (replay's export format, gzip, the
//     run's manifest in its header), synced and renamed into place;
//  4. eventlog.Log.Retire: ONE synced batch appends the manifest to
//     "$system" as EVENTS_ARCHIVED, deletes the tasks' records and index
//     entries (range deletions over runs of sequences), records the holes
//     and deletes the tasks' persisted read models (replay.ForgetTasks);
//  5. compacts the deleted key ranges, so the disk space comes back now.
//
// Invariants. A crash anywhere leaves the log either before step 4 (every
// event there; at most an orphan archive, deleted by the next run) or
// after it (the manifest, the holes and the archive, which was synced
// before): Verify is clean in both. Sequences are never reused (the head
// is the manifest, after every hole). Nothing a live task can still need
// is removed. Runs are serialised by the caller (the daemon runs one at a
// time).
package retention
