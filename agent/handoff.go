package agent

import (
	"slices"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// Handing a slot over. A stage whose outcome leaves its task with no work
// that needs a slot (the task completes, fails, waits for input or for a
// time) does no more I/O once it hands that outcome to the log. It gives
// its admission slot back then, before the commit, instead of after the
// commit is folded: the next task's admission (TASK_CREATED) is appended
// while the outcome commits, and shares its fsync, instead of waiting a
// whole commit and fold behind it. Every guarantee holds: the next task
// starts only when fsm.Next says so on its folded state, and no more than
// MaxActiveTasks tasks run a stage at once.
//
// The events of the outcome's commit are folded one by one, and the hook
// would dispatch after each (REASON_DONE: a respond step is due, taking a
// slot again). The hook dispatches only on the commit's last event, which
// says what is due once the whole outcome is folded. If the append fails
// (the task moved meanwhile: a conflict), handBack dispatches the task as
// folded now; the event that moved it is dispatched by its own hook.

// handoff is the commit of a stage that gave its slot away: its events'
// ids, the last one apart.
type handoff struct {
	ids  []ulid.ULID // every event but the last
	last ulid.ULID
}

// handOff gives task id's slot to the next task waiting, before evs are
// appended. It reports false when the task holds no slot.
func (a *Agent) handOff(id string, evs []eventlog.Event) bool {
	h := &handoff{last: evs[len(evs)-1].ID}
	for _, ev := range evs[:len(evs)-1] {
		h.ids = append(h.ids, ev.ID)
	}
	a.handoffs.Store(id, h)
	if !a.sched.handOff(id) {
		a.handoffs.Delete(id)
		return false
	}
	return true
}

// handBack undoes what handOff skips when the append of the outcome
// failed: the task is dispatched as folded now. An append can also report
// a failure for a commit that went through (its stage was cancelled while
// it waited, by the hook of the commit's last event): that hook has
// dispatched the task, and removed the record, so nothing is done twice.
func (a *Agent) handBack(id string) {
	if _, ok := a.handoffs.LoadAndDelete(id); !ok {
		return
	}
	if t, err := a.view.Task(id); err == nil {
		a.dispatch(&t, fsm.Next(&t))
	}
}

// handedOff reports whether event evID of task id is in the commit of a
// stage that gave its slot away, and not the last: its dispatch is
// skipped.
func (a *Agent) handedOff(id string, evID ulid.ULID) bool {
	v, ok := a.handoffs.Load(id)
	if !ok {
		return false
	}
	h := v.(*handoff)
	if evID == h.last {
		a.handoffs.CompareAndDelete(id, h)
		return false
	}
	return slices.Contains(h.ids, evID)
}

// handOff gives up task id's slot while its stage finishes and admits the
// next waiting task. It reports false when the task holds no slot.
func (s *scheduler) handOff(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[id]
	if r == nil || !r.holding {
		return false
	}
	r.holding = false
	s.active--
	s.admitLocked()
	return true
}
