package broker

import (
	"errors"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/usererr"
)

// TestReportError: a refused report is a *ReportError that says why in
// its fields, and in words for people without the package's prefix.
func TestReportError(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	task := h.create("crawl", 0)
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	report := func(agent string, kind fsm.EventType, rep fsm.DispatchReportBody) *ReportError {
		t.Helper()
		_, _, err := h.b.Report(h.ctx, task.ID, agent, kind, rep)
		var re *ReportError
		if !errors.As(err, &re) || !errors.Is(err, ErrNotAssigned) {
			t.Fatalf("%s's %s: %v, want a *ReportError", agent, kind, err)
		}
		return re
	}
	re := report("w2", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `1`})
	want := ReportError{TaskID: task.ID, Agent: "w2", State: "assigned", Assigned: "w1"}
	if *re != want {
		t.Errorf("another worker's report: %+v, want %+v", *re, want)
	}
	if msg, _ := usererr.Message(re); msg != `task "`+task.ID+`" is assigned to "w1", not to "w2": only the assigned worker reports` {
		t.Errorf("message %q", msg)
	}
	if _, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `1`}); err != nil {
		t.Fatal(err)
	}
	re = report("w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `2`})
	if msg, _ := usererr.Message(re); re.Assigned != "w1" || msg != `task "`+task.ID+`" is already completed: it takes no more reports` {
		t.Errorf("the assigned worker's second result: %+v, %q", *re, msg)
	}
}
