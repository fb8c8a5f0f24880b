package agent

import (
	"container/heap"
	"context"
)

// semaphore bounds concurrent model or tool calls. Waiters queue on the
// channel; a cancelled context stops the wait.
type semaphore chan struct{}

func newSemaphore(n int) semaphore { return make(semaphore, n) }

func (s semaphore) acquire(ctx context.Context) error {
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
	index    int
}

// admissionQueue orders waiting tasks by priority (lower value first), then
// age (older first): the spec's "lower = higher" priority with the broker's
// oldest-first tie break.
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

func (q *admissionQueue) push(w *waiting) { heap.Push(q, w) }
func (q *admissionQueue) pop() *waiting   { return heap.Pop(q).(*waiting) }
func (q *admissionQueue) remove(w *waiting) {
	if w.index >= 0 && w.index < len(*q) && (*q)[w.index] == w {
		heap.Remove(q, w.index)
	}
}
