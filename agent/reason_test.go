package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/fsm"
)

func TestPlanFromToolCalls(t *testing.T) {
	r := fsm.Reasoning{Text: "checking", ToolCalls: []fsm.ToolCall{
		{ID: "c1", Name: "current_time", Arguments: ""},
		{ID: "c2", Name: "memory_read", Arguments: `{"path":"facts/a.md"}`},
	}}
	p := Plan("what time is it\nand more", r)
	if p.Goal != "what time is it" || p.Reasoning != "checking" || len(p.Steps) != 2 {
		t.Fatalf("plan = %+v", p)
	}
	s := p.Steps[1]
	if s.Index != 1 || s.ActionType != fsm.ActionToolCall || s.ActionParams["tool"] != "memory_read" ||
		s.ActionParams["arguments"] != `{"path":"facts/a.md"}` || s.ActionParams["tool_call_id"] != "c2" || s.Completed {
		t.Fatalf("step = %+v", s)
	}
	if p.Steps[0].ActionParams["arguments"] != "{}" {
		t.Fatalf("empty arguments not normalised: %+v", p.Steps[0])
	}
	if !p.HasToolCall() {
		t.Fatal("tool plan does not route back to reasoning")
	}
}

func TestPlanWithoutToolCallsResponds(t *testing.T) {
	p := Plan("hi", fsm.Reasoning{Text: "hello there"})
	if len(p.Steps) != 1 || p.Steps[0].ActionType != fsm.ActionRespond || p.Steps[0].ActionParams["text"] != "hello there" {
		t.Fatalf("plan = %+v", p)
	}
	if p.HasToolCall() {
		t.Fatal("respond-only plan would not complete")
	}
	long := strings.Repeat("é", 300)
	if g := Plan(long, fsm.Reasoning{}).Goal; len(g) > 204 || !strings.HasSuffix(g, "…") {
		t.Fatalf("goal not bounded on a rune boundary: %q", g)
	}
}

func testKind(t *testing.T) *taskKind {
	t.Helper()
	all, err := tools.NewRegistry(tools.CurrentTimeTool(nil), tools.NotifyTool())
	if err != nil {
		t.Fatal(err)
	}
	kinds, err := resolveTypes([]TaskType{{Name: TypeGeneral, SystemPrompt: "SYS", Tools: []string{tools.CurrentTime, tools.Notify}, BuiltIn: true}}, all, true)
	if err != nil {
		t.Fatal(err)
	}
	return kinds[TypeGeneral]
}

func TestFirstReasoningRecordsInputAndIndex(t *testing.T) {
	kind := testKind(t)
	task := &fsm.Task{ID: "T", Context: fsm.Context{InputText: "what time is it", Iteration: 1},
		History: []fsm.Transition{{From: fsm.StateIdle, To: fsm.StateReasoning, Event: fsm.TaskCreated}}}
	if !firstReasoning(task) {
		t.Fatal("a new task is not on its first reasoning")
	}
	opening := openingMessages(task, "- facts/a.md (3 bytes)\n")
	req := buildRequest(kind, task, opening)
	roles := ""
	for _, m := range req.Messages {
		roles += m.Role[:1]
	}
	if roles != "suu" || req.Messages[0].Content != "SYS" || !strings.HasPrefix(req.Messages[1].Content, memoryIndexHeader) ||
		req.Messages[2].Content != "what time is it" {
		t.Fatalf("request messages = %+v", req.Messages)
	}
	names := ""
	for _, s := range req.Tools {
		names += s.Name + ","
	}
	if names != "current_time,notify,ask_user," {
		t.Fatalf("tools offered = %s", names)
	}

	body := decide(task, opening, llm.Response{Model: "m", ToolCalls: []fsm.ToolCall{{ID: "c1", Name: "current_time", Arguments: "{}"}}})
	rd, ok := body.(*fsm.ReasonDoneBody)
	if !ok {
		t.Fatalf("body = %T", body)
	}
	if len(rd.NewMessages) != 3 || rd.NewMessages[2].Role != "assistant" || len(rd.NewMessages[2].ToolCalls) != 1 || rd.Reasoning.Model != "m" {
		t.Fatalf("new messages = %+v", rd.NewMessages)
	}
	// Folding it must be legal for the machine.
	next, err := fsm.Apply(fsm.Task{}, fsm.Event{Type: fsm.TaskCreated, Stream: "T", Version: 1, Body: &fsm.TaskCreatedBody{InputText: "what time is it"}})
	if err != nil {
		t.Fatal(err)
	}
	next, err = fsm.Apply(next, fsm.Event{Type: fsm.ReasonDone, Stream: "T", Version: 2, Body: rd})
	if err != nil || next.State != fsm.StateActing {
		t.Fatalf("fold: %v, state %s", err, next.State)
	}
	if firstReasoning(&next) {
		t.Fatal("still first reasoning after REASON_DONE")
	}
}

func TestAskUserSuspends(t *testing.T) {
	task := &fsm.Task{Context: fsm.Context{InputText: "?"}}
	opening := openingMessages(task, "")
	body := decide(task, opening, llm.Response{Content: "hmm", ToolCalls: []fsm.ToolCall{
		{ID: "a", Name: "current_time"}, {ID: "b", Name: AskUserTool, Arguments: `{"question":"Which city?"}`},
	}})
	nm, ok := body.(*fsm.NeedMoreInfoBody)
	if !ok {
		t.Fatalf("body = %T", body)
	}
	if !nm.Reasoning.NeedsClarification || nm.Reasoning.Question != "Which city?" || nm.Reasoning.ToolCalls != nil {
		t.Fatalf("reasoning = %+v", nm.Reasoning)
	}
	last := nm.NewMessages[len(nm.NewMessages)-1]
	if last.Role != "assistant" || last.Content != "Which city?" || len(last.ToolCalls) != 0 {
		t.Fatalf("recorded question = %+v", last)
	}
	// An empty question falls back to the content, then to a fixed one.
	for args, want := range map[string]string{`{}`: "hmm", `not json`: "hmm"} {
		nm := decide(task, nil, llm.Response{Content: "hmm", ToolCalls: []fsm.ToolCall{{Name: AskUserTool, Arguments: args}}}).(*fsm.NeedMoreInfoBody)
		if nm.Reasoning.Question != want {
			t.Errorf("question for %s = %q", args, nm.Reasoning.Question)
		}
	}
	nm = decide(task, nil, llm.Response{ToolCalls: []fsm.ToolCall{{Name: AskUserTool}}}).(*fsm.NeedMoreInfoBody)
	if nm.Reasoning.Question == "" {
		t.Error("no question at all")
	}
}

func TestAnswerDanglingCalls(t *testing.T) {
	msgs := []fsm.Message{
		{Role: "user", Content: "x"},
		{Role: "assistant", ToolCalls: []fsm.ToolCall{{ID: "a"}, {ID: "b"}}},
		{Role: "tool", ToolCallID: "a", Content: "ok"},
		{Role: "user", Content: "never mind"},
	}
	out := answerDanglingCalls(msgs)
	got := ""
	for _, m := range out {
		got += fmt.Sprintf("%s:%s;", m.Role, m.ToolCallID)
	}
	if got != "user:;assistant:;tool:a;tool:b;user:;" {
		t.Fatalf("messages = %s", got)
	}
	if !strings.HasPrefix(out[3].Content, "error: ") {
		t.Fatalf("synthetic answer = %q", out[3].Content)
	}
	// Two turns, the first answered, the second not: the answers go after
	// the second turn's own, and what follows is kept.
	msgs = []fsm.Message{
		{Role: "user", Content: "x"},
		{Role: "assistant", ToolCalls: []fsm.ToolCall{{ID: "a"}}},
		{Role: "tool", ToolCallID: "a", Content: "ok"},
		{Role: "assistant", ToolCalls: []fsm.ToolCall{{ID: "b"}, {ID: "c"}}},
		{Role: "tool", ToolCallID: "c", Content: "ok"},
		{Role: "user", Content: "never mind"},
		{Role: "assistant", Content: "fine"},
	}
	got = ""
	for _, m := range answerDanglingCalls(msgs) {
		got += fmt.Sprintf("%s:%s;", m.Role, m.ToolCallID)
	}
	if got != "user:;assistant:;tool:a;assistant:;tool:c;tool:b;user:;assistant:;" {
		t.Fatalf("messages = %s", got)
	}
	// Every call answered: the messages as they are, not copied.
	msgs = msgs[:5]
	msgs[3].ToolCalls = msgs[3].ToolCalls[1:]
	if out := answerDanglingCalls(msgs); len(out) != 5 || &out[0] != &msgs[0] {
		t.Fatalf("%d messages, copied %v; want the 5 given", len(out), &out[0] != &msgs[0])
	}
}

func TestCompileResult(t *testing.T) {
	task := &fsm.Task{Context: fsm.Context{
		Plan: &fsm.Plan{Steps: []fsm.PlanStep{{Index: 0, ActionType: fsm.ActionRespond, Completed: true}}},
		ActionsDone: []fsm.ActionResult{
			{StepIndex: 0, ActionType: fsm.ActionToolCall, Result: "12:00"},
			{StepIndex: 0, ActionType: fsm.ActionRespond, Result: "It is noon."},
		},
	}}
	if r := compileResult(task); r != "It is noon." {
		t.Fatalf("result = %q", r)
	}
	if r := compileResult(&fsm.Task{}); r != "" {
		t.Fatalf("result without plan = %q", r)
	}
}

func TestResolveTypes(t *testing.T) {
	all, _ := tools.NewRegistry(tools.CurrentTimeTool(nil))
	for _, bad := range [][]TaskType{
		{{Name: TypeGeneral, Tools: []string{"missing"}}},
		{{Name: TypeGeneral}, {Name: TypeGeneral}},
		{{Name: TypeExplore}},
		{{Name: TypeGeneral, Tools: []string{"["}}},
		{{Name: ""}},
	} {
		if _, err := resolveTypes(bad, all, true); err == nil {
			t.Errorf("resolveTypes(%+v) accepted", bad)
		}
	}
}
