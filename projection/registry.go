package projection

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/pegasus-engine/pegasus/fsm"
)

// ErrTaskNotFound is returned by Registry.Get (and by the replay queries) for
// a task id that is not known.
var ErrTaskNotFound = errors.New("projection: task not found")

// ErrTaskExists is returned by Registry.Register for an id already present.
var ErrTaskExists = errors.New("projection: task already registered")

// Registry is the TaskRegistry of the task spec: the tasks the fold holds in
// memory. A task enters it when its TASK_CREATED is folded and changes only
// when a later event of its stream is folded; nothing else writes to it.
//
// "Active" here means what the spec means for the registry: not terminal
// (idle, reasoning, acting or suspended). Terminal tasks stay until
// CleanupTerminal, which the replay layer calls once they are persisted;
// they stay queryable from the persisted read model after that.
//
// Tasks are held and handed out as values. A returned task shares slices
// and maps with the registry's copy (fsm.Apply's append semantics): read it
// freely, and call Task.Clone before changing it. Not safe for concurrent
// use; replay.View wraps it with a lock.
type Registry struct {
	slots   map[string]*slot
	byState [len(stateIndex)]int // counts, indexed by stateSlot
}

// find returns the slot of id, nil if there is none.
func (r *Registry) find(id string) *slot { return r.slots[id] }

// slot holds one task in memory with what the Set keeps beside it, so
// that folding an event costs one map lookup.
type slot struct {
	task     fsm.Task
	progress Progress // valid when hasProg
	// inputSeq is the sequence of an event whose body holds the task's
	// input text, 0 if unknown (EncodeStoredTask).
	inputSeq uint64
	bytes    int64 // slotBytes when last accounted by the Set
	// planOf is the plan whose estimate planBytes is (slotBytes).
	planOf    *fsm.Plan
	planBytes int64
	// The flags, together: a slot stays in its allocation size class.
	hasProg bool
	dirty   bool // changed since the last Flushed
	// unlisted: no Pending has held the task unfinished, and it was not
	// restored from persisted state: nothing persisted lists it as
	// active (TaskRecord.Unlisted). Set only for a task whose first event
	// the Set folded.
	unlisted bool
	// cold: the task left memory (Set.Cool) but is not finished; task is a
	// stub (id, state, priority, version, machine, creation time) that
	// keeps the counters and the lists by state right. It is read back
	// with RestoreTask.
	cold bool
}

// stateIndex orders the states of every machine for per-state counters:
// the non-terminal ones first (slots 0 to nonTerminal-1).
var stateIndex = [...]fsm.State{fsm.StateIdle, fsm.StateReasoning, fsm.StateActing, fsm.StateSuspended,
	fsm.StatePerceiving, fsm.StateThinking, fsm.StatePlanning, fsm.StateReflecting,
	fsm.StatePending, fsm.StateAssigned, fsm.StateInProgress, fsm.StateTimedOut, fsm.StateCompleted, fsm.StateFailed}

const nonTerminal = 12

// stateSlot returns s's index in stateIndex; the zero state counts as
// idle and a state of no machine in the last slot. A switch, not a scan
// of stateIndex: the fold asks twice per event (TestStateSlot keeps the
// two in step).
func stateSlot(s fsm.State) int {
	switch s {
	case fsm.StateNone, fsm.StateIdle:
		return 0
	case fsm.StateReasoning:
		return 1
	case fsm.StateActing:
		return 2
	case fsm.StateSuspended:
		return 3
	case fsm.StatePerceiving:
		return 4
	case fsm.StateThinking:
		return 5
	case fsm.StatePlanning:
		return 6
	case fsm.StateReflecting:
		return 7
	case fsm.StatePending:
		return 8
	case fsm.StateAssigned:
		return 9
	case fsm.StateInProgress:
		return 10
	case fsm.StateTimedOut:
		return 11
	case fsm.StateCompleted:
		return 12
	}
	return len(stateIndex) - 1 // failed, and a state of no machine
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{slots: map[string]*slot{}} }

// Register adds a task. It refuses an empty id and an id already present.
func (r *Registry) Register(t fsm.Task) error {
	if t.ID == "" {
		return fmt.Errorf("projection: register: empty task id")
	}
	if _, ok := r.slots[t.ID]; ok {
		return fmt.Errorf("%w: %s", ErrTaskExists, t.ID)
	}
	r.put(t)
	return nil
}

// put inserts or replaces a task, keeping the counters right, and returns
// its slot.
func (r *Registry) put(t fsm.Task) *slot {
	sl, ok := r.slots[t.ID]
	if !ok {
		sl = &slot{}
		r.slots[t.ID] = sl
	} else {
		r.byState[stateSlot(sl.task.State)]--
	}
	sl.task, sl.cold, sl.unlisted = t, false, false
	r.byState[stateSlot(t.State)]++
	return sl
}

// set replaces the task of an existing slot.
func (r *Registry) set(sl *slot, t fsm.Task) {
	if sl.task.State != t.State {
		r.byState[stateSlot(sl.task.State)]--
		r.byState[stateSlot(t.State)]++
	}
	sl.task = t
}

// Get returns the task with id, or an error wrapping ErrTaskNotFound (also
// for a task that left memory: read it where it was persisted).
func (r *Registry) Get(id string) (fsm.Task, error) {
	sl, ok := r.slots[id]
	if !ok || sl.cold {
		return fsm.Task{}, fmt.Errorf("%w: %s", ErrTaskNotFound, id)
	}
	return sl.task, nil
}

// GetOrNil returns a pointer to a copy of the task with id, or nil.
func (r *Registry) GetOrNil(id string) *fsm.Task {
	sl, ok := r.slots[id]
	if !ok || sl.cold {
		return nil
	}
	t := sl.task
	return &t
}

// Has reports whether the task with id is in memory.
func (r *Registry) Has(id string) bool {
	sl, ok := r.slots[id]
	return ok && !sl.cold
}

// Remove drops the task with id from memory; it reports whether it was
// there.
func (r *Registry) Remove(id string) bool {
	sl, ok := r.slots[id]
	if !ok {
		return false
	}
	r.byState[stateSlot(sl.task.State)]--
	delete(r.slots, id)
	return true
}

// ListActive returns the non-terminal tasks ordered by id, which is creation
// order (task ids are ULIDs).
func (r *Registry) ListActive() []fsm.Task {
	return r.list(func(t *fsm.Task) bool { return !t.IsTerminal() })
}

// ListAll returns every task in memory ordered by id.
func (r *Registry) ListAll() []fsm.Task {
	return r.list(func(*fsm.Task) bool { return true })
}

// ListState returns the tasks in memory in any of the given states, ordered
// by id.
func (r *Registry) ListState(states ...fsm.State) []fsm.Task {
	return r.list(func(t *fsm.Task) bool {
		for _, s := range states {
			if t.State == s {
				return true
			}
		}
		return false
	})
}

// Cold returns the stubs (id, state, priority, version) of the tasks in
// any of the given states that left memory (Set.Cool), ordered by id.
func (r *Registry) Cold(states ...fsm.State) []fsm.Task {
	var out []fsm.Task
	for _, sl := range r.slots {
		if sl.cold && slices.Contains(states, sl.task.State) {
			out = append(out, sl.task)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// EachInState calls fn for every task in any of the given states, in
// memory or its stub if it left (Set.Cool: id, state, priority, version,
// machine and creation time are right, nothing else), in no particular
// order, without copying them. fn must not keep t or change it. It costs
// no read of a task that left memory: what a count by state and machine,
// or the age of the oldest, needs.
func (r *Registry) EachInState(fn func(t *fsm.Task), states ...fsm.State) {
	for _, sl := range r.slots {
		if slices.Contains(states, sl.task.State) {
			fn(&sl.task)
		}
	}
}

// Each calls fn for every task in memory (not those that left it: Cold),
// in no particular order, without copying them. fn must not keep t or
// change it.
func (r *Registry) Each(fn func(t *fsm.Task)) {
	for _, sl := range r.slots {
		if !sl.cold {
			fn(&sl.task)
		}
	}
}

// list returns the tasks in memory that keep accepts, ordered by id. Tasks
// that left memory are not listed (Cold).
func (r *Registry) list(keep func(*fsm.Task) bool) []fsm.Task {
	out := make([]fsm.Task, 0, len(r.slots))
	for _, sl := range r.slots {
		if !sl.cold && keep(&sl.task) {
			out = append(out, sl.task)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// CleanupTerminal removes every completed or failed task from memory and
// returns their ids in order.
func (r *Registry) CleanupTerminal() []string {
	var ids []string
	for id, sl := range r.slots {
		if sl.task.IsTerminal() { // a dispatch task that failed may still be retried
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		r.Remove(id)
	}
	return ids
}

// ActiveCount returns the number of non-terminal tasks.
func (r *Registry) ActiveCount() int {
	n := 0
	for _, c := range r.byState[:nonTerminal] {
		n += c
	}
	return n
}

// Count returns the number of tasks in memory in state s.
func (r *Registry) Count(s fsm.State) int { return r.byState[stateSlot(s)] }

// Len returns the number of tasks known, in memory or left it (Cool).
func (r *Registry) Len() int { return len(r.slots) }
