package agent

import (
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// TestInputCarriesItsAdmission: with an admission slot free, a task's
// input and its TASK_CREATED are one commit, and that TASK_CREATED is the
// one admission writes for a task that waited (the same body, caused by
// and correlated to the input); with every slot taken, the input is
// committed alone and the task waits in idle for admission.
func TestInputCarriesItsAdmission(t *testing.T) {
	m := &blockingModel{calls: make(chan struct{}, 4), release: make(chan struct{})}
	h := newHarness(t, Options{Model: m, MaxActiveTasks: 1, DisableReflection: true})

	before := h.log.Stats().Commits
	first := h.submit("same input")
	if n := h.log.Stats().Commits - before; n != 1 {
		t.Fatalf("%d commits for the first input, want 1 (its admission with it)", n)
	}
	if got := types(h.events(first)); got != "MESSAGE_RECEIVED TASK_CREATED" {
		t.Fatalf("first task's events = %s", got)
	}
	if h.a.Queued(first) {
		t.Fatal("the first task is queued")
	}
	<-m.calls // its stage holds the slot

	before = h.log.Stats().Commits
	second := h.submit("same input")
	if n := h.log.Stats().Commits - before; n != 1 {
		t.Fatalf("%d commits for the second input, want 1", n)
	}
	if got := types(h.events(second)); got != "MESSAGE_RECEIVED" {
		t.Fatalf("second task's events = %s, want its input alone (no slot free)", got)
	}
	if task, err := h.a.Task(second); err != nil || task.State != fsm.StateIdle || !h.a.Queued(second) {
		t.Fatalf("second task: %s queued=%v (%v), want idle and queued", task.State, h.a.Queued(second), err)
	}
	close(m.release)
	h.wait(first)
	h.wait(second)

	created := func(id string) (in, tc eventlog.Event) {
		t.Helper()
		it := h.log.ReadStream(id, 0)
		defer it.Close()
		var evs []eventlog.Event
		for it.Next() && len(evs) < 2 {
			evs = append(evs, it.Event())
		}
		if len(evs) < 2 || evs[1].Type != string(fsm.TaskCreated) {
			t.Fatalf("task %s: no TASK_CREATED second", id)
		}
		return evs[0], evs[1]
	}
	in1, tc1 := created(first)
	in2, tc2 := created(second)
	if tc1.Seq != in1.Seq+1 {
		t.Fatalf("first task: TASK_CREATED at %d, input at %d", tc1.Seq, in1.Seq)
	}
	for _, p := range [][2]eventlog.Event{{in1, tc1}, {in2, tc2}} {
		if p[1].Causation != p[0].ID || p[1].Correlation != p[0].Correlation || p[0].Correlation != p[0].ID {
			t.Fatalf("TASK_CREATED %s: causation %s correlation %s, input %s", p[1].ID, p[1].Causation, p[1].Correlation, p[0].ID)
		}
	}
	if string(tc1.Body) != string(tc2.Body) || tc1.Schema != tc2.Schema {
		t.Fatalf("TASK_CREATED with the input differs from admission's:\n%q\n%q", tc1.Body, tc2.Body)
	}
	h.assertNoIssues()
	h.verify()
}
