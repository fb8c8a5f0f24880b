package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

// toolSlots bounds the tool calls that run at once
// (Options.MaxConcurrentTools). Waiters take the slots in the order they
// came (FIFO). A waiter may give a start function, which runs once the slot
// is its own: on the waiter's goroutine when a slot is free, otherwise on
// the goroutine that frees one, before it hands the slot over. A queued
// call thus starts as soon as a slot frees, not once its goroutine is
// scheduled (on a busy agent, a slot's cycle spends about a millisecond on
// that wait).
type toolSlots struct {
	mu    sync.Mutex
	max   int
	used  int           // slots held, including those being handed over
	queue []*slotWaiter // in arrival order
}

// slotWaiter is one goroutine waiting in toolSlots' queue.
type slotWaiter struct {
	ctx     context.Context
	start   slotStarter   // nil: none
	ready   chan struct{} // closed once the slot is the waiter's and start returned
	granted bool          // under mu: the slot is the waiter's (start may be running)
}

// slotStarter is what runs once a waiter's slot is taken (startedCall).
type slotStarter interface{ startCall() }

func newToolSlots(n int) *toolSlots { return &toolSlots{max: n} }

// acquire takes a slot, or returns ctx's error when ctx ends first.
func (s *toolSlots) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.used < s.max { // without a waiter: the common case allocates nothing
		s.used++
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	return s.acquireStart(&slotWaiter{ctx: ctx})
}

// acquireStart takes a slot for w and runs w.start (if any) once it is
// taken, on whichever goroutine hands it over. It returns w.ctx's error,
// with no slot taken and start not run, when the context ends while w
// queues; a slot handed over as it ends is taken (start ran), and the
// caller frees it as any other. start must not panic and should not block
// for long: the goroutine that frees a slot runs it.
func (s *toolSlots) acquireStart(w *slotWaiter) error {
	s.mu.Lock()
	if s.used < s.max { // then nobody queues: release hands a slot over while someone does
		s.used++
		s.mu.Unlock()
		if w.start != nil {
			w.start.startCall()
		}
		return nil
	}
	ctx := w.ctx
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return err
	}
	w.ready = make(chan struct{})
	s.queue = append(s.queue, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.granted {
		s.mu.Unlock()
		<-w.ready // the freeing goroutine is running start
		return nil
	}
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	return ctx.Err()
}

// release frees a slot: it hands it to the first waiter whose context has
// not ended, after running the waiter's start function.
func (s *toolSlots) release() {
	s.mu.Lock()
	for len(s.queue) > 0 {
		w := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if w.ctx.Err() != nil {
			continue // it returns ctx's error: it is out of the queue and not granted
		}
		w.granted = true
		s.mu.Unlock()
		defer close(w.ready)
		if w.start != nil {
			w.start.startCall()
		}
		return
	}
	if len(s.queue) == 0 {
		s.queue = nil // let a long queue's array go
	}
	s.used--
	s.mu.Unlock()
}

// inUse returns the number of slots held.
func (s *toolSlots) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// startedCall is a call of a tools.Starter started once its slot is
// taken: on the goroutine that took the slot or on the one that freed it.
// The fields below w are written before the slot is handed over and read
// after.
type startedCall struct {
	w    slotWaiter
	a    *Agent
	tool tools.Starter
	call tools.Call

	ctx    context.Context // the call's, with the per-call timeout from its start
	cancel context.CancelFunc
	begin  time.Time
	wait   func() (tools.Result, error) // nil: Start declined (or panicked)
	err    error                        // Start panicked
}

func (s *startedCall) startCall() {
	s.ctx, s.cancel = context.WithTimeout(s.w.ctx, s.a.opts.ToolTimeout)
	s.begin = s.a.opts.Now()
	defer func() {
		if p := recover(); p != nil {
			s.wait, s.err = nil, fmt.Errorf("tool %s panicked: %v", s.tool.Name(), p)
		}
	}()
	s.wait = s.tool.Start(s.ctx, s.call)
}

// await returns the started call's outcome.
func (s *startedCall) await(name string) (out tools.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = tools.Result{}, fmt.Errorf("tool %s panicked: %v", name, p)
		}
	}()
	return s.wait()
}

// callSlot takes a tool slot for call of tool, runs the call with the
// per-call timeout, frees the slot, and says how long the call took; ok is
// false, and nothing ran, when ctx ended while the call queued for the
// slot. The call of a tools.Starter starts on the goroutine that hands the
// slot over (toolSlots); any other runs as callTool runs it.
func (a *Agent) callSlot(ctx context.Context, tool tools.Tool, call tools.Call) (out tools.Result, err error, dur time.Duration, ok bool) {
	st, _ := tool.(tools.Starter)
	if st == nil {
		if a.toolSlots.acquire(ctx) != nil {
			return tools.Result{}, nil, 0, false
		}
		out, err, dur = a.callHeld(ctx, tool, call)
		return out, err, dur, true
	}
	s := &startedCall{w: slotWaiter{ctx: ctx}, a: a, tool: st, call: call}
	s.w.start = s
	if a.toolSlots.acquireStart(&s.w) != nil {
		return tools.Result{}, nil, 0, false
	}
	defer s.cancel()
	switch {
	case s.err != nil:
		out, err = tools.Result{}, s.err
	case s.wait == nil: // Start declined: the call runs as any tool's
		s.cancel()
		out, err, dur = a.callHeld(ctx, tool, call)
		return out, err, dur, true
	default:
		out, err = s.await(tool.Name())
		if err != nil && errors.Is(s.ctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("tool %s timed out after %s", tool.Name(), a.opts.ToolTimeout)
		}
	}
	dur = a.opts.Now().Sub(s.begin)
	a.toolSlots.release()
	return out, err, dur, true
}
