package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

func TestOfflineModelCompletesTasks(t *testing.T) {
	h := newHarness(t, Options{})
	notes := make(chan Notification, 16)
	h.a.OnNotify(func(n Notification) { notes <- n })

	id := h.submit("hello there")
	task := h.wait(id)
	if task.State != fsm.StateCompleted || !strings.Contains(task.Context.FinalResult, `I received "hello there"`) {
		t.Fatalf("task = %s %q", task.State, task.Context.FinalResult)
	}
	if got := types(h.events(id)); got != "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED" {
		t.Fatalf("events = %s", got)
	}

	id2 := h.submit("what time is it?")
	task2 := h.wait(id2)
	if path(task2) != "idle > reasoning > acting > reasoning > acting > completed" || !strings.HasPrefix(task2.Context.FinalResult, "The current time is ") {
		t.Fatalf("time task: %s, %q", path(task2), task2.Context.FinalResult)
	}
	for _, want := range []string{id, id2} {
		if n := <-notes; n.Type != NotifyCompleted || n.TaskID != want || n.Result == "" {
			t.Fatalf("notification = %+v, want completed for %s", n, want)
		}
	}
}

// TestWaitForTaskLeavesNoWaiter: WaitForTask registers for its task's
// end and unregisters however it returns (its context ended, the task
// done), so that no record stays behind; two waiters of one task are
// both woken by its end.
func TestWaitForTaskLeavesNoWaiter(t *testing.T) {
	h := newHarness(t, Options{DisableReflection: true})
	block := make(chan struct{})
	h.a.testLLMWait = func() { <-block } // the task reasons until released
	id := h.submit("hello there")
	waiters := func() int {
		h.a.watch.mu.Lock()
		defer h.a.watch.mu.Unlock()
		return len(h.a.watch.finishing)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	if _, err := h.a.WaitForTask(ctx, id); !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait whose context ended: %v", err)
	}
	if n := waiters(); n != 0 {
		t.Fatalf("%d waiters registered after a wait ended by its context", n)
	}
	got := make(chan fsm.Task, 2)
	for range 2 {
		go func() {
			task, err := h.a.WaitForTask(testCtx(t), id)
			if err != nil {
				t.Error(err)
			}
			got <- task
		}()
	}
	close(block)
	for range 2 {
		if task := <-got; !Done(&task) {
			t.Fatalf("a waiter returned the task %s, not done", task.State)
		}
	}
	if n := waiters(); n != 0 {
		t.Fatalf("%d waiters registered after the task ended", n)
	}
	if task := h.wait(id); task.State != fsm.StateCompleted {
		t.Fatalf("the task is %s", task.State)
	}
}
