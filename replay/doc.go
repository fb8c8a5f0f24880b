// Package replay is the one fold loop of Pegasus. Recovery, the live agent,
// the audit (verify) and every pegasus-replay command fold events through
// the same function, Fold, so what the CLI shows is exactly what the daemon
// ran. Replay only folds recorded facts: it never calls a model or a tool.
//
// # The fold
//
//	Source ──events──▶ Fold ──▶ View.step: Decode ─▶ projection.Set.Apply ─▶ fsm.Apply
//	                                                  (tasks, progress, stats, memory)
//
// A Source yields committed events in sequence order: the Pebble log
// (FromLog; also a read-only data directory or a checkpoint copy), a live
// subscription (Live), an in-memory log (MemLog: an NDJSON export loaded
// with ReadExport, events fetched over HTTP, a what-if), or any Iterator
// (Once). Fold reads from the View's position up to a Bound (a sequence,
// an event id or a time; ParseBound reads the CLI's --at) and hands every
// event to the View, which decodes it (Decode: fsm.Decode, or
// projection.DecodeMemory on "$memory") and applies it to the read models
// of package projection, which call fsm.Apply for task streams. A Pebble
// log is read borrowed (eventlog.Log.ScanBorrowed): the fold keeps one
// copy of each body, the decoded strings cut from it (fsm.DecodeShared),
// and interns the stream and type names.
//
// Verify folds a fresh View that persists nothing but lets each finished
// task go once it is checked (a hash of what the persisted projections must
// hold), reading one back by folding its stream again if a late event
// comes: its memory grows with the tasks in flight, not with the log.
//
// Streams starting with "$" are not tasks: "$inputs" (external inputs) and
// "$system" (SYSTEM_STARTED, SYSTEM_STOPPED) feed the stats, "$memory" the
// memory projection. An event the machine refuses (an illegal transition,
// a malformed body, an unknown type on a task stream) never stops a fold
// and never changes state: it is counted, listed by View.Issues and
// reported by verify. So a fold from zero and a fold from a checkpoint
// refuse the same events and agree byte for byte.
//
// # API for the daemon (agent, cmd/pegasusd)
//
//	v, rec, err := replay.Open(ctx, log, opts)   // recovery: persisted projections + the tail
//	rec.InFlight    // reasoning or acting: resume these (priority, then age)
//	rec.Suspended   // wait for a message or resume
//	go v.Follow(ctx, log, hook)                  // live fold; hook(*Change) after each event
//	v.WaitFor(ctx, seq)                          // read-your-writes after an append
//	v.Task(id), v.Progress(id), v.Tasks(ctx, q), v.Stats(), v.InState(...), v.ActiveCount()
//	v.Fact(path), v.Facts(prefix), v.Episodes()  // long-term memory
//	v.Checkpoint(ctx)                            // at stop, within its deadline (folds also checkpoint in the background)
//	v.MemoryUse()                                // bytes held, bounded by Options.MemoryBudget
//
// The hook receives a *Change: Raw (the stored event), Event (decoded),
// Kind (task, inputs, memory, system), Before and After (the task around
// the event), Err (set if the fold refused the event). It runs on the
// follower goroutine after the View applied the event and without the
// View's lock, so it may query the View; it should dispatch work and
// return (an error stops Follow; the event stays folded). The agent's
// view of a task changes only through this fold. Tasks handed out share
// memory with the View: read them, Clone them to change them.
//
// Long-term memory is written by appending projection.MemoryWrittenBody,
// MemoryPatchedBody (build it with projection.NewMemoryPatch),
// MemoryAppendedBody or EpisodeRecordedBody, encoded with
// projection.EncodeMemory, to projection.MemoryStream with Schema
// projection.MemorySchemaVersion; it is read back with View.Fact, Facts
// and Episodes once folded (WaitFor).
//
// # API for the CLI (cmd/pegasus-replay)
//
//	l, _ := eventlog.Open(dir, &eventlog.Options{ReadOnly: true})
//	v, _, _ := replay.Open(ctx, l, &replay.Options{ReadOnly: true})   // tasks, stats
//	r := replay.FromLog(l)                 // or: m, hdr, _ := replay.ReadExport(file)
//	replay.StateAt(ctx, r, id, bound)      // state TASK --at
//	replay.Timeline(ctx, r, id, bound)     // show TASK
//	replay.Explain(ctx, r, id, 0)          // why TASK
//	replay.Ancestors / replay.Descendants  // trace EVENT_ID
//	replay.Verify(ctx, l, nil)             // verify: Report.OK, Report.FirstProblem
//	replay.Export / replay.Import          // NDJSON (docs/export.md)
//	replay.MarshalEvent / replay.ParseEvent / replay.ParseDraft
//	                                       // the one JSON form of an event (docs/events.md):
//	                                       // the API, the event stream, export, --json, --inject
//	fork: m := MemLog of the prefix; m.Append(injected...); Fold into NewView
//
// # Persistence
//
// A View made by Open persists its read models in the log's aux key space
// under "proj/" (see store.go for the key layout): every changed task, its
// summary and progress, the stats, the changed memory facts and new
// episodes, per-task snapshots every Options.SnapshotEvery stream
// versions, and the sequence they reflect, all written atomically per
// checkpoint: one synced batch, or for a large checkpoint one sstable
// ingested beside the write-ahead log, so that appends do not wait behind
// it. A task's input of 1 KiB or more is not written again: its record
// refers to the event that created the task, which reading the task back
// reads (projection.EncodeStoredTask). A checkpoint evicts terminal
// tasks from memory; they are served from the persisted records (and read
// back if a late fact arrives).
//
// Folds start checkpoints in the background, every Options.CheckpointEvery
// events and whenever the changes not yet persisted reach a sixteenth of
// Options.MemoryBudget. A checkpoint holds the View's lock only to copy
// what changed as of one sequence (Set.Pending: task values that Apply
// never changes in place) and, once the write is durable, to forget the
// changes up to that sequence and evict (Set.Flushed); changes folded
// meanwhile stay pending. Encoding and the durable write run without the
// lock, so no append, WaitFor or query waits for a checkpoint. The fold
// itself waits only while the View holds more than its whole budget and a
// checkpoint is running (back-pressure). A View still over its budget also
// drops persisted tasks that are not finished (Set.Cool), keeping stubs;
// they are restored before their next event and read from the store by
// queries. At start, Open loads the checkpoint and
// folds only the tail. A checkpoint written by another projection code
// version, fsm machine version, persisted type shape, layout or stats
// options (projection.Identity) is discarded and everything is folded from
// zero. docs/projections.md and docs/replay-internals.md say more.
//
// # Invariants (tested)
//
//   - Folding a history from zero, from any checkpoint, from a per-task
//     snapshot, in any batch size, and live from a subscription gives
//     byte-identical state (View.Dump).
//   - A crash while a checkpoint is written leaves the previous checkpoint
//     or the new one; a restart folds the rest and equals a fresh fold.
//   - Power loss at any write of the log, the fold, a background
//     checkpoint or a recovery loses no acknowledged event, and the
//     recovered View equals a fold from zero (TestPowerLoss).
//   - A persisting View holds at most Options.MemoryBudget bytes (by its
//     estimate) whatever the input sizes, finished or not, once its
//     changes are written; long-term memory aside
//     (TestMemoryBoundedByBudget, TestMemoryBudgetUnfinishedTasks).
//   - Verify catches a flipped byte in a record, a missing index entry, an
//     illegal transition appended around the agent, and persisted
//     projections that disagree with the log, and names the first bad
//     position.
package replay
