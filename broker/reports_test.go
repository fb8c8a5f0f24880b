package broker

import (
	"errors"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestRepeatedReportAfterRetry: a failure sent again after the broker
// retried the task is answered as the first was (replayed, nothing
// recorded), whether the task waits in the queue or runs on another
// worker; another worker's identical failure is its own; a worker handed
// the task again reports on the new attempt.
func TestRepeatedReportAfterRetry(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	task := h.create("flaky", 0)
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	if _, err := h.b.Drain(h.ctx, "w1", "ops"); err != nil {
		t.Fatal(err)
	}
	fail := fsm.DispatchReportBody{Error: "flaked"}
	if _, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fail); err != nil || replayed {
		t.Fatalf("first failure: %v %v", replayed, err)
	}
	// Waiting in the queue (w1 drained): the repeat is answered, not refused.
	queued := h.waitTask(task.ID, "retried", func(t *fsm.Task) bool { return t.Dispatch.RetryCount == 1 && t.State == fsm.StatePending })
	got, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fail)
	if err != nil || !replayed || got.Version != queued.Version {
		t.Fatalf("repeated failure while queued: v%d (was v%d) replayed=%v %v", got.Version, queued.Version, replayed, err)
	}
	// Running on w2: still the first answer; not the same body: refused.
	h.register("w2", 1)
	onW2 := h.waitTask(task.ID, "assigned to w2", assignedTo("w2"))
	if got, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fail); err != nil || !replayed || got.Version != onW2.Version {
		t.Fatalf("repeated failure while on w2: replayed=%v %v", replayed, err)
	}
	if _, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "other"}); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("a different failure from w1: %v", err)
	}
	// w2's identical failure is w2's own; the retry goes to w1 (w2 drained).
	if _, err := h.b.Drain(h.ctx, "w2", "ops"); err != nil {
		t.Fatal(err)
	}
	h.register("w1", 1)
	if _, replayed, err := h.b.Report(h.ctx, task.ID, "w2", fsm.DispatchFailed, fail); err != nil || replayed {
		t.Fatalf("w2's failure: %v %v", replayed, err)
	}
	// Handed to w1 again: its identical failure is the new attempt's.
	h.waitTask(task.ID, "assigned to w1 again", func(t *fsm.Task) bool { return t.Dispatch.RetryCount == 2 && t.Dispatch.AssignedAgent == "w1" })
	if _, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fail); err != nil || replayed {
		t.Fatalf("a failure of the new attempt: %v %v", replayed, err)
	}
	h.waitTask(task.ID, "retried", func(t *fsm.Task) bool { return t.Dispatch.RetryCount == 3 })
}
