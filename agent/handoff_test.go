package agent

import (
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// TestRespondStepSharesTheReasoningCommit: a reasoning outcome whose plan
// is one respond step is recorded with that step and TASK_COMPLETED in
// one commit (the step needs no I/O), each event caused as if the step
// had run on its own: a task is two commits, its input with its admission
// (a slot is free), and its outcome.
func TestRespondStepSharesTheReasoningCommit(t *testing.T) {
	fake := newFakeModel(t, func(*chatReq) reply { return text("hello") })
	h := newHarness(t, Options{Model: fake.client(t, nil), DisableReflection: true})
	before := h.log.Stats().Commits
	id := h.submit("say hello")
	if task := h.wait(id); task.Context.FinalResult != "hello" {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	if n := h.log.Stats().Commits - before; n != 2 {
		t.Fatalf("%d commits for one task, want 2", n)
	}
	evs := h.events(id)
	if got := types(evs); got != "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED" {
		t.Fatalf("events = %s", got)
	}
	if evs[2].Causation != evs[1].ID || evs[3].Causation != evs[1].ID || evs[4].Causation != evs[3].ID || evs[5].Causation != evs[3].ID {
		t.Fatalf("causation: %s %s %s %s", evs[2].Causation, evs[3].Causation, evs[4].Causation, evs[5].Causation)
	}
	h.assertNoIssues()
	h.verify()
}

// TestHandedOffSlotComesBackOnAConflict: with one slot, a task's last
// outcome gives the slot to the task waiting behind it before it commits.
// When that outcome is refused (a fact was appended to the task
// meanwhile, leaving the same work due), the task is dispatched again as
// folded: it waits for the slot, runs its reasoning again and completes,
// as does the task it gave the slot to, and no slot is left held.
func TestHandedOffSlotComesBackOnAConflict(t *testing.T) {
	m := &blockingModel{calls: make(chan struct{}, 8), release: make(chan struct{})}
	h := newHarness(t, Options{Model: m, MaxActiveTasks: 1, DisableReflection: true})
	first := h.submit("first")
	<-m.calls
	second := h.submit("second")
	if !h.a.Queued(second) {
		t.Fatal("the second task is not queued behind the first")
	}
	body, err := fsm.Encode(&fsm.TaskNotifyBody{Message: "a fact"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.log.Append(testCtx(t), first, eventlog.Any, eventlog.Event{Type: string(fsm.TaskNotify), Schema: fsm.SchemaVersion, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.WaitUntil(testCtx(t), first, func(t *fsm.Task) bool { return t.Version >= res.Version }); err != nil {
		t.Fatal(err)
	}
	close(m.release)
	for _, id := range []string{first, second} {
		if task := h.wait(id); task.State != fsm.StateCompleted {
			t.Fatalf("task %s = %s", id, task.State)
		}
	}
	if got := types(h.events(first)); got != "MESSAGE_RECEIVED TASK_CREATED TASK_NOTIFY MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED" {
		t.Fatalf("first task's events = %s", got)
	}
	if n := len(m.calls); n != 2 { // the first task's second call, the second task's
		t.Fatalf("%d more model calls, want 2", n)
	}
	if rt := h.a.Runtime(); rt.ActiveSlots != 0 || rt.Queued != 0 {
		t.Fatalf("runtime after both = %+v", rt)
	}
	h.assertNoIssues()
}

// TestAdmissionSharesTheCommitOfTheLastOutcome: with one slot, the task
// waiting behind a running one is started (TASK_CREATED) in the commit of
// the running task's outcome, right after its last event.
func TestAdmissionSharesTheCommitOfTheLastOutcome(t *testing.T) {
	m := &blockingModel{calls: make(chan struct{}, 8), release: make(chan struct{})}
	h := newHarness(t, Options{Model: m, MaxActiveTasks: 1, DisableReflection: true})
	first := h.submit("first")
	<-m.calls
	second := h.submit("second")
	before := h.log.Stats().Commits
	close(m.release)
	h.wait(first)
	h.wait(second)
	if n := h.log.Stats().Commits - before; n != 2 { // the first's outcome with the second's start; the second's outcome
		t.Fatalf("%d commits, want 2", n)
	}
	done, created := h.events(first), h.events(second)
	if last, start := done[len(done)-1], created[1]; last.Type != fsm.TaskCompleted || start.Type != fsm.TaskCreated || start.Seq != last.Seq+1 {
		t.Fatalf("%s at %d, then %s at %d", last.Type, last.Seq, start.Type, start.Seq)
	}
	if rt := h.a.Runtime(); rt.ActiveSlots != 0 || rt.Queued != 0 {
		t.Fatalf("runtime after both = %+v", rt)
	}
	h.assertNoIssues()
	h.verify()
}
