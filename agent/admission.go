package agent

import (
	"container/heap"
	"context"
	"slices"
)

// semaphore bounds concurrent model or tool calls. Waiters queue on the
// channel; a cancelled context stops the wait.
type semaphore chan struct{}

func newSemaphore(n int) semaphore { return make(semaphore, n) }

func (s semaphore) acquire(ctx context.Context) error {
	select {
	case s <- struct{}{}: // a free slot: without making ctx's done channel
		return nil
	default:
	}
	select {
	case s <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s semaphore) release() { <-s }

// waiting is a task waiting for an admission slot.
type waiting struct {
	id       string // the task id: a ULID, so id order is creation order
	priority int
	key      string // the task's concurrency key
	index    int
}

// admissionQueue orders the waiting tasks of one key by priority (lower
// value first), then age (older first): the spec's "lower = higher"
// priority with the broker's oldest-first tie break.
type admissionQueue []*waiting

func (q admissionQueue) Len() int { return len(q) }
func (q admissionQueue) Less(i, j int) bool {
	if q[i].priority != q[j].priority {
		return q[i].priority < q[j].priority
	}
	return q[i].id < q[j].id
}
func (q admissionQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *admissionQueue) Push(x any) {
	w := x.(*waiting)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *admissionQueue) Pop() any {
	old := *q
	n := len(old)
	w := old[n-1]
	old[n-1] = nil
	w.index = -1
	*q = old[:n-1]
	return w
}

// fairQueue holds the waiting tasks of every concurrency key: one
// admissionQueue per key, and the keys with tasks waiting in a ring taken
// in turn, so that a key with many tasks waiting cannot starve a key with
// few. Within a key, priority then age.
type fairQueue struct {
	byKey map[string]*admissionQueue
	ring  []string // the keys with tasks waiting, in turn order
	next  int      // the index in ring of the key whose turn is next
	n     int      // tasks waiting, all keys
}

func (f *fairQueue) Len() int { return f.n }

// ids returns the ids of the waiting tasks, in no particular order.
func (f *fairQueue) ids() []string {
	out := make([]string, 0, f.n)
	for _, q := range f.byKey {
		for _, w := range *q {
			out = append(out, w.id)
		}
	}
	return out
}

func (f *fairQueue) push(w *waiting) {
	if f.byKey == nil {
		f.byKey = map[string]*admissionQueue{}
	}
	q := f.byKey[w.key]
	if q == nil {
		q = &admissionQueue{}
		f.byKey[w.key] = q
		f.ring = append(f.ring, w.key)
	}
	heap.Push(q, w)
	f.n++
}

// pop takes the next waiting task whose key may run one more (may
// reports it): the first such key from the one whose turn it is, then
// that key's first task by priority and age. Nil when no key may.
func (f *fairQueue) pop(may func(key string) bool) *waiting {
	for i := range len(f.ring) {
		at := (f.next + i) % len(f.ring)
		key := f.ring[at]
		if !may(key) {
			continue
		}
		q := f.byKey[key]
		w := heap.Pop(q).(*waiting)
		f.n--
		f.next = at + 1
		if q.Len() == 0 {
			f.dropKey(at)
		}
		if f.next >= len(f.ring) {
			f.next = 0
		}
		return w
	}
	return nil
}

// dropKey removes the key at ring index at, whose queue is empty.
func (f *fairQueue) dropKey(at int) {
	delete(f.byKey, f.ring[at])
	f.ring = append(f.ring[:at], f.ring[at+1:]...)
	if f.next > at {
		f.next--
	}
}

func (f *fairQueue) remove(w *waiting) {
	q := f.byKey[w.key]
	if q == nil || w.index < 0 || w.index >= q.Len() || (*q)[w.index] != w {
		return
	}
	heap.Remove(q, w.index)
	f.n--
	if q.Len() == 0 {
		f.dropKey(slices.Index(f.ring, w.key))
		if f.next >= len(f.ring) {
			f.next = 0
		}
	}
}
