package agent

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestSchedulerAdmitsAndWakes: one slot; a second task waits until the
// first releases its slot; a task woken by a timer (the machine's
// wait_until) runs at the time it names, by the scheduler's clock.
func TestSchedulerAdmitsAndWakes(t *testing.T) {
	var stages sync.WaitGroup
	ran := make(chan string, 8)
	release := make(chan struct{})
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newScheduler(1, context.Background(), func() time.Time { return now }, &stages, func(_ context.Context, id string) {
		ran <- id
		if id == "a" {
			<-release
		}
	})
	s.schedule("a", 0, "")
	if got := <-ran; got != "a" {
		t.Fatalf("ran %s first", got)
	}
	s.schedule("b", 0, "")
	if !s.queued("b") {
		t.Fatal("b is not waiting for the slot a holds")
	}
	close(release)
	s.release("a", false)
	if got := <-ran; got != "b" {
		t.Fatalf("ran %s, want b", got)
	}
	s.release("b", false)
	if active, queued := s.counts(); active != 0 || queued != 0 {
		t.Fatalf("active %d queued %d", active, queued)
	}

	s.wakeAt("c", 0, "", now.Add(-time.Second)) // already due: at once
	if got := <-ran; got != "c" {
		t.Fatalf("ran %s, want c", got)
	}
	s.release("c", false)
	s.close()
	s.schedule("d", 0, "") // closed: nothing new starts
	s.wakeAt("d", 0, "", now)
	stages.Wait()
	select {
	case id := <-ran:
		t.Fatalf("%s ran after close", id)
	default:
	}
}

// TestSchedulerStageContextAfterCancel: a stage goroutine keeps its
// stage context between stages, but never hands one that a cancel ended
// to the next stage: the task's stage cancelled by release runs with a
// done context, and its next stage, run again on the same goroutine
// (scheduled while the cancelled one still ran), with a live one; the
// agent's context still ends every stage's.
func TestSchedulerStageContextAfterCancel(t *testing.T) {
	var stages sync.WaitGroup
	base, stop := context.WithCancel(context.Background())
	defer stop()
	ctxs := make(chan context.Context, 8)
	proceed := make(chan struct{})
	s := newScheduler(1, base, time.Now, &stages, func(ctx context.Context, id string) {
		ctxs <- ctx
		<-ctx.Done() // every stage here waits for a cancel
		<-proceed
	})
	s.schedule("a", 0, "")
	first := <-ctxs
	s.release("a", true) // cancels the stage, gives the slot up
	<-first.Done()
	s.schedule("a", 0, "") // work again while the stage still runs: it runs again on its goroutine
	close(proceed)
	second := <-ctxs
	if err := second.Err(); err != nil {
		t.Fatalf("the next stage started with the cancelled stage's context: %v", err)
	}
	stop() // the agent stops its stages
	<-second.Done()
	s.close()
	stages.Wait()
}
