package traces_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
	"github.com/pegasus-engine/pegasus/traces"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// script writes a task tree's events as the agent and the broker write
// them: ids in time order, each event caused by the one before it on its
// stream unless told otherwise.
type script struct {
	t    testing.TB
	now  time.Time
	seq  uint64
	n    uint64
	vers map[string]uint64
	last map[string]ulid.ULID
	root ulid.ULID
	evs  []eventlog.Event
}

func newScript(t testing.TB) *script {
	return &script{t: t, now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), vers: map[string]uint64{}, last: map[string]ulid.ULID{}}
}

func (s *script) wait(d time.Duration) { s.now = s.now.Add(d) }

func (s *script) id() ulid.ULID {
	s.n++
	var e [10]byte
	e[9] = byte(s.n)
	e[8] = byte(s.n >> 8)
	id, err := ulid.New(ulid.Timestamp(s.now), bytes.NewReader(e[:]))
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

// add appends body to stream ("" for a new stream named by the event),
// caused by cause (zero: the stream's last event).
func (s *script) add(stream string, cause ulid.ULID, body fsm.Body) eventlog.Event {
	s.t.Helper()
	data, err := fsm.Encode(body)
	if err != nil {
		s.t.Fatal(err)
	}
	id := s.id()
	if stream == "" {
		stream = id.String()
	}
	if cause == (ulid.ULID{}) {
		cause = s.last[stream]
	}
	if s.root == (ulid.ULID{}) {
		s.root = id
	}
	s.seq++
	s.vers[stream]++
	ev := eventlog.Event{ID: id, Seq: s.seq, Stream: stream, Version: s.vers[stream], Type: string(body.EventType()),
		Time: s.now, Causation: cause, Correlation: s.root, Schema: fsm.SchemaVersion, Body: data}
	s.last[stream] = id
	s.evs = append(s.evs, ev)
	return ev
}

// tree is a task with every kind of span: admission, a model call with a
// retry and a fallback, a built-in tool, an MCP tool that fails, a worker
// tool whose broker task times out once and is then run by the built-in
// agent as a child task, a question to a human and its answer, and the
// final answer.
func tree(t testing.TB) []eventlog.Event {
	s := newScript(t)
	in := s.add("", ulid.ULID{}, &fsm.Input{Kind: fsm.MessageReceived, Text: "weather in Paris?", Source: "http", TaskType: "general"})
	task := in.Stream
	s.wait(40 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.TaskCreatedBody{Machine: fsm.MachineRef{Name: "pegasus.task", Version: 1}, TaskType: "general",
		InputText: "weather in Paris?", Source: "http", Model: "main"})
	// A model call: attempt 1 fails (429), attempt 2 on the fallback model succeeds.
	s.wait(300 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "gpt-a", LatencyMS: 290, Status: 429, Error: "rate limited"})
	s.wait(700 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 2, Model: "gpt-b", LatencyMS: 500, Status: 200,
		PromptTokens: 120, CompletionTokens: 30, FinishReason: "tool_calls",
		ToolCalls: []fsm.ToolCall{{ID: "c1", Name: "clock", Arguments: "{}"}}})
	plan := func(tool, call string) fsm.Plan {
		return fsm.Plan{Goal: "g", Steps: []fsm.PlanStep{{Index: 0, ActionType: fsm.ActionToolCall,
			ActionParams: map[string]string{"tool": tool, "arguments": "{}", "tool_call_id": call}}}}
	}
	s.add(task, ulid.ULID{}, &fsm.ReasonDoneBody{Plan: plan("clock", "c1"), NewMessages: []fsm.Message{{Role: "user", Content: "weather in Paris?"},
		{Role: "assistant", ToolCalls: []fsm.ToolCall{{ID: "c1", Name: "clock", Arguments: "{}"}}}}})
	s.wait(time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ToolCallStartedBody{StepIndex: 0, Tool: "clock", ToolCallID: "c1", Arguments: "{}", IdempotencyKey: "k1"})
	s.wait(5 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ToolCallResultBody{StepIndex: 0, Tool: "clock", ToolCallID: "c1", IdempotencyKey: "k1", Result: "12:00", DurationMS: 5,
		NewMessages: []fsm.Message{{Role: "tool", ToolCallID: "c1", Content: "12:00"}}})
	// An MCP tool that fails.
	s.wait(200 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "gpt-a", LatencyMS: 200, Status: 200, PromptTokens: 150, CompletionTokens: 20, FinishReason: "tool_calls"})
	s.add(task, ulid.ULID{}, &fsm.ReasonDoneBody{Plan: plan("fetch", "c2")})
	s.wait(time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ToolCallStartedBody{StepIndex: 0, Tool: "fetch", ToolCallID: "c2", IdempotencyKey: "k2", Source: "mcp:web"})
	s.wait(30 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ToolCallResultBody{StepIndex: 0, Tool: "fetch", ToolCallID: "c2", IdempotencyKey: "k2", Error: "connection refused", DurationMS: 30, Source: "mcp:web"})
	// A worker tool: its broker task times out once, then the built-in agent runs it.
	s.wait(100 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "gpt-a", LatencyMS: 100, Status: 200, PromptTokens: 170, CompletionTokens: 10, FinishReason: "tool_calls"})
	s.add(task, ulid.ULID{}, &fsm.ReasonDoneBody{Plan: plan("weather", "c3")})
	s.wait(time.Millisecond)
	btID := s.id()
	started := s.add(task, ulid.ULID{}, &fsm.ToolCallStartedBody{StepIndex: 0, Tool: "weather", ToolCallID: "c3", IdempotencyKey: "k3", Source: "worker:weather", Task: btID.String()})
	s.wait(2 * time.Millisecond)
	bt := s.add(btID.String(), started.ID, &fsm.DispatchCreatedBody{AgentID: "$pegasus", Title: "tool weather", RequiredCapabilities: []string{"weather"},
		TimeoutSeconds: 10, MaxRetries: 2, RetryEligible: true, Source: "tool", ParentTaskID: task}).Stream
	s.wait(10 * time.Millisecond)
	s.add(bt, ulid.ULID{}, &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "w1", Score: 1})
	s.wait(10 * time.Second)
	s.add(bt, ulid.ULID{}, &fsm.DispatchTimedOutBody{AgentID: "$broker"})
	s.add(bt, ulid.ULID{}, &fsm.DispatchRetriedBody{AgentID: "$broker"})
	s.wait(time.Second)
	s.add(bt, ulid.ULID{}, &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "pegasus", Score: 1})
	s.wait(5 * time.Millisecond)
	st := s.add(bt, ulid.ULID{}, &fsm.DispatchReportBody{Kind: fsm.DispatchStarted, AgentID: "pegasus", Message: "running as pegasus.task"})
	child := s.add("", st.ID, &fsm.Input{Kind: fsm.MessageReceived, Text: "weather", Source: "broker", ParentTaskID: bt}).Stream
	s.wait(5 * time.Millisecond)
	s.add(child, ulid.ULID{}, &fsm.TaskCreatedBody{Machine: fsm.MachineRef{Name: "pegasus.task", Version: 1}, TaskType: "general", Source: "broker", ParentTaskID: bt, Model: "main"})
	s.wait(400 * time.Millisecond)
	s.add(child, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "gpt-a", LatencyMS: 390, Status: 200, PromptTokens: 40, CompletionTokens: 8, FinishReason: "stop", Content: "sunny"})
	s.add(child, ulid.ULID{}, &fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{Index: 0, ActionType: fsm.ActionRespond, ActionParams: map[string]string{"text": "sunny"}}}}})
	s.wait(time.Millisecond)
	s.add(child, ulid.ULID{}, &fsm.StepCompletedBody{StepIndex: 0, Result: "sunny"})
	s.add(child, ulid.ULID{}, &fsm.TaskCompletedBody{Result: "sunny"})
	s.wait(3 * time.Millisecond)
	s.add(bt, ulid.ULID{}, &fsm.DispatchReportBody{Kind: fsm.DispatchCompleted, AgentID: "pegasus", Result: `{"result":"sunny"}`})
	s.wait(2 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ToolCallResultBody{StepIndex: 0, Tool: "weather", ToolCallID: "c3", IdempotencyKey: "k3", Result: "sunny", DurationMS: 11040, Source: "worker:weather", Task: bt})
	// A question to a human, answered a minute later.
	s.wait(100 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "gpt-a", LatencyMS: 100, Status: 200, PromptTokens: 200, CompletionTokens: 12, FinishReason: "tool_calls"})
	s.add(task, ulid.ULID{}, &fsm.NeedMoreInfoBody{Reasoning: fsm.Reasoning{NeedsClarification: true, Question: "Celsius?"}})
	s.wait(time.Minute)
	s.add(task, ulid.ULID{}, &fsm.Input{Kind: fsm.MessageReceived, Text: "yes", Source: "http"})
	s.wait(100 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "gpt-a", LatencyMS: 100, Status: 200, PromptTokens: 220, CompletionTokens: 9, FinishReason: "stop", Content: "Sunny, 21 C"})
	s.add(task, ulid.ULID{}, &fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{Index: 0, ActionType: fsm.ActionRespond, ActionParams: map[string]string{"text": "Sunny, 21 C"}}}}})
	s.wait(time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.StepCompletedBody{StepIndex: 0, Result: "Sunny, 21 C"})
	s.add(task, ulid.ULID{}, &fsm.TaskCompletedBody{Result: "Sunny, 21 C"})
	// The post-task reflection: a model call after the task's end.
	s.wait(300 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reflect", Attempt: 1, Model: "gpt-a", LatencyMS: 280, Status: 200, PromptTokens: 300, CompletionTokens: 40, FinishReason: "stop"})
	s.add(task, ulid.ULID{}, &fsm.ReflectionCompleteBody{})
	return s.evs
}

// failing is a task a budget suspends, an operator resumes, and whose
// model call then fails twice: it fails with model_error.
func failing(t testing.TB) []eventlog.Event {
	s := newScript(t)
	in := s.add("", ulid.ULID{}, &fsm.Input{Kind: fsm.WebhookTriggered, Text: "nightly", Source: "webhook", Name: "nightly", TaskType: "general"})
	task := in.Stream
	s.wait(time.Second)
	s.add(task, ulid.ULID{}, &fsm.TaskCreatedBody{TaskType: "general", Source: "webhook", ConcurrencyKey: "acme"})
	s.add(task, ulid.ULID{}, &fsm.BudgetExceededBody{Budget: fsm.BudgetKey, Key: "acme", Model: "gpt-a", MaxTokens: 1000, SpentTokens: 1200, Policy: fsm.BudgetSuspend})
	s.add(task, ulid.ULID{}, &fsm.TaskSuspendedBody{Reason: "budget_exhausted: over"})
	s.wait(time.Hour)
	s.add(task, ulid.ULID{}, &fsm.TaskResumedBody{Reason: "new day"})
	s.wait(2 * time.Second)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "gpt-a", LatencyMS: 1500, Status: 500, Error: "server error"})
	s.wait(2 * time.Second)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 2, Model: "gpt-a", LatencyMS: 1500, Status: 500, Error: "server error"})
	s.add(task, ulid.ULID{}, &fsm.TaskFailedBody{Reason: "model_error", Error: "model call failed after 2 attempt(s): server error"})
	return s.evs
}

func TestBuildGoldenFailing(t *testing.T) {
	evs := failing(t)
	golden(t, "failing.txt", render(traces.Build(evs, traces.Options{})))
	// Before the second attempt: the call is open (a retry follows).
	golden(t, "failing-retrying.txt", render(traces.Build(evs[:6], traces.Options{})))
}

// render is the spans as text a person reads: a tree, with times
// relative to the root's start.
func render(spans []traces.Span) string {
	var b strings.Builder
	depth := map[[8]byte]int{}
	t0 := spans[0].Start
	for _, s := range spans {
		d := 0
		if s.Parent != ([8]byte{}) {
			d = depth[s.Parent] + 1
		}
		depth[s.SpanID] = d
		fmt.Fprintf(&b, "%s%s [%s] %s +%s %s", strings.Repeat("  ", d), s.Name, s.Kind, hex.EncodeToString(s.SpanID[:]),
			s.Start.Sub(t0), s.End.Sub(s.Start))
		if s.Open {
			b.WriteString(" open")
		}
		switch s.Status {
		case traces.StatusOK:
			b.WriteString(" ok")
		case traces.StatusError:
			fmt.Fprintf(&b, " error(%s)", s.StatusMessage)
		}
		b.WriteString("\n")
		for _, a := range s.Attrs {
			fmt.Fprintf(&b, "%s  %s=%v\n", strings.Repeat("  ", d), a.Key, a.Value.AsInterface())
		}
		for _, e := range s.Events {
			fmt.Fprintf(&b, "%s  @+%s %s", strings.Repeat("  ", d), e.Time.Sub(t0), e.Name)
			for _, a := range e.Attrs {
				fmt.Fprintf(&b, " %s=%v", a.Key, a.Value.AsInterface())
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("spans differ from %s (go test -update rewrites it):\n%s", path, got)
	}
}

func TestBuildGolden(t *testing.T) {
	evs := tree(t)
	golden(t, "tree.txt", render(traces.Build(evs, traces.Options{})))
	golden(t, "tree-contents.txt", render(traces.Build(evs, traces.Options{Contents: true})))
	// The task cut after the worker's broker task was assigned: the spans
	// that have not ended are open, up to the last event.
	for i, ev := range evs {
		if ev.Type == string(fsm.DispatchStarted) {
			golden(t, "tree-running.txt", render(traces.Build(evs[:i+1], traces.Options{})))
			break
		}
	}
}

func TestBuildShape(t *testing.T) {
	spans := traces.Build(tree(t), traces.Options{})
	byName := map[string]traces.Span{}
	for _, s := range spans {
		if _, ok := byName[s.Name]; !ok {
			byName[s.Name] = s // the first of the name
		}
	}
	attr := func(s traces.Span, k string) any {
		for _, a := range s.Attrs {
			if string(a.Key) == k {
				return a.Value.AsInterface()
			}
		}
		return nil
	}
	tool := byName["execute_tool weather"]
	disp := byName["dispatch tool weather"]
	if disp.Parent != tool.SpanID {
		t.Errorf("the worker tool's broker task is not under its tool call")
	}
	if got := attr(tool, "pegasus.tool.capability"); got != "weather" {
		t.Errorf("capability %v", got)
	}
	if got := attr(byName["execute_tool fetch"], "pegasus.tool.mcp_server"); got != "web" || byName["execute_tool fetch"].Status != traces.StatusError {
		t.Errorf("mcp tool: server %v, status %v", got, byName["execute_tool fetch"].Status)
	}
	var child, pegasusAttempt traces.Span
	for _, s := range spans {
		if s.Kind == traces.KindAttempt && attr(s, "pegasus.worker") == "pegasus" {
			pegasusAttempt = s
		}
		if s.Kind == traces.KindTask && s.Task != spans[0].Task {
			child = s
		}
	}
	if child.Parent != pegasusAttempt.SpanID || child.Parent == ([8]byte{}) {
		t.Errorf("the built-in agent's task is not under the attempt that started it")
	}
	chat := byName["chat gpt-a"]
	if attr(chat, "gen_ai.response.model") != "gpt-b" || attr(chat, "gen_ai.usage.input_tokens") != int64(120) {
		t.Errorf("first model call: %+v", chat.Attrs)
	}
	for _, s := range spans {
		if s.Parent == chat.SpanID && s.Kind != traces.KindAttempt {
			t.Errorf("a model call's child %q is not an attempt", s.Name)
		}
	}
}

// TestBuildDeterministic: the same events give the same spans, ids
// included, and a prefix of the events gives the same ids to the spans it
// has (a running task exported twice keeps its spans' ids).
func TestBuildDeterministic(t *testing.T) {
	evs := tree(t)
	a := traces.Build(evs, traces.Options{})
	b := traces.Build(append([]eventlog.Event(nil), evs...), traces.Options{})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two builds of the same events differ")
	}
	if !reflect.DeepEqual(a, traces.BuildShared(evs, traces.Options{})) {
		t.Fatal("BuildShared differs from Build")
	}
	ids := map[[8]byte]bool{}
	for _, s := range a {
		if ids[s.SpanID] {
			t.Fatalf("span id %x twice", s.SpanID)
		}
		ids[s.SpanID] = true
	}
	for n := 1; n < len(evs); n++ {
		for _, s := range traces.Build(evs[:n], traces.Options{}) {
			if !ids[s.SpanID] {
				t.Fatalf("after %d events: span %q has id %x, which the whole task does not", n, s.Name, s.SpanID)
			}
			if s.TraceID != a[0].TraceID {
				t.Fatalf("after %d events: another trace id", n)
			}
		}
	}
}

// TestEveryEventTypeHandled fails when an event type is declared (a
// constant of type EventType, or a marker type of the event log) that
// traces.Handled does not list: a new type must be mapped or deliberately
// ignored.
func TestEveryEventTypeHandled(t *testing.T) {
	found := map[string]string{}
	for _, dir := range []string{"../fsm", "../projection", "../eventlog"} {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			for _, f := range p.Files {
				ast.Inspect(f, func(n ast.Node) bool {
					vs, ok := n.(*ast.ValueSpec)
					if !ok {
						return true
					}
					typed := false
					if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "EventType" {
						typed = true
					}
					if sel, ok := vs.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "EventType" {
						typed = true
					}
					for i, v := range vs.Values {
						lit, ok := v.(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						name := vs.Names[i].Name
						if typed || (dir == "../eventlog" && strings.HasPrefix(name, "Type")) {
							s, _ := strconv.Unquote(lit.Value)
							found[s] = dir + "." + name
						}
					}
					return true
				})
			}
		}
	}
	if len(found) < 40 {
		t.Fatalf("found only %d event types: %v", len(found), found)
	}
	for typ, where := range found {
		if _, ok := traces.Handled[fsm.EventType(typ)]; !ok {
			t.Errorf("event type %s (%s) is neither mapped nor ignored in traces.Handled", typ, where)
		}
	}
	for typ := range traces.Handled {
		if _, ok := found[string(typ)]; !ok {
			t.Errorf("traces.Handled lists %s, which is declared nowhere", typ)
		}
	}
}

// checkTree fails unless every span's parent is a span of the trace
// listed before it, the first span is the only root, ends are not before
// starts and all share one trace id.
func checkTree(t testing.TB, spans []traces.Span) {
	t.Helper()
	seen := map[[8]byte]bool{}
	for i, s := range spans {
		if s.TraceID != spans[0].TraceID {
			t.Fatalf("span %d: another trace id", i)
		}
		if s.SpanID == ([8]byte{}) {
			t.Fatalf("span %d: zero id", i)
		}
		if i == 0 {
			if s.Parent != ([8]byte{}) {
				t.Fatalf("the first span has a parent")
			}
		} else if !seen[s.Parent] {
			t.Fatalf("span %d (%s): parent %x is not a span before it", i, s.Name, s.Parent)
		}
		if s.End.Before(s.Start) {
			t.Fatalf("span %d (%s) ends before it starts", i, s.Name)
		}
		if seen[s.SpanID] {
			t.Fatalf("span %d (%s): id twice", i, s.Name)
		}
		seen[s.SpanID] = true
	}
}

// TestBuildGeneratedHistories maps each task of generated histories (valid
// events of many interleaved tasks) and every prefix of some: the tree
// always holds.
func TestBuildGeneratedHistories(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		evs := replaytest.Generate(seed, replaytest.Config{Tasks: 12, Finish: seed%2 == 0})
		byStream := map[string][]eventlog.Event{}
		for _, ev := range evs {
			byStream[ev.Stream] = append(byStream[ev.Stream], ev)
		}
		for stream, own := range byStream {
			spans := traces.Build(own, traces.Options{Contents: seed%3 == 0})
			if strings.HasPrefix(stream, "$") {
				continue
			}
			checkTree(t, spans)
		}
		// The whole history as one tree: other streams hang under the root.
		all := traces.Build(evs, traces.Options{})
		checkTree(t, all)
		for _, opt := range []traces.Options{{}, {Contents: true}} {
			if !reflect.DeepEqual(traces.BuildShared(evs, opt), traces.Build(evs, opt)) {
				t.Fatalf("seed %d: BuildShared differs from Build (contents %v)", seed, opt.Contents)
			}
		}
	}
}

// TestBuilderReused maps the trees of generated histories, their
// prefixes and the hand-made tree one after another with one Builder,
// reset now and then: each build gives what Build gives, and the spans of
// the builds since the last Reset stay as they were while later builds
// reuse the builder's memory.
func TestBuilderReused(t *testing.T) {
	var trees [][]eventlog.Event
	trees = append(trees, tree(t))
	for seed := uint64(1); seed <= 12; seed++ {
		evs := replaytest.Generate(seed, replaytest.Config{Tasks: 8, Finish: seed%2 == 0})
		byStream := map[string][]eventlog.Event{}
		var order []string
		for _, ev := range evs {
			if _, ok := byStream[ev.Stream]; !ok {
				order = append(order, ev.Stream)
			}
			byStream[ev.Stream] = append(byStream[ev.Stream], ev)
		}
		for _, stream := range order {
			own := byStream[stream]
			trees = append(trees, own, own[:len(own)/2+1])
		}
		trees = append(trees, evs)
	}
	type built struct {
		spans, want []traces.Span
	}
	var b traces.Builder
	var since []built
	for i, evs := range trees {
		opt := traces.Options{Contents: i%3 == 0}
		want := traces.Build(evs, opt)
		var got []traces.Span
		if i%2 == 0 {
			got = b.BuildShared(evs, opt)
		} else {
			got = b.Build(evs, opt)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("tree %d: the reused builder's spans differ from Build's", i)
		}
		since = append(since, built{got, want})
		for j, s := range since {
			if !reflect.DeepEqual(s.spans, s.want) {
				t.Fatalf("tree %d: the spans of build %d since the reset changed", i, j)
			}
		}
		if i%7 == 6 {
			b.Reset()
			since = nil
		}
	}
}

func FuzzBuild(f *testing.F) {
	evs := tree(f)
	f.Add([]byte{0, 1, 2, 3}, uint8(10))
	f.Add([]byte{5, 5, 5, 40, 1}, uint8(3))
	f.Fuzz(func(t *testing.T, picks []byte, cut uint8) {
		// A sequence of the tree's events picked by the fuzzer (any
		// order, repeats, drops), some bodies cut short.
		var in []eventlog.Event
		for i, p := range picks {
			if i > 200 {
				break
			}
			ev := evs[int(p)%len(evs)]
			if cut != 0 && i%int(cut) == 0 && len(ev.Body) > 0 {
				ev.Body = ev.Body[:len(ev.Body)/2]
			}
			in = append(in, ev)
		}
		if len(in) == 0 {
			return
		}
		checkTree(t, traces.Build(in, traces.Options{Contents: cut%2 == 0}))
	})
}

func TestBuildJSONable(t *testing.T) {
	spans := traces.Build(tree(t), traces.Options{Contents: true})
	for _, s := range spans {
		for _, a := range s.Attrs {
			if v, ok := a.Value.AsInterface().(string); ok && strings.HasPrefix(string(a.Key), "gen_ai.") && strings.HasSuffix(string(a.Key), "messages") && !json.Valid([]byte(v)) {
				t.Errorf("%s of %s is not JSON: %s", a.Key, s.Name, v)
			}
		}
	}
}

// Events the agent held for a later commit (a tool call's start and
// result recorded with the model's answers around it) carry that
// commit's time; their spans take the times of their ids, drawn when each
// became known.
func TestHeldEventsTakeTheirIDsTimes(t *testing.T) {
	s := newScript(t)
	in := s.add("", ulid.ULID{}, &fsm.Input{Kind: fsm.MessageReceived, Text: "time?", Source: "http", TaskType: "general"})
	task := in.Stream
	s.add(task, ulid.ULID{}, &fsm.TaskCreatedBody{Machine: fsm.MachineRef{Name: "pegasus.task", Version: 1}, TaskType: "general", InputText: "time?"})
	held := len(s.evs)
	s.wait(300 * time.Millisecond)
	mc := s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "m", LatencyMS: 300, Status: 200, FinishReason: "tool_calls"})
	s.add(task, ulid.ULID{}, &fsm.ReasonDoneBody{Plan: fsm.Plan{Goal: "g", Steps: []fsm.PlanStep{{Index: 0, ActionType: fsm.ActionToolCall,
		ActionParams: map[string]string{"tool": "current_time", "arguments": "{}", "tool_call_id": "c1"}}}}})
	start := s.add(task, ulid.ULID{}, &fsm.ToolCallStartedBody{StepIndex: 0, Tool: "current_time", ToolCallID: "c1", IdempotencyKey: "k1"})
	s.wait(5 * time.Millisecond)
	end := s.add(task, ulid.ULID{}, &fsm.ToolCallResultBody{StepIndex: 0, Tool: "current_time", ToolCallID: "c1", IdempotencyKey: "k1", Result: "12:00", DurationMS: 5})
	s.wait(400 * time.Millisecond)
	s.add(task, ulid.ULID{}, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "m", LatencyMS: 400, Status: 200, FinishReason: "stop"})
	commit := s.now.Add(2 * time.Millisecond)
	for i := held; i < len(s.evs); i++ {
		s.evs[i].Time = commit // one commit after the second model call
	}
	var tool, first *traces.Span
	spans := traces.Build(s.evs, traces.Options{})
	for i := range spans {
		switch {
		case spans[i].Kind == traces.KindTool:
			tool = &spans[i]
		case spans[i].Kind == traces.KindModel && first == nil:
			first = &spans[i]
		}
	}
	idTime := func(id ulid.ULID) time.Time { return ulid.Time(id.Time()).UTC() }
	if tool == nil || !tool.Start.Equal(idTime(start.ID)) || !tool.End.Equal(idTime(end.ID)) {
		t.Fatalf("tool span %+v, want from %s to %s", tool, idTime(start.ID), idTime(end.ID))
	}
	if first == nil || !first.End.Equal(idTime(mc.ID)) || !first.Start.Equal(idTime(mc.ID).Add(-300*time.Millisecond)) {
		t.Fatalf("first model span %+v, want it to end at %s", first, idTime(mc.ID))
	}
}
