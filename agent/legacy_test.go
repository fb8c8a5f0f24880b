package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

var v0 = fsm.MachineRef{Name: fsm.MachineName, Version: 0}

func (h *harness) submitV0(text string) string {
	h.t.Helper()
	id, err := h.a.SubmitInput(testCtx(h.t), Input{Text: text, Source: "test", Machine: v0})
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

// The built-in offline model runs a version 0 task to completion: each
// stage one recorded model call, the verdict completing it. Version 0 has
// no post-task reflection.
func TestOfflineModelRunsVersion0(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.submitV0("what time is it?")
	task := h.wait(id)
	if task.Machine != v0 || path(task) != "idle > perceiving > thinking > planning > acting > reflecting > completed" ||
		!strings.HasPrefix(task.Context.FinalResult, "The current time is ") {
		t.Fatalf("task %s: %s, %q", task.Machine, path(task), task.Context.FinalResult)
	}
	want := "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED PERCEIVE_DONE MODEL_CALLED THINK_DONE MODEL_CALLED PLAN_DONE " +
		"TOOL_CALL_STARTED TOOL_CALL_COMPLETED MODEL_CALLED REFLECT_DONE TASK_COMPLETED"
	if got := types(h.events(id)); got != want {
		t.Fatalf("events =\n%s\nwant\n%s", got, want)
	}

	id2 := h.submitV0("hello there")
	task2 := h.wait(id2)
	if !strings.Contains(task2.Context.FinalResult, `I received "hello there"`) || len(task2.Context.Reflections) != 1 {
		t.Fatalf("task = %s %q", path(task2), task2.Context.FinalResult)
	}
	if _, err := h.a.SubmitInput(testCtx(t), Input{Text: "x", Machine: fsm.MachineRef{Name: "pegasus.task", Version: 9}}); err == nil {
		t.Fatal("an unknown machine was accepted")
	}
	h.assertNoIssues()
}

// legacyScript answers the stages of a version 0 parent task and of its
// child: the parent plans a sub task, reflects "replan", plans a tool call,
// then completes; the child answers at once.
func legacyScript(r *chatReq) reply {
	system := *r.Messages[0].Content
	child := r.firstUser() == "child question"
	switch {
	case strings.Contains(system, "perception stage"):
		return text("perceived")
	case strings.Contains(system, "thinking stage"):
		return text("thought")
	case strings.Contains(system, "planning stage") && child:
		return text("child answer")
	case strings.Contains(system, "planning stage") && !strings.Contains(system, "Last reflection (replan)"):
		return calls(SubTaskTool, `{"input":"child question"}`)
	case strings.Contains(system, "planning stage"):
		return calls("current_time", `{}`)
	case strings.Contains(system, "reflection stage") && child:
		return calls(VerdictTool, `{"verdict":"complete","assessment":"child done"}`)
	case strings.Contains(system, "reflection stage") && !strings.Contains(system, "Last reflection"):
		return calls(VerdictTool, `{"verdict":"replan","assessment":"the time is missing","lessons":["ask for the time"],"next_focus":"call current_time"}`)
	case strings.Contains(system, "reflection stage"):
		_, last := r.last()
		return calls(VerdictTool, `{"verdict":"complete","assessment":"It is `+last+`."}`)
	}
	return text("unexpected request")
}

// TestVersion0ReplanAndSubTask drives a version 0 task against a Chat
// Completions server through perceive, think, plan, act and reflect, with a
// replan verdict and a sub_task step whose child task runs to its end,
// with one admission slot: a task waiting for its child holds none.
func TestVersion0ReplanAndSubTask(t *testing.T) {
	fake := newFakeModel(t, legacyScript)
	at := time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)
	h := newHarness(t, Options{Model: fake.client(t, nil), Now: func() time.Time { return at }, MaxActiveTasks: 1})

	id := h.submitV0("what time is it, and ask a child")
	task := h.wait(id)
	if got := path(task); got != "idle > perceiving > thinking > planning > acting > reflecting > planning > acting > reflecting > completed" {
		t.Fatalf("path = %s", got)
	}
	if task.Context.FinalResult != "It is 2025-06-07T08:09:10Z." || task.Context.Iteration != 2 {
		t.Fatalf("result %q, iteration %d", task.Context.FinalResult, task.Context.Iteration)
	}
	if r := task.Context.Reflections; len(r) != 2 || r[0].Verdict != fsm.VerdictReplan || r[0].NextFocus != "call current_time" ||
		len(r[0].Lessons) != 1 || r[1].Verdict != fsm.VerdictComplete {
		t.Fatalf("reflections = %+v", r)
	}
	evs := h.events(id)
	var childID string
	for _, ev := range evs {
		switch b := ev.Body.(type) {
		case *fsm.SubTaskCreatedBody:
			childID = b.TaskID
		case *fsm.ActDoneBody:
			if b.SubTask != childID || b.Result != "child answer" || b.Error != "" {
				t.Fatalf("ACT_DONE = %+v, child %s", b, childID)
			}
		}
	}
	want := "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED PERCEIVE_DONE MODEL_CALLED THINK_DONE MODEL_CALLED PLAN_DONE " +
		"SUB_TASK_CREATED ACT_DONE MODEL_CALLED REFLECT_DONE MODEL_CALLED PLAN_DONE TOOL_CALL_STARTED TOOL_CALL_COMPLETED " +
		"MODEL_CALLED REFLECT_DONE TASK_COMPLETED"
	if got := types(evs); got != want {
		t.Fatalf("events =\n%s\nwant\n%s", got, want)
	}

	child, err := h.a.Task(childID)
	if err != nil {
		t.Fatal(err)
	}
	if child.ParentID != id || child.Machine != v0 || child.Context.FinalResult != "child answer" ||
		path(child) != "idle > perceiving > thinking > planning > acting > reflecting > completed" {
		t.Fatalf("child %s: parent %s machine %s path %s result %q", childID, child.ParentID, child.Machine, path(child), child.Context.FinalResult)
	}
	cevs := h.events(childID)
	if cevs[0].Causation != evs[8].ID || cevs[0].Correlation != evs[0].ID {
		t.Fatalf("child input caused by %s (want the SUB_TASK_CREATED %s), correlated to %s", cevs[0].Causation, evs[8].ID, cevs[0].Correlation)
	}
	h.assertNoIssues()
	h.verify()
}

// verify stops the agent and audits its log: every event legal, and every
// event the agent appended answering the work that was due.
func (h *harness) verify() {
	h.t.Helper()
	h.stop()
	l := openLog(h.t, h.fs)
	defer l.Close()
	rep, err := replay.Verify(testCtx(h.t), l, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if !rep.OK() {
		h.t.Fatalf("verify: %v", rep.Problems)
	}
}

// A version 0 task and a version 1 task fold side by side in one log, and
// each keeps its machine across a restart.
func TestBothMachinesSideBySide(t *testing.T) {
	h := newHarness(t, Options{})
	a, b := h.submitV0("hello zero"), h.submit("hello one")
	ta, tb := h.wait(a), h.wait(b)
	h.stop()
	h.start()
	ra, _ := h.a.Task(a)
	rb, _ := h.a.Task(b)
	if ta.Machine != v0 || tb.Machine != fsm.CurrentMachine || ra.Machine != v0 || rb.Machine != fsm.CurrentMachine ||
		path(ra) != path(ta) || path(rb) != path(tb) {
		t.Fatalf("machines %s %s, after restart %s %s", ta.Machine, tb.Machine, ra.Machine, rb.Machine)
	}
	h.assertNoIssues()
	h.verify()
}
