package projection

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestFlushedKeepsLaterChanges is the contract a checkpoint written
// without the fold's lock relies on: Flushed(seq) forgets only what the
// Pending taken at seq holds. A task changed after seq stays pending (and
// in memory, even once finished); a task finished by seq leaves memory;
// the byte counters follow.
func TestFlushedKeepsLaterChanges(t *testing.T) {
	s := NewSet(Options{SnapshotEvery: 2})
	sc := newScript()
	big := &fsm.TaskCreatedBody{TaskType: "general", InputText: strings.Repeat("x", 100<<10), Source: "cli"}
	a := mustApply(t, s, sc.ev("", big)).After.ID
	b := mustApply(t, s, sc.ev("", created("cli"))).After.ID
	mustApply(t, s, sc.ev(a, &fsm.TaskFailedBody{Error: "no", Reason: "cancelled"})) // a: finished, snapshot at version 2
	mustApply(t, s, sc.ev(b, &fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{Index: 0, Description: "reply", ActionType: fsm.ActionRespond}}}}))
	use := s.Bytes()
	if use.Tasks < 100<<10 || use.Dirty != use.Tasks || use.Snapshots < 100<<10 || use.Pending() != use.Dirty+use.Snapshots {
		t.Fatalf("before the checkpoint: %+v", use)
	}
	p, err := s.Pending()
	if err != nil || len(p.Tasks) != 2 || len(p.Snapshots) != 2 || p.Seq != 4 {
		t.Fatalf("pending: %d tasks, %d snapshots, seq %d, %v", len(p.Tasks), len(p.Snapshots), p.Seq, err)
	}
	// Folded while the checkpoint is written: b finishes, a fact changes.
	mustApply(t, s, sc.ev(b, &fsm.StepCompletedBody{StepIndex: 0, Result: "done"}))
	mustApply(t, s, sc.ev(MemoryStream, &MemoryWrittenBody{Path: "user.md", Content: "likes tea"}))

	evicted := s.Flushed(p.Seq)
	if strings.Join(evicted, ",") != a || s.Tasks().Has(a) {
		t.Fatalf("evicted %v: want only %s, finished and persisted", evicted, a)
	}
	if tb, _ := s.Tasks().Get(b); !tb.State.IsTerminal() || !s.Tasks().Has(b) {
		t.Fatal("b finished after the checkpoint's seq: it must stay in memory until written")
	}
	q, err := s.Pending()
	if err != nil || len(q.Tasks) != 1 || q.Tasks[0].Task.ID != b || len(q.Snapshots) != 0 || len(q.Facts) != 1 {
		t.Fatalf("still pending: %d tasks, %d snapshots, %d facts, %v", len(q.Tasks), len(q.Snapshots), len(q.Facts), err)
	}
	use = s.Bytes()
	if use.Tasks >= 100<<10 || use.Dirty != use.Tasks || use.Memory == 0 {
		t.Fatalf("after the checkpoint: %+v", use)
	}
	if got := s.Flushed(q.Seq); strings.Join(got, ",") != b {
		t.Fatalf("second flush evicted %v", got)
	}
	if use := s.Bytes(); use.Tasks != 0 || use.Dirty != 0 || use.Snapshots != 0 || use.Pending() != 0 {
		t.Fatalf("after both: %+v", use)
	}
	if f, e := s.Memory().Changes(); len(f)+len(e) != 0 {
		t.Fatal("memory changes not cleared")
	}
}

// TestCool: tasks that are not finished leave memory only once persisted,
// waiting ones first, keep their counts, and come back with RestoreTask.
func TestCool(t *testing.T) {
	s := NewSet(Options{})
	sc := newScript()
	big := &fsm.TaskCreatedBody{TaskType: "general", InputText: strings.Repeat("x", 100<<10), Source: "cli"}
	a := mustApply(t, s, sc.ev("", big)).After                           // reasoning, large
	b := mustApply(t, s, sc.ev("", created("cli"))).After                // reasoning, small
	mustApply(t, s, sc.ev(b.ID, &fsm.TaskSuspendedBody{Reason: "user"})) // b: suspended
	if got := s.Cool(0); len(got) != 0 {
		t.Fatalf("cooled %v: tasks with changes not yet persisted must stay", got)
	}
	p, _ := s.Pending()
	s.Flushed(p.Seq)
	before := s.Bytes().Tasks
	if got := s.Cool(before - 1); strings.Join(got, ",") != b.ID {
		t.Fatalf("cooled %v: want the suspended task first, and no more than needed", got)
	}
	if got := s.Cool(0); strings.Join(got, ",") != a.ID {
		t.Fatalf("cooled %v, want %s", got, a.ID)
	}
	if s.Bytes().Tasks >= 4<<10 || s.Tasks().Has(a.ID) || !s.NeedsTask(a.ID, 2) || s.Tasks().ActiveCount() != 2 ||
		s.Tasks().Count(fsm.StateSuspended) != 1 || len(s.Tasks().ListAll()) != 0 {
		t.Fatalf("after Cool: %+v, active %d", s.Bytes(), s.Tasks().ActiveCount())
	}
	if _, err := s.Tasks().Get(a.ID); err == nil {
		t.Fatal("Get found a stub")
	}
	if cold := s.Tasks().Cold(fsm.StateReasoning); len(cold) != 1 || cold[0].ID != a.ID || cold[0].Version != 1 {
		t.Fatalf("Cold: %+v", cold)
	}
	fail := sc.ev(a.ID, &fsm.TaskFailedBody{Error: "x", Reason: "cancelled"})
	if ch := s.Apply(fail); ch.Err == nil {
		t.Fatal("folded into a stub")
	}
	s.RestoreTask(a, nil, 0)
	mustApply(t, s, fail)
	if s.Tasks().ActiveCount() != 1 || s.Bytes().Tasks < 100<<10 {
		t.Fatalf("after restore: active %d, %+v", s.Tasks().ActiveCount(), s.Bytes())
	}
}

// TestFlushedEvictsWhatItVisited: Flushed looks only at the tasks it
// cleans and those restored since the last call, and still evicts exactly
// what a look at every task would: each finished, clean task in memory
// (restored ones too, and a restored one folded into again only once
// clean), no task twice, nothing else. Random folds, restores, checkpoints
// taken before some later events, and cooling, checked after each call.
func TestFlushedEvictsWhatItVisited(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	s := NewSet(Options{})
	sc := newScript()
	var live []string                 // tasks created and not finished
	finished := map[string]fsm.Task{} // finished tasks, their last state
	for round := range 400 {
		switch r := rng.IntN(10); {
		case r < 4 || len(live) == 0:
			live = append(live, mustApply(t, s, sc.ev("", created("cli"))).After.ID)
		case r < 7:
			i := rng.IntN(len(live))
			id := live[i]
			if !s.Tasks().Has(id) {
				break // cooled
			}
			after := mustApply(t, s, sc.ev(id, &fsm.TaskFailedBody{Error: "no", Reason: "cancelled"})).After
			finished[id] = after
			live = append(live[:i], live[i+1:]...)
		case r < 8:
			for id, task := range finished {
				if !s.Tasks().Has(id) {
					s.RestoreTask(task, nil, 0) // a late fact is about to come, or not
				}
				break
			}
		default:
			p, err := s.Pending()
			if err != nil {
				t.Fatal(err)
			}
			if rng.IntN(2) == 0 { // events folded while the checkpoint is written
				live = append(live, mustApply(t, s, sc.ev("", created("cli"))).After.ID)
			}
			want := map[string]bool{}
			for id, sl := range s.tasks.slots {
				if sl.task.State.IsTerminal() && !sl.cold && (!sl.dirty || sl.task.Seq <= p.Seq) {
					want[id] = true
				}
			}
			got := s.Flushed(p.Seq)
			if len(got) != len(want) {
				t.Fatalf("round %d: evicted %d tasks, want %d", round, len(got), len(want))
			}
			for _, id := range got {
				if !want[id] || s.Tasks().Has(id) {
					t.Fatalf("round %d: evicted %s, not expected or still held", round, id)
				}
			}
			if rng.IntN(3) == 0 {
				s.Cool(0)
			}
		}
	}
}

// TestPendingUnlisted: a task is Unlisted in a Pending only while no
// earlier Pending held it unfinished and it was not restored, so that a
// checkpoint skips removing an active listing only where none was ever
// written, even when that Pending's write failed.
func TestPendingUnlisted(t *testing.T) {
	s := NewSet(Options{})
	sc := newScript()
	quick := mustApply(t, s, sc.ev("", created("cli"))).After.ID // finished before any checkpoint
	slow := mustApply(t, s, sc.ev("", created("cli"))).After.ID  // unfinished at the first
	mustApply(t, s, sc.ev(quick, &fsm.TaskFailedBody{Error: "no", Reason: "cancelled"}))
	unlisted := func(p Pending) map[string]bool {
		m := map[string]bool{}
		for _, r := range p.Tasks {
			m[r.Task.ID] = r.Unlisted
		}
		return m
	}
	p, _ := s.Pending()
	if u := unlisted(p); !u[quick] || !u[slow] {
		t.Fatalf("first pending: unlisted %v, want both", u)
	}
	// The first write is lost (no Flushed): slow may be listed anyway.
	mustApply(t, s, sc.ev(slow, &fsm.TaskFailedBody{Error: "no", Reason: "cancelled"}))
	p, _ = s.Pending()
	if u := unlisted(p); !u[quick] || u[slow] {
		t.Fatalf("second pending: unlisted %v, want only %s", u, quick)
	}
	s.Flushed(p.Seq)
	// Restored from persisted state: listed as far as the Set knows.
	r := NewSet(Options{})
	task := mustApply(t, r, sc.ev("", created("cli"))).After
	r2 := NewSet(Options{})
	r2.RestoreTask(task, nil, 0)
	mustApply(t, r2, sc.ev(task.ID, &fsm.TaskFailedBody{Error: "no", Reason: "cancelled"}))
	p, _ = r2.Pending()
	if len(p.Tasks) != 1 || p.Tasks[0].Unlisted {
		t.Fatalf("restored task: %+v", p.Tasks)
	}
}

// TestPendingReusing: a Pending written into the arrays of an earlier one
// says what a fresh one says, and Reset leaves nothing of what it held
// reachable through the arrays it keeps.
func TestPendingReusing(t *testing.T) {
	s := NewSet(Options{})
	sc := newScript()
	var ids []string
	var reused Pending
	for round := range 6 {
		for range 5 - round%3 {
			ids = append(ids, mustApply(t, s, sc.ev("", created("cli"))).After.ID)
		}
		mustApply(t, s, sc.ev(ids[round], &fsm.TaskFailedBody{Error: "no", Reason: "cancelled"}))
		if err := s.PendingReusing(&reused); err != nil {
			t.Fatal(err)
		}
		fresh, err := s.Pending()
		// The first Pending marked what it held unfinished as listed
		// (TestPendingUnlisted): the only difference allowed.
		for i := range fresh.Tasks {
			if i < len(reused.Tasks) && reused.Tasks[i].Unlisted && !reused.Tasks[i].Task.IsTerminal() {
				fresh.Tasks[i].Unlisted = true
			}
		}
		if err != nil || !reflect.DeepEqual(fresh, reused) {
			t.Fatalf("round %d: reused\n%+v\nfresh\n%+v\n%v", round, reused, fresh, err)
		}
		s.Flushed(reused.Seq)
		reused.Reset()
		if len(reused.Tasks) != 0 || cap(reused.Tasks) == 0 || reused.Seq != 0 || reused.Stats != nil {
			t.Fatalf("round %d: reset left %+v", round, reused)
		}
		for i, r := range reused.Tasks[:cap(reused.Tasks)] {
			if !reflect.DeepEqual(r, TaskRecord{}) {
				t.Fatalf("round %d: record %d still held after Reset", round, i)
			}
		}
		for i, p := range reused.progs[:cap(reused.progs)] {
			if !reflect.DeepEqual(p, Progress{}) {
				t.Fatalf("round %d: progress %d still held after Reset", round, i)
			}
		}
	}
}

// TestSlotEstimateFollowsThePlan folds a task through two plans, a step of
// each finishing (a copy of the plan each time), and checks after every
// event that each slot's estimate, which keeps its plan's, is what
// estimating the slot from scratch gives.
func TestSlotEstimateFollowsThePlan(t *testing.T) {
	s := NewSet(Options{})
	sc := newScript()
	id := mustApply(t, s, sc.ev("", created("cli"))).After.ID
	second := &fsm.ReasonDoneBody{Plan: fsm.Plan{Goal: "reply", Steps: []fsm.PlanStep{
		{Index: 0, Description: "reply", ActionType: fsm.ActionRespond, ActionParams: map[string]string{"text": strings.Repeat("t", 300)}}}}}
	evs := []fsm.Event{
		sc.ev(id, toolPlan()),
		sc.ev(id, &fsm.ToolCallStartedBody{StepIndex: 0, Tool: "web_search", IdempotencyKey: "k1"}),
		sc.ev(id, &fsm.ToolCallResultBody{StepIndex: 0, Tool: "web_search", Result: "3 papers"}),
		sc.ev(id, &fsm.StepCompletedBody{StepIndex: 1, Result: "here"}),
		sc.ev(id, second),
		sc.ev(id, &fsm.StepCompletedBody{StepIndex: 0, Result: "done"}),
	}
	plans := map[*fsm.Plan]bool{}
	for _, ev := range evs {
		mustApply(t, s, ev)
		sl := s.tasks.find(id)
		plans[sl.task.Context.Plan] = true
		want := sizeSlot + TaskBytes(&sl.task) + progressBytes(&sl.progress)
		if sl.bytes != want || s.Bytes().Tasks != want {
			t.Fatalf("after %s: slot estimate %d, Set's %d; from scratch %d", ev.Type, sl.bytes, s.Bytes().Tasks, want)
		}
	}
	if len(plans) < 4 {
		t.Fatalf("the task held %d plans; want the two and their copies", len(plans))
	}
}
