package projection

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Version is the code version of the projections in this package. Bump it
// whenever a fold here changes what it produces for the same events (a new
// field in Progress, a different stats bucket, ...): persisted projections
// written under another version are rebuilt from zero at start.
//
// Persisted: compared with the version stored beside the projections.
const Version = 1

// InputsStream holds external inputs that create tasks. It is one of the
// streams that are not tasks (with MemoryStream and SystemStream): every
// stream whose name starts with "$" is reserved; a task's stream is named
// by its id.
const InputsStream = "$inputs"

// StreamKind says which read models an event feeds.
type StreamKind uint8

const (
	KindTask   StreamKind = iota // a task's own stream: fsm, tasks, progress, stats
	KindInputs                   // InputsStream: stats
	KindMemory                   // MemoryStream: memory, stats
	KindSystem                   // SystemStream: stats
	KindOther                    // another reserved "$" stream: counted, otherwise ignored
)

func (k StreamKind) String() string {
	switch k {
	case KindTask:
		return "task"
	case KindInputs:
		return "inputs"
	case KindMemory:
		return "memory"
	case KindSystem:
		return "system"
	}
	return "other"
}

// KindOf classifies a stream name.
func KindOf(stream string) StreamKind {
	if !strings.HasPrefix(stream, "$") {
		return KindTask
	}
	switch stream {
	case InputsStream:
		return KindInputs
	case MemoryStream:
		return KindMemory
	case SystemStream:
		return KindSystem
	}
	return KindOther
}

// Options configures a Set.
type Options struct {
	// SnapshotEvery makes Apply queue a snapshot of a task each time its
	// stream version reaches a multiple of it; 0 queues none (folds that
	// persist nothing). The replay layer writes the queue with each
	// checkpoint.
	SnapshotEvery uint64
	// Stats bounds the stats projection.
	Stats StatsOptions
	// Unbounded skips the memory estimate (Bytes stays zero): for a fold
	// that persists nothing and so has no budget to keep (verify, the CLI
	// on a log without usable checkpoints), where walking every changed
	// task after each event to size it cost about a tenth of the fold. It
	// is not part of Identity: it changes no read model.
	Unbounded bool
}

// Change is what folding one event did. Before and After are the task
// around a task event (Before is the zero Task for TASK_CREATED); they
// share memory with the registry's copy, so treat them as read-only.
type Change struct {
	Event  fsm.Event
	Kind   StreamKind
	Before fsm.Task
	After  fsm.Task
	// Err is set when the fold refused the event: the fsm said the
	// transition is illegal or the event malformed, or the body could not
	// be decoded. Nothing but the event counters changed.
	Err error
	// Warn is set when the event was applied but is suspect (a memory patch
	// whose recorded result disagrees with its own old and new text).
	Warn error
}

// Refused reports whether the fold refused the event.
func (c *Change) Refused() bool { return c.Err != nil }

// Moved reports whether the event changed a task's state.
func (c *Change) Moved() bool {
	return c.Kind == KindTask && c.Err == nil && c.Before.State != c.After.State
}

// Set is every read model, folded together one event at a time: the task
// registry (through fsm.Apply), progress, stats and memory. Apply is the
// single step of the fold; replay.Fold is its only loop. Set also tracks
// what changed since the last checkpoint, so that the replay layer can
// persist exactly that (Pending, Flushed). It is pure and not safe for
// concurrent use.
type Set struct {
	opts   Options
	tasks  *Registry // with each task's progress and changed flag
	stats  *Stats
	memory *Memory
	seq    uint64

	dirty     []*slot // changed since the last Flushed, once each
	snapshots []Snapshot
	// restored are the ids of finished tasks put back by RestoreTask since
	// the last Flushed: with the dirty slots Flushed cleans, the only
	// tasks it may evict (it evicted every other finished one before).
	restored []string

	// Estimated bytes held (see Bytes): every task in memory, the dirty
	// ones among them, and the queued snapshots.
	taskBytes, dirtyBytes, snapBytes int64
}

// NewSet returns an empty Set: the state before the first event.
func NewSet(o Options) *Set {
	o.Stats = o.Stats.EnsureDefaults()
	return &Set{opts: o, tasks: NewRegistry(), stats: NewStats(o.Stats), memory: NewMemory()}
}

// Restore builds a Set from persisted state: the sequence it reflects, the
// stats and the memory. Tasks are put back with RestoreTask.
func Restore(o Options, seq uint64, stats *Stats, memory *Memory) *Set {
	s := NewSet(o)
	s.seq = seq
	if stats != nil {
		s.stats = stats
	}
	if memory != nil {
		s.memory = memory
	}
	return s
}

// RestoreTask puts back a task (and its progress, nil if none) loaded from
// the persisted read model: an active task at start, or a terminal task
// that receives a late fact. inputSeq is what InputSeq said of it when it
// was persisted (the sequence of its input reference, InputRef.Seq), 0 if
// unknown. It is not marked changed.
func (s *Set) RestoreTask(t fsm.Task, p *Progress, inputSeq uint64) {
	sl := s.tasks.put(t)
	sl.inputSeq = inputSeq
	if p != nil {
		sl.progress, sl.hasProg = *p, true
	}
	s.account(sl)
	if t.State.IsTerminal() {
		s.restored = append(s.restored, t.ID)
	}
}

// account brings the byte counters up to date with a slot that changed.
func (s *Set) account(sl *slot) {
	if s.opts.Unbounded {
		return
	}
	n := slotBytes(sl)
	s.taskBytes += n - sl.bytes
	if sl.dirty {
		s.dirtyBytes += n - sl.bytes
	}
	sl.bytes = n
}

// MemoryUse is the estimated memory a Set holds, by part, in bytes.
type MemoryUse struct {
	Tasks     int64 `json:"tasks_bytes"`     // every task in memory, with its progress
	Dirty     int64 `json:"dirty_bytes"`     // of Tasks, those changed since the last checkpoint
	Snapshots int64 `json:"snapshots_bytes"` // queued per-task snapshots
	Memory    int64 `json:"memory_bytes"`    // long-term memory (facts and episodes)
}

// Total is everything the Set holds.
func (m MemoryUse) Total() int64 { return m.Tasks + m.Snapshots + m.Memory }

// Pending is what the next checkpoint would write and evict: the changed
// tasks and the queued snapshots.
func (m MemoryUse) Pending() int64 { return m.Dirty + m.Snapshots }

// Bytes returns the estimated memory held, kept up to date as events are
// folded (O(1)). The replay layer checkpoints and evicts by it. With
// Options.Unbounded only Memory is counted.
func (s *Set) Bytes() MemoryUse {
	return MemoryUse{Tasks: s.taskBytes, Dirty: s.dirtyBytes, Snapshots: s.snapBytes, Memory: s.memory.Bytes()}
}

// Options returns the options of the Set.
func (s *Set) Options() Options { return s.opts }

// Seq returns the global sequence of the last event folded, 0 for none.
func (s *Set) Seq() uint64 { return s.seq }

// Tasks returns the task registry. Callers must not change it: tasks change
// only through Apply.
func (s *Set) Tasks() *Registry { return s.tasks }

// Stats returns the stats projection.
func (s *Set) Stats() *Stats { return s.stats }

// Memory returns the memory projection.
func (s *Set) Memory() *Memory { return s.memory }

// Progress returns the progress of a task in memory.
func (s *Set) Progress(id string) (Progress, bool) {
	sl, ok := s.tasks.slots[id]
	if !ok || !sl.hasProg || sl.cold {
		return Progress{}, false
	}
	return sl.progress, true
}

// InputSeq returns the global sequence of an event whose body holds the
// input text of a task in memory (the event that created it), 0 if the
// task is not in memory or none is known: what EncodeStoredTask needs to
// refer to the input instead of copying it.
func (s *Set) InputSeq(id string) uint64 {
	sl, ok := s.tasks.slots[id]
	if !ok || sl.cold {
		return 0
	}
	return sl.inputSeq
}

// NeedsTask reports whether folding an event at version of stream
// requires a task that is not in memory: any event after a stream's first
// whose task has been evicted. The replay layer then loads the task
// (RestoreTask) before Apply, so that a fold with evictions refuses and
// accepts exactly what a fold from zero does.
func (s *Set) NeedsTask(stream string, version uint64) bool {
	if version <= 1 || KindOf(stream) != KindTask {
		return false
	}
	sl := s.tasks.find(stream)
	return sl == nil || sl.cold
}

// Apply folds one event into every read model and says what it did. It
// never panics and never fails: an event the fsm refuses leaves every read
// model as it was (but the event counters) and is reported in Change.Err,
// so that a fold from zero and a fold from a checkpoint refuse the same
// events and agree.
func (s *Set) Apply(ev fsm.Event) Change {
	var ch Change
	s.ApplyTo(&ch, ev)
	return ch
}

// ApplyTo is Apply writing the Change into *ch, whatever it held before: a
// fold keeps one Change for its whole loop, and a Change (two tasks and the
// event) copied out on every step was a measurable part of a fold's CPU.
func (s *Set) ApplyTo(ch *Change, ev fsm.Event) {
	ch.Event, ch.Kind, ch.Err, ch.Warn = ev, KindOf(ev.Stream), nil, nil
	if ch.Kind != KindTask {
		clearTask(&ch.Before)
		clearTask(&ch.After)
	}
	s.seq = ev.Seq
	switch ch.Kind {
	case KindTask:
		sl := s.tasks.find(ev.Stream)
		if sl != nil && sl.cold {
			// The replay layer restores a task before folding its events
			// (NeedsTask); a stub must never be folded into.
			clearTask(&ch.Before)
			clearTask(&ch.After)
			ch.Err = fmt.Errorf("%w: %s left memory and was not restored", ErrTaskNotFound, ev.Stream)
			break
		}
		if sl != nil {
			ch.Before = sl.task
		} else {
			clearTask(&ch.Before)
		}
		after, err := fsm.Apply(ch.Before, ev)
		if err != nil {
			ch.After, ch.Err = ch.Before, err
			break
		}
		ch.After = after
		if sl == nil {
			sl = s.tasks.put(after)
			sl.unlisted = true
		} else {
			s.tasks.set(sl, after)
		}
		sl.inputSeq = nextInputSeq(sl.inputSeq, &ev, &ch.Before, &ch.After)
		applyProgress(&sl.progress, !sl.hasProg, ev, &ch.Before, &ch.After)
		sl.hasProg = true
		s.stats.task(ev, &ch.Before, &ch.After)
		if !sl.dirty {
			sl.dirty = true
			s.dirty = append(s.dirty, sl)
			s.dirtyBytes += sl.bytes
		}
		s.account(sl)
		if n := s.opts.SnapshotEvery; n > 0 && after.Version%n == 0 {
			s.snapshots = append(s.snapshots, Snapshot{Task: after, InputSeq: sl.inputSeq})
			if !s.opts.Unbounded {
				s.snapBytes += TaskBytes(&after)
			}
		}
	case KindMemory:
		err := s.memory.Apply(ev)
		if _, ok := err.(*PatchMismatchError); ok {
			ch.Warn = err
		} else if err != nil {
			ch.Err = err
			break
		}
		s.stats.s.MemoryEvents++
	case KindInputs:
		s.stats.input(ev)
	case KindSystem:
		s.stats.system(ev)
	}
	s.stats.event(ev, ch.Err != nil)
}

// clearTask sets *t to the zero Task.
func clearTask(t *fsm.Task) { *t = fsm.Task{} }

// Refuse records an event that could not even be decoded: only the
// sequence and the event counters move. err says why.
func (s *Set) Refuse(ev fsm.Event, err error) Change {
	s.seq = ev.Seq
	s.stats.event(ev, true)
	ch := Change{Event: ev, Kind: KindOf(ev.Stream), Err: err}
	if ch.Kind == KindTask {
		if sl := s.tasks.find(ev.Stream); sl != nil && !sl.cold {
			ch.Before, ch.After = sl.task, sl.task
		}
	}
	return ch
}

// TaskRecord is what the replay layer persists for one changed task.
type TaskRecord struct {
	Task fsm.Task
	// InputSeq is the sequence of an event whose body holds the task's
	// input text, 0 if none is known (EncodeStoredTask).
	InputSeq uint64
	Progress *Progress
	Summary  Summary
	// Unlisted reports that no earlier Pending held the task unfinished
	// and it was not restored from persisted state: what persists the
	// records has never listed it as active, so a finished task has no
	// such listing to remove. False when unknown.
	Unlisted bool
}

// Snapshot is a task queued for a per-task snapshot, with its InputSeq.
type Snapshot struct {
	Task     fsm.Task
	InputSeq uint64
}

// Pending is everything that changed since the last Flushed: what a
// checkpoint must write, together with Seq, in one atomic batch. It shares
// no mutable memory with the Set (tasks are values that Apply never
// changes in place), so it can be encoded and written while the fold goes
// on.
type Pending struct {
	Seq       uint64
	Tasks     []TaskRecord // changed tasks, by id
	Snapshots []Snapshot   // queued snapshots, in fold order
	Stats     []byte       // Stats.Encode at Seq: every event moves its counters
	// Facts are the memory facts changed, Episodes the episodes recorded.
	Facts    []Fact
	Episodes []Episode

	progs []Progress // the array Tasks' Progress point into
}

// Pending returns what changed since the last Flushed, as of the last
// event folded. It changes nothing the Set folds or serves; it notes only
// that the tasks it holds unfinished may now be listed as active where
// it is persisted (TaskRecord.Unlisted), even if that write fails.
func (s *Set) Pending() (Pending, error) {
	var p Pending
	err := s.PendingReusing(&p)
	return p, err
}

// PendingReusing is Pending written into *p, in the arrays of its Tasks
// and of their progress if they are large enough: a caller done with an
// earlier Pending (written and forgotten) passes it back instead of
// allocating them anew each time. On error *p is left empty.
func (s *Set) PendingReusing(p *Pending) error {
	p.Reset()
	tasks, progs := p.Tasks, p.progs
	*p = Pending{}
	stats, err := s.stats.Encode()
	if err != nil {
		return err
	}
	*p = Pending{Seq: s.seq, Snapshots: append([]Snapshot(nil), s.snapshots...), Stats: stats}
	// Sorted as pointers, not as records of hundreds of bytes each (and
	// in fold order, which is mostly id order, already).
	dirty := slices.Clone(s.dirty)
	slices.SortFunc(dirty, func(a, b *slot) int { return strings.Compare(a.task.ID, b.task.ID) })
	p.Tasks = slices.Grow(tasks, len(dirty))[:len(dirty)]
	p.progs = slices.Grow(progs, len(dirty))[:len(dirty)] // one array for every record's copy
	for i, sl := range dirty {
		r := &p.Tasks[i]
		r.Task, r.InputSeq, r.Summary = sl.task, sl.inputSeq, Summarize(&sl.task)
		r.Unlisted = sl.unlisted
		if !sl.task.IsTerminal() {
			sl.unlisted = false
		}
		if sl.hasProg {
			p.progs[i] = sl.progress
			r.Progress = &p.progs[i]
		}
	}
	p.Facts, p.Episodes = s.memory.Changes()
	return nil
}

// Reset empties p, a Pending its caller is done with, keeping the arrays
// of its Tasks and their progress for PendingReusing unless they are
// larger than a checkpoint usually is (reuseRecords). Nothing p held
// stays reachable through them.
func (p *Pending) Reset() {
	tasks, progs := p.Tasks[:0], p.progs[:0]
	if cap(tasks) > reuseRecords || cap(progs) > reuseRecords {
		tasks, progs = nil, nil
	}
	clear(tasks[:cap(tasks)])
	clear(progs[:cap(progs)])
	*p = Pending{Tasks: tasks, progs: progs}
}

// reuseRecords bounds the records whose arrays Reset keeps: about 3.5 MB.
const reuseRecords = 4096

// Cool makes tasks that are not finished leave memory until the tasks in
// memory hold at most target bytes, and returns their ids. Only tasks
// without pending changes leave (their persisted record is their current
// state): idle and suspended ones first, then the largest. Each keeps a
// stub (id, state, priority, version, machine, creation time) so that
// counts, Registry.Cold and Registry.EachInState stay right; NeedsTask
// then asks for it to be restored before its next event, and Registry.Get
// and Progress no longer find it (read it where it was persisted).
func (s *Set) Cool(target int64) []string {
	if s.taskBytes <= target {
		return nil
	}
	var cand []*slot
	for _, sl := range s.tasks.slots {
		if !sl.cold && !sl.dirty && !sl.task.State.IsTerminal() {
			cand = append(cand, sl)
		}
	}
	waiting := func(st fsm.State) bool { return st == fsm.StateIdle || st == fsm.StateSuspended }
	sort.Slice(cand, func(i, j int) bool {
		a, b := cand[i], cand[j]
		if wa, wb := waiting(a.task.State), waiting(b.task.State); wa != wb {
			return wa
		}
		if a.bytes != b.bytes {
			return a.bytes > b.bytes
		}
		return a.task.ID < b.task.ID
	})
	var ids []string
	for _, sl := range cand {
		if s.taskBytes <= target {
			break
		}
		t := &sl.task
		sl.task = fsm.Task{ID: t.ID, State: t.State, Priority: t.Priority, Version: t.Version, Seq: t.Seq,
			Machine: t.Machine, CreatedAt: t.CreatedAt}
		sl.progress, sl.hasProg, sl.cold, sl.inputSeq = Progress{}, false, true, 0
		s.account(sl)
		ids = append(ids, sl.task.ID)
	}
	return ids
}

// RestoreCold records a task that is not finished without loading it:
// what Cool leaves, from the persisted summary. Open uses it when the
// active tasks do not fit in the memory budget.
func (s *Set) RestoreCold(sum *Summary) {
	machine, _ := fsm.ParseMachineRef(sum.Machine) // none recorded: the zero ref, as the task had
	sl := s.tasks.put(fsm.Task{ID: sum.ID, State: sum.State, Priority: sum.Priority, Version: sum.Events, Seq: sum.Seq,
		Machine: machine, CreatedAt: sum.CreatedAt})
	sl.progress, sl.hasProg, sl.cold, sl.inputSeq = Progress{}, false, true, 0
	s.account(sl)
}

// Flushed tells the Set that the Pending taken at seq was persisted. It
// forgets the changes made by events up to seq (changes folded since, while
// the checkpoint was written, stay pending for the next one), drops the
// snapshots it wrote and evicts every terminal task that has no pending
// change from memory, with its progress, returning their ids in order.
// They stay in the persisted read model, and a late fact for one is folded
// after RestoreTask.
func (s *Set) Flushed(seq uint64) []string {
	// The tasks to evict are among those this call cleans and those
	// restored since the last call: every other finished task was
	// evicted by an earlier call or is still dirty, so Flushed need not
	// visit every task in memory.
	ids := s.restored
	s.restored = nil
	keep := s.dirty[:0]
	for _, sl := range s.dirty {
		if sl.task.Seq > seq {
			keep = append(keep, sl)
			continue
		}
		sl.dirty = false
		s.dirtyBytes -= sl.bytes
		if sl.task.State.IsTerminal() && !sl.cold {
			ids = append(ids, sl.task.ID)
		}
	}
	clear(s.dirty[len(keep):]) // drop the pointers: evicted slots must not stay reachable
	s.dirty = keep
	i := 0
	for i < len(s.snapshots) && s.snapshots[i].Task.Seq <= seq {
		if !s.opts.Unbounded {
			s.snapBytes -= TaskBytes(&s.snapshots[i].Task)
		}
		i++
	}
	s.snapshots = append([]Snapshot(nil), s.snapshots[i:]...)
	s.memory.ClearChanges(seq)
	// A restored task may have been folded into (and be dirty again) or be
	// listed twice: keep each id once, and only the finished, clean ones.
	ids = slices.DeleteFunc(ids, func(id string) bool {
		sl, ok := s.tasks.slots[id]
		return !ok || !sl.task.State.IsTerminal() || sl.dirty || sl.cold
	})
	if len(ids) == 0 {
		return nil
	}
	sort.Strings(ids)
	ids = slices.Compact(ids)
	for _, id := range ids {
		s.taskBytes -= s.tasks.slots[id].bytes
		s.tasks.Remove(id)
	}
	return ids
}
