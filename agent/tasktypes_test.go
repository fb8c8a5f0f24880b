package agent

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/fsm"
)

// fakeProvider is a tools.Provider whose set a test changes.
type fakeProvider struct {
	mu      sync.Mutex
	tools   []tools.Tool
	changed chan struct{}
}

func newFakeProvider() *fakeProvider { return &fakeProvider{changed: make(chan struct{})} }

func (p *fakeProvider) Tools() []tools.Tool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.tools)
}

func (p *fakeProvider) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

func (p *fakeProvider) add(t tools.Tool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tools = append(p.tools, t)
	close(p.changed)
	p.changed = make(chan struct{})
}

// mcpTool is a tool that says it is an MCP server's.
type mcpTool struct {
	tools.Tool
	server string
}

func (m mcpTool) Source() tools.Source { return tools.Source{Kind: tools.SourceMCP, Server: m.server} }

func echoTool(name string) tools.Tool {
	return mcpTool{Tool: tools.Func(name, "Echoes its text.", nil, func(_ context.Context, c tools.Call) (string, error) {
		return "echo " + string(c.Arguments), nil
	}), server: "srv"}
}

// A type's glob matches a provider's tool that appears after the start:
// the type resolves again, its version changes, and a task of it calls the
// tool (recorded with its source).
func TestTypeGlobMatchesAToolAddedLater(t *testing.T) {
	p := newFakeProvider()
	fake := newFakeModel(t, func(r *chatReq) reply {
		if role, content := r.last(); role == "tool" {
			return text(content)
		}
		return calls("srv__echo", `{"text":"hi"}`)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil), Providers: []tools.Provider{p}, DisableReflection: true,
		TaskTypes: []TaskType{{Name: "mcp", Description: "MCP only", SystemPrompt: "Use srv.", Tools: []string{"srv__*"}}}})
	typeOf := func(name string) TaskTypeInfo {
		for _, ti := range h.a.Types() {
			if ti.Name == name {
				return ti
			}
		}
		t.Fatalf("no type %s in %v", name, h.a.TaskTypes())
		return TaskTypeInfo{}
	}
	before := typeOf("mcp")
	if len(before.ToolNames) != 0 {
		t.Fatalf("mcp tools before the provider has any: %v", before.ToolNames)
	}
	if got := h.a.TaskTypes(); !slices.Equal(got, []string{TypeGeneral, TypeExplore, TypePlan, "mcp"}) {
		t.Fatalf("types = %v", got)
	}

	p.add(echoTool("srv__echo"))
	after := typeOf("mcp")
	if !slices.Equal(after.ToolNames, []string{"srv__echo"}) || after.Version == before.Version {
		t.Fatalf("mcp after the provider added srv__echo: %v version %s (was %s)", after.ToolNames, after.Version, before.Version)
	}
	if g := typeOf(TypeGeneral); !slices.Contains(g.ToolNames, "srv__echo") || !slices.Contains(g.ToolNames, AskUserTool) {
		t.Fatalf("general offers %v", g.ToolNames)
	}
	var names []string
	for _, tl := range h.a.Tools() {
		names = append(names, tl.Name()+"="+tools.SourceOf(tl).String())
	}
	if !slices.Contains(names, "srv__echo=mcp:srv") || !slices.Contains(names, "current_time=builtin") {
		t.Fatalf("tools = %v", names)
	}

	id, err := h.a.Submit(testCtx(t), "echo hi", "test", "mcp")
	if err != nil {
		t.Fatal(err)
	}
	task := h.wait(id)
	if task.Context.FinalResult != `echo {"text":"hi"}` {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	evs := h.events(id)
	created := evs[1].Body.(*fsm.TaskCreatedBody)
	if created.TypeVersion != after.Version || created.Model != "fake-1" || created.TaskType != "mcp" {
		t.Fatalf("TASK_CREATED = %+v", created)
	}
	for _, ev := range evs {
		if b, ok := ev.Body.(*fsm.ToolCallStartedBody); ok && b.Source != "mcp:srv" {
			t.Fatalf("TOOL_CALL_STARTED = %+v", b)
		}
	}
	// The type does not offer the built-in tools it does not list, nor
	// ask_user.
	if !strings.Contains(strings.Join(after.ToolNames, ","), "srv__echo") || slices.Contains(after.ToolNames, tools.Notify) ||
		slices.Contains(after.ToolNames, AskUserTool) {
		t.Fatalf("mcp offers %v", after.ToolNames)
	}
	if _, err := h.a.Submit(testCtx(t), "x", "test", "nope"); err == nil ||
		!strings.Contains(err.Error(), `unknown task type "nope" (known: general, explore, plan, mcp)`) {
		t.Fatalf("unknown type: %v", err)
	}
	h.verify()
}

// A type's model fails with a 500; its fallback answers. Both attempts are
// in the log, each with its model, and TASK_CREATED names the type's model.
func TestModelFallbackOnA500(t *testing.T) {
	down := newFakeModel(t, func(*chatReq) reply { return reply{status: 500, content: "overloaded"} })
	up := newFakeModel(t, func(*chatReq) reply { return text("from the fallback") })
	primary := down.client(t, func(o *llm.Options) { o.Model = "big-1"; o.MaxAttempts = 1 })
	backup := up.client(t, func(o *llm.Options) { o.Model = "small-1" })
	off := false
	h := newHarness(t, Options{Model: llm.Offline{}, Models: map[string]llm.Model{"big": primary, "small": backup},
		TaskTypes: []TaskType{{Name: TypeGeneral, SystemPrompt: "Answer.", Model: "big", Fallback: []string{"small"},
			MaxIterations: 3, Reflection: &off}}})
	id := h.submit("hello")
	task := h.wait(id)
	if task.Context.FinalResult != "from the fallback" {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	var got []string
	evs := h.events(id)
	for _, ev := range evs {
		if b, ok := ev.Body.(*fsm.ModelCalledBody); ok {
			got = append(got, strings.Join([]string{b.Model, strconv.Itoa(b.Attempt), strconv.Itoa(b.Status), b.Error}, "|"))
		}
	}
	want := []string{"big-1|1|500|llm: server answered 500: overloaded", "small-1|2|200|"}
	if !slices.Equal(got, want) {
		t.Fatalf("MODEL_CALLED = %q, want %q", got, want)
	}
	if c := evs[1].Body.(*fsm.TaskCreatedBody); c.Model != "big" || c.TypeVersion == "" {
		t.Fatalf("TASK_CREATED = %+v", c)
	}
	if ti := h.a.Types()[0]; ti.Model != "big" || !slices.Equal(ti.Fallback, []string{"small"}) || ti.BuiltIn {
		t.Fatalf("general = %+v", ti)
	}
	h.verify()
}

// A type naming a model Options.Models does not have, or a tool no tool
// has (with no Provider to add it), or out-of-range bounds, is refused.
func TestTypeWithAnUnknownModelIsRefused(t *testing.T) {
	l := openLog(t, vfs.NewMem())
	defer l.Close()
	for _, c := range []struct {
		tt   TaskType
		want string
	}{
		{TaskType{Name: "x", Model: "nope"}, `task type "x": unknown model "nope"`},
		{TaskType{Name: "x", Fallback: []string{"gone"}}, `task type "x": unknown model "gone"`},
		{TaskType{Name: "x", MaxIterations: 5000}, `task type "x": max iterations 5000`},
		{TaskType{Name: "x", Tools: []string{"missing"}}, `task type "x": tools: unknown tool "missing"`},
	} {
		if _, err := New(l, Options{TaskTypes: []TaskType{c.tt}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New with %+v: %v, want %q", c.tt, err, c.want)
		}
	}
}

// handleTool records a durable handle on its first run and waits; a run
// that finds the handle resumes from it and answers with a typed part.
type handleTool struct {
	mu      sync.Mutex
	handles []string // Call.Handle of each run
	arrived chan struct{}
}

func (*handleTool) Name() string                { return "job" }
func (*handleTool) Description() string         { return "a long job" }
func (*handleTool) Parameters() json.RawMessage { return nil }
func (*handleTool) Source() tools.Source        { return tools.Source{Kind: tools.SourceMCP, Server: "jobs"} }
func (*handleTool) Call(context.Context, tools.Call) (string, error) {
	return "", errors.New("CallParts is the one the agent calls")
}

func (h *handleTool) CallParts(ctx context.Context, c tools.Call) (tools.Result, error) {
	h.mu.Lock()
	h.handles = append(h.handles, c.Handle)
	h.mu.Unlock()
	if c.Handle == "" {
		if err := c.RecordHandle(ctx, "task-42"); err != nil {
			return tools.Result{}, err
		}
		h.arrived <- struct{}{}
		<-ctx.Done() // the daemon dies while the job runs
		return tools.Result{}, ctx.Err()
	}
	return tools.Result{Text: "resumed " + c.Handle, Parts: []fsm.ToolPart{{Type: fsm.PartImage, MIMEType: "image/png", Data: "aGk=", Size: 2}}}, nil
}

// checkResumed checks that task ended with the resumed job's result, and
// that the job ran twice: first without a handle, then resumed from it.
func (h *handleTool) checkResumed(t *testing.T, task fsm.Task) {
	t.Helper()
	if task.Context.FinalResult != "resumed task-42" {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(h.handles, []string{"", "task-42"}) {
		t.Fatalf("handles the runs got: %q", h.handles)
	}
}

// A tool records a durable handle (a second TOOL_CALL_STARTED); after a
// crash the call is given the handle back without a third start, and its
// typed parts are recorded in TOOL_CALL_COMPLETED.
func TestToolHandleSurvivesARestartAndPartsAreRecorded(t *testing.T) {
	ht := &handleTool{arrived: make(chan struct{}, 1)}
	fake := newFakeModel(t, func(r *chatReq) reply {
		if role, content := r.last(); role == "tool" {
			return text(content)
		}
		return calls("job", `{}`)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil), Tools: []tools.Tool{ht}, DisableReflection: true})
	id := h.submit("run the job")
	<-ht.arrived
	h.crash()
	ht.checkResumed(t, h.wait(id))
	var got []string
	for _, ev := range h.events(id) {
		switch b := ev.Body.(type) {
		case *fsm.ToolCallStartedBody:
			got = append(got, "started:"+b.Handle+":"+b.Source)
		case *fsm.ToolCallResultBody:
			if len(b.Parts) != 1 || b.Parts[0].Type != fsm.PartImage || b.Parts[0].Data != "aGk=" || b.Source != "mcp:jobs" {
				t.Fatalf("%s = %+v", ev.Type, b)
			}
			got = append(got, "completed")
		}
	}
	// The resumed run records no start of its own: the one with the
	// handle is in the log.
	if want := []string{"started::mcp:jobs", "started:task-42:mcp:jobs", "completed"}; !slices.Equal(got, want) {
		t.Fatalf("tool events %q, want %q", got, want)
	}
	h.verify()
}
