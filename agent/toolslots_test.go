package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

// TestToolSlotsFIFO: queued waiters take the slot in arrival order, each
// start running on the goroutine that frees the slot, before release
// returns; Stats' count stays right.
func TestToolSlotsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newToolSlots(1)
		if err := s.acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		var order []int
		got := make(chan int, 5)
		for i := range 5 {
			go func() {
				if err := s.acquireStart(&slotWaiter{ctx: t.Context(), start: startFunc(func() { order = append(order, i) })}); err != nil {
					t.Error(err)
				}
				got <- i
			}()
			synctest.Wait() // queued before the next one comes
		}
		for i := range 5 {
			s.release()
			if len(order) != i+1 || order[i] != i {
				t.Fatalf("after release %d: started %v, want 0..%d in order", i, order, i)
			}
			if n := <-got; n != i {
				t.Fatalf("waiter %d took the slot, want %d", n, i)
			}
			if n := s.inUse(); n != 1 {
				t.Fatalf("in use %d, want 1", n)
			}
		}
		s.release()
		if n := s.inUse(); n != 0 {
			t.Fatalf("in use %d after the last release, want 0", n)
		}
	})
}

// TestToolSlotsCancelledNeverStarts: a queued waiter whose context ends
// leaves the queue without its start running, whether it notices first or
// the goroutine freeing a slot does.
func TestToolSlotsCancelledNeverStarts(t *testing.T) {
	for _, noticed := range []bool{true, false} {
		t.Run(fmt.Sprintf("noticed=%v", noticed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newToolSlots(1)
				_ = s.acquire(t.Context())
				ctx, cancel := context.WithCancel(t.Context())
				started := map[string]bool{}
				errs := make(chan error, 2)
				for _, name := range []string{"cancelled", "next"} {
					c := t.Context()
					if name == "cancelled" {
						c = ctx
					}
					go func() { errs <- s.acquireStart(&slotWaiter{ctx: c, start: startFunc(func() { started[name] = true })}) }()
					synctest.Wait()
				}
				cancel()
				if noticed {
					if err := <-errs; !errors.Is(err, context.Canceled) {
						t.Fatalf("cancelled waiter: %v", err)
					}
				}
				s.release()
				if started["cancelled"] || !started["next"] {
					t.Fatalf("started %v, want only next", started)
				}
				for range 1 + btoi(!noticed) {
					<-errs
				}
				s.release()
				if n := s.inUse(); n != 0 {
					t.Fatalf("in use %d, want 0", n)
				}
			})
		})
	}
}

// startFunc is a slotStarter that runs itself.
type startFunc func()

func (f startFunc) startCall() { f() }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// starterTool is a tools.Starter whose Start and wait do what the test
// says.
type starterTool struct {
	start func(ctx context.Context) func() (tools.Result, error)
}

func (*starterTool) Name() string                { return "starter" }
func (*starterTool) Description() string         { return "" }
func (*starterTool) Parameters() json.RawMessage { return nil }
func (*starterTool) Call(context.Context, tools.Call) (string, error) {
	return "called", nil
}
func (s *starterTool) Start(ctx context.Context, _ tools.Call) func() (tools.Result, error) {
	return s.start(ctx)
}

// slotAgent is an agent with only what callSlot uses.
func slotAgent(t *testing.T, n int) *Agent {
	a := &Agent{opts: Options{ToolTimeout: time.Minute, Now: time.Now}, toolSlots: newToolSlots(n), toolIdle: make(chan *toolCallRun)}
	a.runCtx, a.cancelRun = context.WithCancel(t.Context())
	t.Cleanup(a.cancelRun)
	return a
}

// TestCallSlotTimeoutFromStart: a Starter's per-call timeout counts from
// when its call starts, not from when it queued; the wait that ignores
// nothing returns at the deadline, with the agent's timeout error.
func TestCallSlotTimeoutFromStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := slotAgent(t, 1)
		_ = a.toolSlots.acquire(t.Context())
		var startedAt time.Time
		tool := &starterTool{start: func(ctx context.Context) func() (tools.Result, error) {
			startedAt = time.Now()
			if d, _ := ctx.Deadline(); !d.Equal(startedAt.Add(time.Minute)) {
				t.Errorf("deadline %v, want a minute after the start %v", d, startedAt)
			}
			return func() (tools.Result, error) { <-ctx.Done(); return tools.Result{}, ctx.Err() }
		}}
		type outcome struct {
			err error
			dur time.Duration
		}
		res := make(chan outcome)
		go func() {
			_, err, dur, ok := a.callSlot(t.Context(), tool, tools.Call{})
			if !ok {
				t.Error("the call did not take a slot")
			}
			res <- outcome{err, dur}
		}()
		synctest.Wait()
		time.Sleep(2 * time.Minute) // queued longer than the timeout (fake time)
		a.toolSlots.release()
		o := <-res
		if o.err == nil || !strings.Contains(o.err.Error(), "timed out after 1m0s") || o.dur != time.Minute {
			t.Fatalf("err %v after %v, want a timeout after 1m", o.err, o.dur)
		}
		if n := a.toolSlots.inUse(); n != 0 {
			t.Fatalf("in use %d, want 0", n)
		}
	})
}

// TestCallSlotNoLeak: whatever a Starter does (panics in Start or in its
// wait, an error, a declined start, a cancellation once started), the call
// ends with its slot freed.
func TestCallSlotNoLeak(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(ctx context.Context) func() (tools.Result, error)
		want  string
	}{
		{"start panics", func(context.Context) func() (tools.Result, error) { panic("boom") }, "tool starter panicked: boom"},
		{"wait panics", func(context.Context) func() (tools.Result, error) {
			return func() (tools.Result, error) { panic("bang") }
		}, "tool starter panicked: bang"},
		{"error", func(context.Context) func() (tools.Result, error) {
			return func() (tools.Result, error) { return tools.Result{}, errors.New("no") }
		}, "no"},
		{"declined", func(context.Context) func() (tools.Result, error) { return nil }, ""}, // Call runs: "called"
		{"cancelled", func(ctx context.Context) func() (tools.Result, error) {
			return func() (tools.Result, error) { <-ctx.Done(); return tools.Result{}, ctx.Err() }
		}, context.Canceled.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := slotAgent(t, 2)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				tool := &starterTool{start: tc.start}
				var (
					wg     sync.WaitGroup
					queued atomic.Int32 // calls cancelled while they queued
				)
				for range 3 { // one queues
					wg.Go(func() {
						out, err, _, ok := a.callSlot(ctx, tool, tools.Call{})
						switch {
						case !ok:
							queued.Add(1)
						case tc.want == "" && (err != nil || out.Text != "called"):
							t.Errorf("declined start: %q, %v; want Call's answer", out.Text, err)
						case tc.want != "" && (err == nil || err.Error() != tc.want):
							t.Errorf("err %v, want %q", err, tc.want)
						}
					})
				}
				synctest.Wait()
				cancel()
				wg.Wait()
				if n, want := queued.Load(), int32(btoi(tc.name == "cancelled")); n != want {
					t.Errorf("%d calls cancelled while they queued, want %d", n, want)
				}
				if n := a.toolSlots.inUse(); n != 0 {
					t.Fatalf("in use %d, want 0", n)
				}
				a.cancelRun()
			})
		})
	}
}

// BenchmarkToolSlots: 128 goroutines take and free 16 slots, through the
// channel semaphore (the model calls') and through toolSlots with a start
// function, which the freeing goroutine runs.
func BenchmarkToolSlots(b *testing.B) {
	const slots, goroutines = 16, 128
	b.Run("channel", func(b *testing.B) {
		s := newSemaphore(slots)
		ctx := context.Background()
		b.SetParallelism(goroutines / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = s.acquire(ctx)
				s.release()
			}
		})
	})
	b.Run("toolSlots", func(b *testing.B) {
		s := newToolSlots(slots)
		ctx := context.Background()
		b.SetParallelism(goroutines / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			w := &slotWaiter{start: startFunc(func() {})}
			for pb.Next() {
				*w = slotWaiter{ctx: ctx, start: w.start}
				_ = s.acquireStart(w)
				s.release()
			}
		})
	})
}
