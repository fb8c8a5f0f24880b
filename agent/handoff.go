package agent

import (
	"context"
	"slices"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// Handing a slot over. A stage whose outcome leaves its task with no work
// that needs a slot (the task completes, fails, waits for input or for a
// time) does no more I/O once it hands that outcome to the log, so it
// gives its admission slot to the next task waiting then, instead of
// after the commit is folded: when that task waits to be started (fsm.Next
// says start, on its folded state), its TASK_CREATED goes in the same
// commit as the outcome (AppendMulti: both or neither), else its stage
// starts at once. Each task that waits for a slot thus costs no commit
// and no fold of its own between the previous task's end and its start.
// Every guarantee holds: a task starts only when fsm.Next says so on its
// folded state, and no more than MaxActiveTasks tasks run a stage at once.
//
// The events of the outcome's commit are folded one by one, and the hook
// would dispatch after each (REASON_DONE: a respond step is due, taking a
// slot again). The hook dispatches only on the commit's last event of the
// task, which says what is due once the whole outcome is folded. If the
// append fails (the task moved meanwhile: a conflict), handBack dispatches
// the task as folded now; the event that moved it is dispatched by its own
// hook. If the next task's admission alone was refused (it was cancelled
// while it waited), the outcome is appended on its own.

// handoff is the commit of a stage that gave its slot away: its events'
// ids, the last one apart.
type handoff struct {
	ids  []ulid.ULID // every event but the last
	last ulid.ULID
	buf  [4]ulid.ULID // ids' array, for a commit of up to 5 events
}

// newHandoff returns the handoff of a commit of n events but the last,
// whose ids the caller writes into ids, then last.
func newHandoff(last ulid.ULID, n int) *handoff {
	h := &handoff{last: last}
	if n <= len(h.buf) {
		h.ids = h.buf[:n]
	} else {
		h.ids = make([]ulid.ULID, n)
	}
	return h
}

// handOff appends evs, the outcome of t's stage at version v after which
// t needs no slot, giving t's slot to the next task waiting.
func (a *Agent) handOff(ctx context.Context, t *fsm.Task, v uint64, evs []eventlog.Event) (eventlog.AppendResult, bool) {
	h := newHandoff(evs[len(evs)-1].ID, len(evs)-1)
	for i := range h.ids {
		h.ids[i] = evs[i].ID
	}
	a.handoffs.store(t.ID, h)
	handed, next := a.sched.handOff(t.ID)
	if !handed {
		a.handoffs.remove(t.ID)
		return a.appendTask(ctx, t, v, evs...)
	}
	var (
		res  eventlog.AppendResult
		done bool
	)
	if nt, ok := a.startable(next); ok {
		rs, err := a.app.AppendMulti(ctx,
			eventlog.StreamAppend{Stream: t.ID, Expected: eventlog.Exactly(v), Events: evs},
			eventlog.StreamAppend{Stream: nt.ID, Expected: eventlog.Exactly(nt.Version), Events: []eventlog.Event{a.admission(&nt)}})
		if err == nil {
			return rs[0], true // the next task's TASK_CREATED dispatches it
		}
		a.opts.Logger.Debug("handing a slot over with an admission failed; appending the outcome alone",
			taskIDAttr(t.ID), machineAttr(t), "next", nt.ID, "err", err)
	}
	a.sched.start(next)
	if res, done = a.appendTask(ctx, t, v, evs...); !done {
		a.handBack(t.ID)
	}
	return res, done
}

// startable returns task id as folded if it waits to be started.
func (a *Agent) startable(id string) (fsm.Task, bool) {
	if id == "" {
		return fsm.Task{}, false
	}
	t, err := a.view.Task(id)
	return t, err == nil && fsm.Next(&t).Kind == fsm.ActStart
}

// handBack undoes what handOff skips when the append of the outcome
// failed: the task is dispatched as folded now. An append can also report
// a failure for a commit that went through (its stage was cancelled while
// it waited, by the hook of the commit's last event): that hook has
// dispatched the task, and removed the record, so nothing is done twice.
func (a *Agent) handBack(id string) {
	if _, ok := a.handoffs.loadAndRemove(id); !ok {
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
	h, ok := a.handoffs.load(id)
	if !ok {
		return false
	}
	if evID == h.last {
		a.handoffs.compareAndRemove(id, h)
		return false
	}
	return slices.Contains(h.ids, evID)
}

// handOff gives task id's slot, while its stage finishes, to the next task
// waiting, if any, whose stage it does not start: the caller starts it
// (start) or appends its admission. It reports false when task id holds no
// slot.
func (s *scheduler) handOff(id string) (handed bool, next string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[id]
	if r == nil || !r.holding {
		return false, ""
	}
	s.unholdLocked(r)
	for !s.closed && s.queue.Len() > 0 {
		w := s.queue.pop(s.keyFree)
		if w == nil {
			break
		}
		nr := s.runs[w.id]
		if nr == nil || nr.wait != w {
			continue
		}
		nr.wait = nil
		s.holdLocked(nr)
		return true, w.id
	}
	return true, ""
}

// start starts the stage of task id if it holds a slot (handOff gave it
// one that it still holds).
func (s *scheduler) start(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[id]; r != nil && r.holding && !s.closed {
		s.startLocked(id, r)
	}
}
