package broker

import (
	"container/heap"
	"slices"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// The broker's in-memory index of the live dispatch tasks. follow keeps it
// in step with the view (observeLocked, after every dispatch event folded);
// the loop looks only at what changed (dirty), at what fell due (due) and at
// the head of the queue (ready), never at every live task: a step costs
// O(changes + assignments) with a queue of any length, and a worker's long
// poll reads and waits on its own tasks only. The loop still looks at every
// live task once per Options.CheckInterval, a safety net that costs little.

// entry is a live dispatch task as last folded, with its place in the
// index. Guarded by Broker.mu.
type entry struct {
	t      fsm.Task       // only what scheduling reads (schedulingCopy); answers read the view
	d      fsm.Dispatch   // t.Dispatch's storage, rewritten in place under b.mu
	next   fsm.ActionKind // fsm.Next(&t).Kind, as of t
	nextAt time.Time      // fsm.Next(&t).At
	dirty  bool           // in Broker.dirty
	gone   bool           // left Broker.live (finished, or the view lost it)
	worker string         // the worker the task counts against (assigned, running); "" none
	due    time.Time      // its time in Broker.due; zero: not there
	queued bool           // in Broker.ready
	qkey   string         // while queued: its requirement key (reqKey), counted in Broker.readyKeys
}

// observeLocked records t, task id as the view folded it now (ok false:
// the view has no such task). Versions only go forward: a fold read
// before a later one cannot undo it. Called with b.mu held.
func (b *Broker) observeLocked(id string, t fsm.Task, ok bool) {
	e := b.live[id]
	if e != nil && ok && t.Version < e.t.Version {
		return
	}
	if !ok || t.Dispatch == nil || t.IsTerminal() {
		if e != nil {
			b.setWorkerLocked(e, "")
			delete(b.live, id)
			e.gone = true
			// Its places in the heaps are stale now: keep only what orders
			// them (the ready heap must not see its keys change), not the task.
			e.t, e.d = fsm.Task{ID: e.t.ID, Priority: e.t.Priority, CreatedAt: e.t.CreatedAt}, fsm.Dispatch{}
			e.due = time.Time{}
		}
		return
	}
	if e == nil {
		e = &entry{}
		b.live[id] = e
	}
	e.t = schedulingCopyTo(&t, &e.d)
	a := fsm.Next(&e.t) // &e.t: t stays on the stack
	e.next, e.nextAt = a.Kind, a.At
	w := ""
	if a.Kind == fsm.ActWaitWorker {
		w = a.Task
	}
	b.setWorkerLocked(e, w)
	if w != "" {
		b.signalLocked(w) // its state changed: a long poll may match now
	}
	b.markLocked(e)
}

// markLocked has the next step look at live task e.
func (b *Broker) markLocked(e *entry) {
	if !e.dirty {
		e.dirty = true
		b.dirty = append(b.dirty, e)
	}
}

// schedulingCopy is the part of dispatch task t that the broker's
// decisions read: what fsm.Next, the queue order, the choice of a worker,
// unwanted and the decisions' events need. It shares nothing with t but
// the few strings it keeps (ids, capabilities). The rest (title,
// description, owner, result, error, progress, metadata, history, the
// agent context) stays in the view, which holds it within its memory
// budget and drops it from memory beyond: a full copy of each live task
// here would keep every queued task's text in memory, outside the budget.
// Everything that answers with a task reads it from the view.
func schedulingCopy(t *fsm.Task) fsm.Task { return schedulingCopyTo(t, new(fsm.Dispatch)) }

// schedulingCopyTo is schedulingCopy with its dispatch part written into
// *to: an entry keeps it in place, one allocation per task instead of one
// per observation. Nothing outside b.mu reads an entry's dispatch part
// (decisions leave it out: decisionOn).
func schedulingCopyTo(t *fsm.Task, to *fsm.Dispatch) fsm.Task {
	d := t.Dispatch
	*to = fsm.Dispatch{
		RequiredCapabilities: d.RequiredCapabilities,
		AssignedAgent:        d.AssignedAgent,
		AssignedAt:           d.AssignedAt,
		StartedAt:            d.StartedAt,
		LastProgressAt:       d.LastProgressAt,
		RetryCount:           d.RetryCount,
		MaxRetries:           d.MaxRetries,
		RetryEligible:        d.RetryEligible,
		TimeoutSeconds:       d.TimeoutSeconds,
		HeartbeatSeconds:     d.HeartbeatSeconds,
		RetryBackoffSeconds:  d.RetryBackoffSeconds,
		RunAt:                d.RunAt,
		NotBefore:            d.NotBefore,
		DeadLettered:         d.DeadLettered,
		Requeues:             d.Requeues,
	}
	return fsm.Task{
		ID: t.ID, Machine: t.Machine, State: t.State,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, Priority: t.Priority,
		Version: t.Version, Seq: t.Seq, LastEvent: t.LastEvent,
		ParentID: t.ParentID, ConcurrencyKey: t.ConcurrencyKey,
		Context:  fsm.Context{Source: t.Context.Source},
		Dispatch: to,
	}
}

// setWorkerLocked moves e to worker w's tasks, waking both workers' long
// polls.
func (b *Broker) setWorkerLocked(e *entry, w string) {
	if e.worker == w {
		return
	}
	if old := e.worker; old != "" {
		delete(b.byWorker[old], e.t.ID)
		if len(b.byWorker[old]) == 0 {
			delete(b.byWorker, old)
		}
		b.signalLocked(old)
	}
	e.worker = w
	if w != "" {
		if b.byWorker[w] == nil {
			b.byWorker[w] = map[string]*entry{}
		}
		b.byWorker[w][e.t.ID] = e
		b.signalLocked(w)
	}
}

// signalLocked wakes the long polls of worker w.
func (b *Broker) signalLocked(w string) {
	if ch, ok := b.workerCh[w]; ok {
		close(ch)
		delete(b.workerCh, w)
	}
}

// scheduleLocked puts e in the due heap at at (once per distinct time).
func (b *Broker) scheduleLocked(e *entry, at time.Time) {
	if e.due.Equal(at) {
		return
	}
	e.due = at
	heap.Push(&b.due, dueAt{at: at, e: e})
}

// popDueLocked marks dirty every live task whose time has come.
func (b *Broker) popDueLocked(now time.Time) {
	for len(b.due) > 0 && !b.due[0].at.After(now) {
		d := heap.Pop(&b.due).(dueAt)
		if b.live[d.e.t.ID] == d.e && d.e.due.Equal(d.at) {
			d.e.due = time.Time{}
			b.markLocked(d.e)
		}
	}
}

// compactLocked drops the stale places from the heaps once they outnumber
// the live tasks (a finished task's deadline would stay until its time,
// WorkerTTL-like minutes at thousands of tasks per second): amortized
// O(1) per place.
func (b *Broker) compactLocked() {
	if n := len(b.due); n > 64 && n > 2*len(b.live) {
		keep := b.due[:0]
		for _, d := range b.due {
			if b.live[d.e.t.ID] == d.e && d.e.due.Equal(d.at) {
				keep = append(keep, d)
			}
		}
		clear(b.due[len(keep):])
		b.due = keep
		heap.Init(&b.due)
	}
	if n := len(b.ready); n > 64 && n > 2*len(b.live) {
		keep := b.ready[:0]
		for _, e := range b.ready {
			if b.live[e.t.ID] == e {
				keep = append(keep, e)
			} else {
				b.unqueueLocked(e)
			}
		}
		clear(b.ready[len(keep):])
		b.ready = keep
		heap.Init(&b.ready)
	}
}

// nextDueLocked is the earliest time in the due heap (zero: none).
func (b *Broker) nextDueLocked() time.Time {
	if len(b.due) == 0 {
		return time.Time{}
	}
	return b.due[0].at
}

// sortedIDs returns the ids of es, sorted (oldest first). Called with
// b.mu held.
func sortedIDs(es map[string]*entry) []string {
	ids := make([]string, 0, len(es))
	for id := range es {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// viewTasks reads the tasks ids from the view, whole, in order, leaving
// out those keep refuses and those the view does not have. Called without
// b.mu (a task that left the view's memory is read from disk).
func (b *Broker) viewTasks(ids []string, keep func(*fsm.Task) bool) []fsm.Task {
	out := make([]fsm.Task, 0, len(ids))
	for _, id := range ids {
		t, err := b.tasks.Task(id)
		if err != nil || t.Dispatch == nil || !keep(&t) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// dueAt is a task's place in the due heap; stale places (the task moved
// on) are skipped when popped.
type dueAt struct {
	at time.Time
	e  *entry
}

type dueHeap []dueAt

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueAt)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = dueAt{}
	*h = old[:len(old)-1]
	return x
}

// reqKey is the key of a set of required capabilities: equal for sets a
// worker matches alike (capabilities compare case-insensitively).
func reqKey(caps []string) string {
	switch len(caps) {
	case 0:
		return ""
	case 1:
		return strings.ToLower(caps[0])
	}
	lc := make([]string, len(caps))
	for i, c := range caps {
		lc[i] = strings.ToLower(c)
	}
	slices.Sort(lc)
	return strings.Join(lc, "\x00")
}

// queueLocked puts e in the ready queue, counting its requirement key.
func (b *Broker) queueLocked(e *entry) {
	e.queued, e.qkey = true, reqKey(e.t.Dispatch.RequiredCapabilities)
	b.readyKeys[e.qkey]++
	heap.Push(&b.ready, e)
}

// unqueueLocked forgets that e is in the ready queue (popped or dropped).
func (b *Broker) unqueueLocked(e *entry) {
	if !e.queued {
		return
	}
	e.queued = false
	if n := b.readyKeys[e.qkey] - 1; n > 0 {
		b.readyKeys[e.qkey] = n
	} else {
		delete(b.readyKeys, e.qkey)
	}
}

// requeueLocked counts e under its current requirement key again when a
// change of the task (a PATCH) changed it while it waits.
func (b *Broker) requeueLocked(e *entry) {
	if k := reqKey(e.t.Dispatch.RequiredCapabilities); e.queued && k != e.qkey {
		b.unqueueLocked(e)
		e.queued, e.qkey = true, k
		b.readyKeys[k]++
	}
}

// readyHeap is the queue of pending tasks due now, in the broker's queue
// order (projection.QueueLess: priority, then age). The keys never change
// while a task waits (priority and created_at are set at creation).
type readyHeap []*entry

func (h readyHeap) Len() int           { return len(h) }
func (h readyHeap) Less(i, j int) bool { return projection.QueueLess(&h[i].t, &h[j].t) < 0 }
func (h readyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *readyHeap) Push(x any)        { *h = append(*h, x.(*entry)) }
func (h *readyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}
