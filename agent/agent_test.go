package agent

import (
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
