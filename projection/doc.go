// Package projection holds Pegasus's read models as pure folds of events:
// the task registry (the TaskRegistry of the task spec, through fsm.Apply),
// per-task progress, stats and long-term memory.
//
// Set is all of them folded together; Set.Apply is the single step of the
// fold and replay.Fold its only loop. Events of a task's stream go to
// fsm.Apply and then to progress and stats; "$memory" events to Memory;
// "$inputs" and "$system" events only to the stats (KindOf). The memory
// event bodies (MEMORY_WRITTEN, MEMORY_PATCHED, MEMORY_APPENDED,
// EPISODE_RECORDED) are defined here, with EncodeMemory and DecodeMemory.
//
// Invariants:
//
//   - Pure: no clock, randomness, I/O, goroutines or logging (a test in
//     internal/lint enforces it). Times and ids come from events, so a fold
//     is a function of the events alone.
//   - Apply never fails and never panics. An event the machine refuses
//     changes nothing but the event counters and is reported in
//     Change.Err; so every fold of the same events, from zero or from a
//     checkpoint, refuses the same ones and ends in the same state.
//   - Every read model has a canonical encoding (msgpack, sorted keys,
//     empty fields omitted; maps persisted as sorted slices), so two folds
//     are compared byte for byte.
//   - Memory is bounded where the input is not: stats keep a window of
//     minutes, a fixed-size histogram and at most MaxKeys names per
//     dimension. The registry holds terminal tasks only until the replay
//     layer has persisted them (Pending, then Flushed evicts them), and
//     Set.Bytes estimates what it holds (TaskBytes), so that the replay
//     layer bounds it by bytes: Cool drops persisted tasks that are not
//     finished, keeping stubs, and RestoreTask brings them back.
//   - Pending shares no mutable memory with the Set and Flushed(seq)
//     forgets only the changes up to seq, so a checkpoint can be written
//     while the fold goes on.
//
// The package knows nothing of storage: the replay layer persists what
// Pending returns, restores with Restore and RestoreTask, and serves
// evicted tasks from the persisted records. It encodes them too
// (EncodeStoredTask): the fold tracks which event holds each task's input
// text (Set.InputSeq), so that a stored task refers to a large input by
// that event's sequence instead of copying it; the replay layer, which has
// the log, reads the event back (InputRef.Resolve). docs/projections.md describes
// the read models and their queries.
package projection
