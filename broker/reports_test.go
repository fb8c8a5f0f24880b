package broker

import (
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestRepeatedReportAfterRetry: a failure sent again after the broker
// retried the task is answered as the first was (replayed, nothing
// recorded), whether the task waits in the queue or was handed to the
// same worker again; a failure after the worker reported on the new
// attempt is that attempt's own.
func TestRepeatedReportAfterRetry(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	task := h.create("flaky", 0)
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	fail := fsm.DispatchReportBody{Error: "flaked"}
	if _, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fail); err != nil || replayed {
		t.Fatalf("first failure: %v %v", replayed, err)
	}
	// Handed to w1 again: the same failure again is the first one.
	again := h.waitTask(task.ID, "retried and assigned", func(t *fsm.Task) bool { return t.Dispatch.RetryCount == 1 && t.State == fsm.StateAssigned })
	got, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fail)
	if err != nil || !replayed || got.Version != again.Version {
		t.Fatalf("repeated failure on the new attempt: v%d (was v%d) replayed=%v %v", got.Version, again.Version, replayed, err)
	}
	// Another error is not a repeat: it fails the new attempt.
	if _, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "other"}); err != nil || replayed {
		t.Fatalf("a new failure: %v %v", replayed, err)
	}
	// Waiting in the queue (w1 drained): the repeat is answered, not refused.
	if _, err := h.b.Drain(h.ctx, "w1", "ops"); err != nil {
		t.Fatal(err)
	}
	queued := h.waitTask(task.ID, "retried", func(t *fsm.Task) bool { return t.Dispatch.RetryCount == 2 && t.State == fsm.StatePending })
	got, replayed, err = h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "other"})
	if err != nil || !replayed || got.Version != queued.Version {
		t.Fatalf("repeated failure while queued: replayed=%v %v", replayed, err)
	}
	// A worker that reported on the new attempt reports on it.
	h.register("w1", 1)
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	if _, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchProgress, fsm.DispatchReportBody{Message: "again"}); err != nil {
		t.Fatal(err)
	}
	if _, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "other"}); err != nil || replayed {
		t.Fatalf("a failure of the new attempt: %v %v", replayed, err)
	}
	h.waitTask(task.ID, "retried", func(t *fsm.Task) bool { return t.Dispatch.RetryCount == 3 })
}
