// Package watermark is a sequence number that only moves forward, and the
// wait for it to reach a point: "the fold has folded seq", "the agent has
// dispatched seq", "the metrics have observed seq". Waiters block on a
// channel closed at each advance, so none polls and none misses one.
package watermark

import (
	"context"
	"sync"
)

// Mark is a sequence number that only moves forward. The zero Mark is at 0
// and ready to use. It is safe for concurrent use.
type Mark struct {
	mu  sync.Mutex
	seq uint64
	ch  chan struct{} // closed at the next advance, if anyone waits
}

// Advance moves the mark to seq, if seq is past it, and wakes the waiters.
func (m *Mark) Advance(seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if seq <= m.seq {
		return
	}
	m.seq = seq
	if m.ch != nil {
		close(m.ch)
		m.ch = nil
	}
}

// Seq returns where the mark is.
func (m *Mark) Seq() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seq
}

// Wait blocks until the mark reaches seq, or ctx ends.
func (m *Mark) Wait(ctx context.Context, seq uint64) error {
	for {
		m.mu.Lock()
		if m.seq >= seq {
			m.mu.Unlock()
			return nil
		}
		if m.ch == nil {
			m.ch = make(chan struct{})
		}
		ch := m.ch
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
