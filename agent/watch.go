package agent

import (
	"context"
	"sync"

	"github.com/pegasus-engine/pegasus/internal/watermark"
)

// watchers is who waits on the fold, with its own lock: the waiters of
// WaitUntil (woken after every event of their task), those of
// WaitForTask (woken once, when their task is done), the OnNotify
// listeners, and the waiters for the hook to reach a sequence (Submit and
// the commands return once what they appended is folded and dispatched).
type watchers struct {
	mu        sync.Mutex
	waiters   map[string]chan struct{}
	finishing map[string]*doneWait
	listeners map[int]func(Notification)
	nextL     int
	hooked    watermark.Mark // the last sequence the hook has dispatched
}

func newWatchers() *watchers {
	return &watchers{waiters: map[string]chan struct{}{}, finishing: map[string]*doneWait{},
		listeners: map[int]func(Notification){}}
}

// doneWait is the waiters for one task to be done: ch is closed when it
// is, n counts the waiters still registered.
type doneWait struct {
	ch chan struct{}
	n  int
}

// signal wakes the waiters of task id, after an event that left it done
// (see Done) or not.
func (w *watchers) signal(id string, done bool) {
	w.mu.Lock()
	if ch, ok := w.waiters[id]; ok {
		close(ch)
		delete(w.waiters, id)
	}
	if dw, ok := w.finishing[id]; ok && done {
		close(dw.ch)
		delete(w.finishing, id)
	}
	w.mu.Unlock()
}

// whenDone registers a waiter for task id to be done: the channel of the
// result is closed after the event that leaves it done. The caller calls
// leave when it stops waiting.
func (w *watchers) whenDone(id string) *doneWait {
	w.mu.Lock()
	defer w.mu.Unlock()
	dw, ok := w.finishing[id]
	if !ok {
		dw = &doneWait{ch: make(chan struct{})}
		w.finishing[id] = dw
	}
	dw.n++
	return dw
}

// leave unregisters a waiter of whenDone: the last one to leave a task
// that is not done removes its record.
func (w *watchers) leave(id string, dw *doneWait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if dw.n--; dw.n == 0 && w.finishing[id] == dw {
		delete(w.finishing, id)
	}
}

// changed returns a channel closed after the next event of task id.
func (w *watchers) changed(id string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.waiters[id]
	if !ok {
		ch = make(chan struct{})
		w.waiters[id] = ch
	}
	return ch
}

// markHooked records that the hook has dispatched seq.
func (w *watchers) markHooked(seq uint64) { w.hooked.Advance(seq) }

// waitHooked blocks until the hook has dispatched seq: the event is folded
// and whatever it made due is scheduled (a new task is running or queued).
func (w *watchers) waitHooked(ctx context.Context, seq uint64) error {
	return w.hooked.Wait(ctx, seq)
}

// listen registers fn for every notification and returns its remover.
func (w *watchers) listen(fn func(Notification)) (unregister func()) {
	w.mu.Lock()
	id := w.nextL
	w.nextL++
	w.listeners[id] = fn
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.listeners, id)
		w.mu.Unlock()
	}
}

// notify calls every listener with n, outside the lock.
func (w *watchers) notify(n Notification) {
	w.mu.Lock()
	fns := make([]func(Notification), 0, len(w.listeners))
	for _, fn := range w.listeners {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(n)
	}
}
