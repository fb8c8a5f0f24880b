package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/eventlog"
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

	if p, err := h.a.View().Progress(id); err != nil || p.StepCount != 2 || len(p.ToolsUsed) != 1 || p.ToolsUsed[0] != "current_time" ||
		!p.Complete || len(p.NextSteps) != 0 {
		t.Fatalf("progress = %+v, %v", p, err)
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

// A restart while the child of a sub_task step runs: the parent, recovered
// waiting for its child, holds no slot (one slot here); the child resumes,
// and its end completes the parent's step.
func TestSubTaskSurvivesARestart(t *testing.T) {
	block := make(chan struct{})
	arrived := make(chan struct{}, 1)
	fake := newFakeModel(t, func(r *chatReq) reply {
		if r.firstUser() == "child question" && strings.Contains(*r.Messages[0].Content, "perception stage") {
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-block
		}
		return legacyScript(r)
	})
	at := time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)
	h := newHarness(t, Options{Model: fake.client(t, nil), Now: func() time.Time { return at }, MaxActiveTasks: 1})
	id := h.submitV0("what time is it, and ask a child")
	<-arrived // the child is perceiving; the parent waits for it
	parent, _ := h.a.Task(id)
	if act := fsm.Next(&parent); act.Kind != fsm.ActWaitTask {
		t.Fatalf("parent's due work = %s", act)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // stop at once: the child's model call is cancelled, not recorded
	if err := h.a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	close(block)
	h.a = nil
	h.start()
	task := h.wait(id)
	if task.State != fsm.StateCompleted || task.Context.FinalResult != "It is 2025-06-07T08:09:10Z." {
		t.Fatalf("parent %s %q", path(task), task.Context.FinalResult)
	}
	if a := task.Context.ActionsDone[0]; a.ActionType != fsm.ActionSubTask || !a.Success || a.Result != "child answer" {
		t.Fatalf("sub_task step = %+v", a)
	}
	h.assertNoIssues()
	h.verify()
}

// A crash between SUB_TASK_CREATED and the child's input: at the next
// start the parent, waiting for a child that does not exist, creates it
// (with the recorded id), and the task completes.
func TestMissingChildIsCreatedAtStart(t *testing.T) {
	h := &harness{t: t, fs: vfs.NewMem()}
	l := openLog(t, h.fs)
	ctx := testCtx(t)
	inputID := l.NewID()
	id := inputID.String()
	childID := l.NewID().String()
	m := v0
	bodies := []fsm.Body{
		&fsm.Input{Kind: fsm.MessageReceived, Text: "delegate this", Source: "test", TaskType: TypeGeneral, Machine: &m},
		&fsm.TaskCreatedBody{Machine: v0, TaskType: TypeGeneral, InputText: "delegate this", Source: "test"},
		&fsm.PerceiveDoneBody{Perception: fsm.Perception{Text: "p"}, NewMessages: []fsm.Message{{Role: "user", Content: "delegate this"}}},
		&fsm.ThinkDoneBody{Reasoning: fsm.Reasoning{Text: "t"}},
		&fsm.PlanDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{ActionType: fsm.ActionSubTask, ActionParams: map[string]string{"input": "hello child"}}}}},
		&fsm.SubTaskCreatedBody{TaskID: childID, Input: "hello child"},
	}
	for i, b := range bodies {
		data, err := fsm.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		ev := eventlog.Event{Type: string(b.EventType()), Schema: fsm.SchemaVersion, Body: data, Correlation: inputID}
		exp := eventlog.Exactly(uint64(i))
		if i == 0 {
			ev.ID, exp = inputID, eventlog.NoStream
		}
		if _, err := l.Append(ctx, id, exp, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	h.start()
	t.Cleanup(h.stop)
	task := h.wait(id)
	if task.State != fsm.StateCompleted || len(task.Context.ActionsDone) != 1 || !task.Context.ActionsDone[0].Success {
		t.Fatalf("parent %s %+v", path(task), task.Context.ActionsDone)
	}
	child, err := h.a.Task(childID)
	if err != nil || child.ParentID != id || !Done(&child) || !strings.Contains(task.Context.ActionsDone[0].Result, "hello child") {
		t.Fatalf("child %+v, %v; parent's step %+v", child, err, task.Context.ActionsDone[0])
	}
	h.assertNoIssues()
	h.verify()
}

// Version 0 asks while thinking: the task suspends, and a message answers
// it back into thinking.
func TestVersion0AsksWhileThinking(t *testing.T) {
	h := newHarness(t, Options{})
	id := h.submitV0("?")
	task := h.waitState(id, fsm.StateSuspended)
	if task.Context.SuspendedState != fsm.StateThinking || task.Context.SuspendReason != "What would you like me to do?" {
		t.Fatalf("suspended from %s: %q", task.Context.SuspendedState, task.Context.SuspendReason)
	}
	if _, err := h.a.SendMessage(testCtx(t), id, "what time is it?", "test"); err != nil {
		t.Fatal(err)
	}
	task = h.wait(id)
	if got := path(task); got != "idle > perceiving > thinking > suspended > thinking > planning > acting > reflecting > completed" ||
		!strings.HasPrefix(task.Context.FinalResult, "The current time is ") {
		t.Fatalf("path %s, result %q", got, task.Context.FinalResult)
	}
	h.verify()
}

// A verdict call keeps the model's whole reflection: assessment, lessons
// and next focus, with the verdict read case-insensitively and a single
// lesson given as a string.
func TestVerdictKeepsTheReflection(t *testing.T) {
	resp := llm.Response{Content: "thinking aloud", ToolCalls: []fsm.ToolCall{{ID: "c1", Name: VerdictTool,
		Arguments: `{"verdict":" Replan","assessment":"the time is missing","lessons":"call the clock first","next_focus":"call current_time"}`}}}
	var outcome fsm.Body = verdictOf(resp)
	b, ok := outcome.(*fsm.ReflectDoneBody)
	if !ok {
		t.Fatalf("outcome = %#v", outcome)
	}
	want := fsm.Reflection{Verdict: fsm.VerdictReplan, Assessment: "the time is missing", Lessons: []string{"call the clock first"}, NextFocus: "call current_time"}
	if got := b.Reflection; got.Verdict != want.Verdict || got.Assessment != want.Assessment || strings.Join(got.Lessons, "|") != "call the clock first" || got.NextFocus != want.NextFocus {
		t.Fatalf("reflection = %+v, want %+v", got, want)
	}
}

// TestVersion0UnknownVerdictFailsTheTask: a verdict other than complete,
// continue or replan is the model's error, never a completion: the task
// fails with reason invalid_verdict, and the recorded model call keeps the
// model's whole answer (assessment, lessons, next focus).
func TestVersion0UnknownVerdictFailsTheTask(t *testing.T) {
	const answer = `{"verdict":"finished","assessment":"all good","lessons":["check the clock"],"next_focus":"nothing"}`
	fake := newFakeModel(t, func(r *chatReq) reply {
		if strings.Contains(*r.Messages[0].Content, "reflection stage") {
			return calls(VerdictTool, answer)
		}
		return legacyScript(r)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil)})
	id := h.submitV0("child question") // legacyScript answers its plan with a generate step
	task := h.wait(id)
	if task.State != fsm.StateFailed || !strings.Contains(task.Context.Error, `"finished"`) || len(task.Context.Reflections) != 0 {
		t.Fatalf("task %s, error %q, reflections %+v", path(task), task.Context.Error, task.Context.Reflections)
	}
	evs := h.events(id)
	last, model := evs[len(evs)-1], evs[len(evs)-2]
	if b, ok := last.Body.(*fsm.TaskFailedBody); !ok || b.Reason != "invalid_verdict" {
		t.Fatalf("events %s: last %+v", types(evs), last.Body)
	}
	if b, ok := model.Body.(*fsm.ModelCalledBody); !ok || b.Purpose != PurposeVerdict || len(b.ToolCalls) != 1 || b.ToolCalls[0].Arguments != answer {
		t.Fatalf("the model's answer is not recorded: %+v", model.Body)
	}
	h.assertNoIssues()
	h.verify()
}
