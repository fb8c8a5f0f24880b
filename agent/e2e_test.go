package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// timeScript calls current_time once, then answers with its result, and
// learns nothing when asked to reflect.
func timeScript(r *chatReq) reply {
	if strings.HasPrefix(*r.Messages[0].Content, "You maintain the long-term memory") {
		return text("Nothing new.")
	}
	if role, content := r.last(); role == "tool" {
		return text("It is " + content + ".")
	}
	return calls("current_time", `{}`)
}

func TestToolLoopAgainstChatCompletions(t *testing.T) {
	fake := newFakeModel(t, timeScript)
	at := time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC)
	h := newHarness(t, Options{Model: fake.client(t, nil), Now: func() time.Time { return at }})

	id := h.submit("what time is it?")
	task := h.wait(id)
	if got := path(task); got != "idle > reasoning > acting > reasoning > acting > completed" {
		t.Fatalf("path = %s", got)
	}
	if task.Context.FinalResult != "It is 2025-06-07T08:09:10Z." {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	task = h.waitReflected(id)
	evs := h.events(id)
	want := "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED TOOL_CALL_COMPLETED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED MODEL_CALLED REFLECTION_COMPLETE"
	if got := types(evs); got != want {
		t.Fatalf("events =\n%s\nwant\n%s", got, want)
	}
	started := evs[4].Body.(*fsm.ToolCallStartedBody)
	if started.IdempotencyKey != IdempotencyKey(id, 1, 0) || started.Tool != "current_time" || started.ToolCallID == "" {
		t.Fatalf("TOOL_CALL_STARTED = %+v", started)
	}
	mc := evs[2].Body.(*fsm.ModelCalledBody)
	if mc.Model != "fake-1" || mc.Status != 200 || mc.Attempt != 1 || mc.PromptTokens != 10 || mc.CompletionTokens != 2 || mc.Purpose != "reason" || len(mc.ToolCalls) != 1 {
		t.Fatalf("MODEL_CALLED = %+v", mc)
	}
	if r := evs[11].Body.(*fsm.ReflectionCompleteBody); r.Reflection.Assessment != "Nothing new." || task.Context.PostReflection == nil {
		t.Fatalf("reflection = %+v", r)
	}

	// Causation and correlation: the input that created the task is its
	// first event and the root of the chain; every later event is caused by
	// an earlier event of the task, and correlates to the input.
	input := evs[0]
	if input.Type != fsm.MessageReceived || input.Causation != (ulid.ULID{}) || input.Correlation != input.ID {
		t.Fatalf("first event = %s caused by %s, correlation %s", input.Type, input.Causation, input.Correlation)
	}
	seen := map[ulid.ULID]bool{input.ID: true}
	for _, ev := range evs[1:] {
		if !seen[ev.Causation] {
			t.Errorf("%s %s: causation %s is not an earlier event of the chain", ev.Type, ev.ID, ev.Causation)
		}
		if ev.Correlation != input.ID {
			t.Errorf("%s: correlation %s, want the input %s", ev.Type, ev.Correlation, input.ID)
		}
		seen[ev.ID] = true
	}
	if evs[0].ID.String() != id || evs[1].Causation != evs[0].ID || evs[5].Causation != evs[4].ID {
		t.Errorf("task id, admission or tool causation wrong: %s %s %s", evs[0].ID, evs[1].Causation, evs[5].Causation)
	}
	h.assertNoKeyInLog("sk-fake-key-123456")
	h.assertNoIssues()
	h.verify()
}

func (h *harness) waitReflected(id string) fsm.Task {
	h.t.Helper()
	task, err := h.a.WaitUntil(testCtx(h.t), id, func(t *fsm.Task) bool { return t.Context.PostReflection != nil })
	if err != nil {
		h.t.Fatalf("waiting for reflection: %v", err)
	}
	return task
}

func (h *harness) assertNoKeyInLog(key string) {
	h.t.Helper()
	it := h.log.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		if bytes.Contains(ev.Body, []byte(key)) || strings.Contains(fmt.Sprint(ev.Metadata), key) {
			h.t.Fatalf("the API key is in event %d (%s)", ev.Seq, ev.Type)
		}
	}
}

func (h *harness) assertNoIssues() {
	h.t.Helper()
	if issues, n := h.a.View().Issues(); n != 0 {
		h.t.Fatalf("the fold refused %d events: %+v", n, issues)
	}
}

func TestClarificationSuspendsUntilAMessage(t *testing.T) {
	fake := newFakeModel(t, func(r *chatReq) reply {
		switch _, last := r.last(); last {
		case "book a table", "For how many people?":
			return calls("ask_user", `{"question":"For how many people?"}`)
		case "four":
			return text("Booked for four.")
		}
		return reply{status: 400, content: "unexpected conversation"}
	})
	h := newHarness(t, Options{Model: fake.client(t, nil), DisableReflection: true})
	id := h.submit("book a table")
	task := h.waitState(id, fsm.StateSuspended)
	if task.Context.SuspendReason != "For how many people?" || !task.Context.Reasoning.NeedsClarification {
		t.Fatalf("suspended with %q %+v", task.Context.SuspendReason, task.Context.Reasoning)
	}
	if _, err := h.a.Resume(testCtx(t), id, ""); err != nil {
		// Resuming a clarification re-asks: legal, and it goes back to reasoning.
		t.Fatal(err)
	}
	h.waitState(id, fsm.StateSuspended)
	if _, err := h.a.SendMessage(testCtx(t), id, "four", "test"); err != nil {
		t.Fatal(err)
	}
	task = h.wait(id)
	if task.State != fsm.StateCompleted || task.Context.FinalResult != "Booked for four." {
		t.Fatalf("task = %s %q", task.State, task.Context.FinalResult)
	}
	if got := path(task); got != "idle > reasoning > suspended > reasoning > suspended > reasoning > acting > completed" {
		t.Fatalf("path = %s", got)
	}
	// The conversation: input, question, the question again (after the
	// resume), the answer, the reply. Questions are recorded as plain
	// assistant text, without the ask_user call.
	roles := ""
	for _, m := range task.Context.Messages {
		roles += m.Role[:1]
		if len(m.ToolCalls) != 0 {
			t.Errorf("a recorded question carries tool calls: %+v", m)
		}
	}
	if roles != "uaaua" {
		t.Fatalf("messages = %s: %+v", roles, task.Context.Messages)
	}
	// A message to a task that is not suspended is refused.
	if _, err := h.a.SendMessage(testCtx(t), id, "again", "test"); !errors.Is(err, fsm.ErrInvalidTransition) {
		t.Fatalf("message to a completed task: %v", err)
	}
	h.assertNoIssues()
}

func TestCancelWhileReasoning(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	fake := newFakeModel(t, func(r *chatReq) reply {
		arrived <- struct{}{}
		<-release
		return text("too late")
	})
	h := newHarness(t, Options{Model: fake.client(t, nil)})
	id := h.submit("slow question")
	<-arrived
	task, err := h.a.Cancel(testCtx(t), id, "changed my mind")
	if err != nil {
		t.Fatal(err)
	}
	if task.State != fsm.StateFailed || task.Context.Error != "cancelled: changed my mind" {
		t.Fatalf("after cancel: %s %q", task.State, task.Context.Error)
	}
	close(release)
	h.stop() // waits for the stage: whatever it does after the cancel must not land
	h.start()
	evs := h.events(id)
	if got := types(evs); got != "MESSAGE_RECEIVED TASK_CREATED TASK_FAILED" {
		t.Fatalf("events = %s", got)
	}
	if b := evs[2].Body.(*fsm.TaskFailedBody); b.Reason != "cancelled" {
		t.Fatalf("reason = %q", b.Reason)
	}
	if _, err := h.a.Cancel(testCtx(t), id, ""); !errors.Is(err, fsm.ErrInvalidTransition) {
		t.Fatalf("cancelling a failed task: %v", err)
	}
	if _, err := h.a.Cancel(testCtx(t), "01JAAAAAAAAAAAAAAAAAAAAAAA", ""); !errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("cancelling an unknown task: %v", err)
	}
}

// blockingModel answers every call with the same text once released; it
// ignores cancellation, as a slow server might.
type blockingModel struct {
	calls   chan struct{}
	release chan struct{}
}

func (m *blockingModel) Name() string { return "blocking" }
func (m *blockingModel) Complete(ctx context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	m.calls <- struct{}{}
	<-m.release
	r := llm.Response{Content: "done"}
	report(llm.Attempt{Number: 1, Model: "blocking", Response: &r})
	return r, nil
}

func TestStaleOutcomeIsDroppedAsAConflict(t *testing.T) {
	m := &blockingModel{calls: make(chan struct{}, 4), release: make(chan struct{})}
	h := newHarness(t, Options{Model: m})
	id := h.submit("anything")
	<-m.calls
	stale, err := h.a.Task(id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.a.Suspend(testCtx(t), id, "hold on"); err != nil {
		t.Fatal(err)
	}
	close(m.release)
	// Run a reasoning stage on the snapshot taken before the suspend, with
	// a context nobody cancels: its outcome must be refused by the log.
	h.a.stage(context.Background(), &stale)
	h.stop()
	h.start()
	if got := types(h.events(id)); got != "MESSAGE_RECEIVED TASK_CREATED TASK_SUSPENDED" {
		t.Fatalf("events = %s", got)
	}
	task, _ := h.a.Task(id)
	if task.State != fsm.StateSuspended {
		t.Fatalf("state = %s", task.State)
	}
	h.assertNoIssues()
}

func TestMaxIterationsFailsTheTask(t *testing.T) {
	fake := newFakeModel(t, func(r *chatReq) reply { return calls("current_time", `{}`) })
	h := newHarness(t, Options{Model: fake.client(t, nil), MaxIterations: 3, DisableReflection: true})
	id := h.submit("loop forever")
	task := h.wait(id)
	if task.State != fsm.StateFailed || !strings.Contains(task.Context.Error, "within 3 reasoning iterations") {
		t.Fatalf("task = %s %q", task.State, task.Context.Error)
	}
	evs := h.events(id)
	if n := strings.Count(types(evs), "REASON_DONE"); n != 3 {
		t.Fatalf("%d reasoning rounds, want 3: %s", n, types(evs))
	}
	if b := evs[len(evs)-1].Body.(*fsm.TaskFailedBody); b.Reason != "max_iterations" {
		t.Fatalf("reason = %q", b.Reason)
	}
	if n, _ := fake.counts(); n != 3 {
		t.Fatalf("model called %d times, want 3", n)
	}
}

func TestModelErrorsAreRetriedThenFail(t *testing.T) {
	fake := newFakeModel(t, func(r *chatReq) reply { return reply{status: 500, content: "model overloaded"} })
	h := newHarness(t, Options{Model: fake.client(t, func(o *llm.Options) { o.MaxAttempts = 3 })})
	id := h.submit("hello")
	task := h.wait(id)
	if task.State != fsm.StateFailed || !strings.Contains(task.Context.Error, "after 3 attempt(s)") || !strings.Contains(task.Context.Error, "model overloaded") {
		t.Fatalf("task = %s %q", task.State, task.Context.Error)
	}
	evs := h.events(id)
	if got := types(evs); got != "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED MODEL_CALLED MODEL_CALLED TASK_FAILED" {
		t.Fatalf("events = %s", got)
	}
	for i, ev := range evs[2:5] {
		mc := ev.Body.(*fsm.ModelCalledBody)
		if mc.Attempt != i+1 || mc.Status != 500 || !strings.Contains(mc.Error, "model overloaded") {
			t.Errorf("attempt %d recorded as %+v", i+1, mc)
		}
	}
	if b := evs[5].Body.(*fsm.TaskFailedBody); b.Reason != "model_error" {
		t.Fatalf("reason = %q", b.Reason)
	}
}

func TestModelRecoversAfterARetry(t *testing.T) {
	var mu sync.Mutex
	n := 0
	fake := newFakeModel(t, func(r *chatReq) reply {
		mu.Lock()
		defer mu.Unlock()
		if n++; n == 1 {
			return reply{status: 429, content: "rate limited"}
		}
		return text("fine")
	})
	h := newHarness(t, Options{Model: fake.client(t, nil)})
	id := h.submit("hello")
	if task := h.wait(id); task.Context.FinalResult != "fine" {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	if got := types(h.events(id)); got != "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED MODEL_CALLED REASON_DONE STEP_COMPLETED TASK_COMPLETED" {
		t.Fatalf("events = %s", got)
	}
}

func TestLLMSemaphoreHolds(t *testing.T) {
	const tasks, limit = 10, 3
	release := make(chan struct{})
	fake := newFakeModel(t, func(r *chatReq) reply { <-release; return text("ok") })
	fake.arrived = make(chan int, tasks)
	waits := make(chan struct{}, tasks)
	h := newHarness(t, Options{Model: fake.client(t, nil), MaxActiveTasks: tasks, MaxConcurrentLLM: limit})
	h.a.testLLMWait = func() { waits <- struct{}{} }
	var ids []string
	for i := range tasks {
		ids = append(ids, h.submit(fmt.Sprintf("task %d", i)))
	}
	// Every task reached the semaphore and three calls reached the server:
	// with the semaphore holding, no other call can be on its way.
	for range tasks {
		<-waits
	}
	for range limit {
		<-fake.arrived
	}
	if rt := h.a.Runtime(); rt.LLMInUse != limit || rt.ActiveSlots != tasks {
		t.Fatalf("runtime = %+v", rt)
	}
	fake.mu.Lock()
	inflight := fake.inflight
	fake.mu.Unlock()
	if inflight != limit {
		t.Fatalf("%d calls at the server, want %d", inflight, limit)
	}
	close(release)
	for _, id := range ids {
		h.wait(id)
	}
	if _, m := fake.counts(); m > limit {
		t.Fatalf("%d concurrent model calls, limit %d", m, limit)
	}
}

// gateTool blocks every call until released and counts concurrency and
// the idempotency keys it saw.
type gateTool struct {
	mu      sync.Mutex
	in, max int
	keys    []string
	arrived chan struct{}
	release chan struct{}
}

func (g *gateTool) Name() string                { return "gate" }
func (g *gateTool) Description() string         { return "waits" }
func (g *gateTool) Parameters() json.RawMessage { return nil }
func (g *gateTool) Call(ctx context.Context, c tools.Call) (string, error) {
	g.mu.Lock()
	g.in++
	g.max = max(g.max, g.in)
	g.keys = append(g.keys, c.IdempotencyKey)
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.in--; g.mu.Unlock() }()
	if g.arrived != nil {
		g.arrived <- struct{}{}
	}
	select {
	case <-g.release:
		return "opened", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func gateScript(r *chatReq) reply {
	if role, _ := r.last(); role == "tool" {
		return text("passed")
	}
	return calls("gate", `{}`)
}

func TestToolSemaphoreHolds(t *testing.T) {
	const tasks, limit = 6, 2
	g := &gateTool{arrived: make(chan struct{}, tasks), release: make(chan struct{})}
	fake := newFakeModel(t, gateScript)
	waits := make(chan struct{}, tasks)
	h := newHarness(t, Options{Model: fake.client(t, nil), Tools: []tools.Tool{g}, MaxActiveTasks: tasks,
		MaxConcurrentTools: limit, DisableReflection: true})
	h.a.testToolWait = func() { waits <- struct{}{} }
	var ids []string
	for i := range tasks {
		ids = append(ids, h.submit(fmt.Sprintf("task %d", i)))
	}
	for range tasks {
		<-waits
	}
	for range limit {
		<-g.arrived
	}
	g.mu.Lock()
	in := g.in
	g.mu.Unlock()
	if in != limit || h.a.Runtime().ToolsInUse != limit {
		t.Fatalf("%d tool calls running, want %d", in, limit)
	}
	close(g.release)
	for _, id := range ids {
		if task := h.wait(id); task.Context.FinalResult != "passed" {
			t.Fatalf("result = %q", task.Context.FinalResult)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.max > limit {
		t.Fatalf("%d concurrent tool calls, limit %d", g.max, limit)
	}
}

func TestAdmissionByPriorityThenAge(t *testing.T) {
	var mu sync.Mutex
	var order []string
	first := make(chan struct{})
	fake := newFakeModel(t, func(r *chatReq) reply {
		in := r.firstUser()
		mu.Lock()
		order = append(order, in)
		mu.Unlock()
		if in == "plug" {
			<-first
		}
		return text("ok " + in)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil), MaxActiveTasks: 1})
	plug := h.submit("plug")
	h.waitState(plug, fsm.StateReasoning)
	var ids []string
	for _, p := range []struct {
		text string
		prio int
	}{{"b5", 5}, {"c1", 1}, {"d1", 1}, {"e-1", -1}} {
		id, err := h.a.SubmitInput(testCtx(t), Input{Text: p.text, Priority: p.prio})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if task, _ := h.a.Task(id); !h.a.Queued(id) || task.State != fsm.StateIdle {
			t.Fatalf("task %s is not queued in idle: %s", id, task.State)
		}
	}
	if rt := h.a.Runtime(); rt.Queued != 4 || rt.ActiveSlots != 1 {
		t.Fatalf("runtime = %+v", rt)
	}
	close(first)
	for _, id := range ids {
		h.wait(id)
	}
	if got := strings.Join(order, ","); got != "plug,e-1,c1,d1,b5" {
		t.Fatalf("admission order = %s", got)
	}
}

func TestQueuedTaskWaitsInIdleAcrossARestart(t *testing.T) {
	release := make(chan struct{})
	fake := newFakeModel(t, func(r *chatReq) reply {
		if r.firstUser() == "plug" {
			<-release
		}
		return text("ok " + r.firstUser())
	})
	h := newHarness(t, Options{Model: fake.client(t, nil), MaxActiveTasks: 1, DisableReflection: true})
	plug := h.submit("plug")
	h.waitState(plug, fsm.StateReasoning)
	queued := h.submit("queued")
	if task, _ := h.a.Task(queued); task.State != fsm.StateIdle || task.Context.Iteration != 0 {
		t.Fatalf("queued task = %s iteration %d, want idle 0", task.State, task.Context.Iteration)
	}

	// Stop with a spent deadline, as if the daemon went down: the queued
	// task was never admitted, so its stream holds only its input.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h.a = nil
	close(release)
	h.start()
	if idle := h.a.Recovery().Idle; len(idle) != 1 || idle[0].ID != queued {
		t.Fatalf("recovered idle tasks = %v, want [%s]", idle, queued)
	}
	for _, id := range []string{plug, queued} {
		if task := h.wait(id); task.State != fsm.StateCompleted {
			t.Fatalf("task %s = %s", id, task.State)
		}
	}
	if got := types(h.events(queued)); !strings.HasPrefix(got, "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED") {
		t.Fatalf("queued task's events = %s", got)
	}
	h.assertNoIssues()
}

func TestToolOutsideTheTaskTypeFailsTheStep(t *testing.T) {
	fake := newFakeModel(t, func(r *chatReq) reply {
		if role, _ := r.last(); role == "tool" {
			return text("could not write")
		}
		return calls("memory_write", `{"path":"facts/x.md","content":"x"}`)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil), DisableReflection: true})
	id, err := h.a.SubmitInput(testCtx(t), Input{Text: "note this", TaskType: TypeExplore})
	if err != nil {
		t.Fatal(err)
	}
	task := h.wait(id)
	if task.State != fsm.StateCompleted || len(task.Context.ActionsDone) != 2 {
		t.Fatalf("task = %s %+v", task.State, task.Context.ActionsDone)
	}
	ad := task.Context.ActionsDone[0]
	if ad.Success || !strings.Contains(ad.Error, `tool "memory_write" is not available to explore tasks`) {
		t.Fatalf("action = %+v", ad)
	}
	if got := types(h.events(id)); strings.Contains(got, "TOOL_CALL_STARTED") {
		t.Fatalf("a refused tool was started: %s", got)
	}
	if _, ok := h.a.View().Fact("facts/x.md"); ok {
		t.Fatal("memory written by an explore task")
	}
	if _, err := h.a.SubmitInput(testCtx(t), Input{Text: "x", TaskType: "nope"}); !errors.Is(err, ErrUnknownTaskType) {
		t.Fatalf("unknown type: %v", err)
	}
}

func TestNotifyAndMemoryTools(t *testing.T) {
	fake := newFakeModel(t, func(r *chatReq) reply {
		role, content := r.last()
		switch {
		case role == "user":
			return calls("notify", `{"message":"on it"}`, "memory_write", `{"path":"facts/user.md","content":"> Summary: the user\nName: Ada\n"}`)
		case strings.HasPrefix(content, "wrote"):
			return calls("memory_read", `{"path":"facts/user.md"}`)
		}
		return text("remembered: " + content)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil), DisableReflection: true})
	notes := make(chan Notification, 8)
	h.a.OnNotify(func(n Notification) { notes <- n })
	id := h.submit("remember my name is Ada")
	task := h.wait(id)
	if task.Context.FinalResult != "remembered: > Summary: the user\nName: Ada\n" {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	if n := <-notes; n.Type != NotifyMessage || n.Message != "on it" || n.TaskID != id {
		t.Fatalf("notification = %+v", n)
	}
	evs := h.events(id)
	// The two calls of the turn run side by side: both start, then their
	// results come in plan order, the notification before its call's.
	want := "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED TOOL_CALL_STARTED TASK_NOTIFY TOOL_CALL_COMPLETED TOOL_CALL_COMPLETED"
	if got := types(evs); !strings.HasPrefix(got, want) {
		t.Fatalf("events = %s", got)
	}
	mem := h.events(projection.MemoryStream)
	if len(mem) != 1 || mem[0].Type != projection.MemoryWritten || mem[0].Causation != evs[5].ID || mem[0].Correlation != evs[0].Correlation {
		t.Fatalf("memory events = %+v (write started by %s)", mem, evs[5].ID)
	}
	// The next task sees the memory index on its first reasoning.
	fake.setScript(func(r *chatReq) reply {
		for _, m := range r.Messages {
			if m.Content != nil && strings.HasPrefix(*m.Content, memoryIndexHeader) {
				return text(*m.Content)
			}
		}
		return text("no index")
	})
	if res := h.wait(h.submit("who am I?")).Context.FinalResult; !strings.Contains(res, "- facts/user.md: the user (") {
		t.Fatalf("index = %q", res)
	}
}

func TestReflectionWritesMemoryAndNeverChangesTheOutcome(t *testing.T) {
	fake := newFakeModel(t, func(r *chatReq) reply {
		if strings.HasPrefix(*r.Messages[0].Content, "You maintain the long-term memory") {
			if role, _ := r.last(); role == "tool" {
				return text("Learned the user's timezone habit.")
			}
			return calls("memory_append", `{"path":"episodes/2025-06.md","entry":"# Time check\n> Summary: asked the time\n"}`)
		}
		return timeScript(r)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil)})
	id := h.submit("time please")
	task := h.waitReflected(id)
	pr := task.Context.PostReflection
	if pr.Assessment != "Learned the user's timezone habit." || pr.ToolCallsCount != 1 || len(pr.Facts) != 1 || pr.Episode == nil || pr.Episode.Summary != "asked the time" {
		t.Fatalf("reflection = %+v", pr)
	}
	if f, ok := h.a.View().Fact("episodes/2025-06.md"); !ok || !strings.Contains(f.Content, "Time check") {
		t.Fatalf("episode not in memory: %+v", f)
	}
	if task.State != fsm.StateCompleted || !strings.HasPrefix(task.Context.FinalResult, "It is ") {
		t.Fatalf("outcome changed: %s %q", task.State, task.Context.FinalResult)
	}

	// A failing reflection is logged and leaves the task as it was.
	fake.setScript(func(r *chatReq) reply {
		if strings.HasPrefix(*r.Messages[0].Content, "You maintain the long-term memory") {
			return reply{status: 400, content: "no"}
		}
		return timeScript(r)
	})
	id2 := h.submit("time again")
	h.wait(id2)
	h.stop() // waits for the background reflection
	h.start()
	task2, _ := h.a.Task(id2)
	if task2.State != fsm.StateCompleted || task2.Context.PostReflection != nil {
		t.Fatalf("task after a failed reflection: %s %+v", task2.State, task2.Context.PostReflection)
	}
	evs := h.events(id2)
	if last := evs[len(evs)-1]; last.Type != fsm.ModelCalled || last.Body.(*fsm.ModelCalledBody).Status != 400 {
		t.Fatalf("last event = %s", types(evs))
	}
}

// TestReflectionEpisodeIsTheEntryWithItsLesson: the episode recorded in
// REFLECTION_COMPLETE is the entry the reflection appended to the monthly
// episodes file, lesson included, not the file's first entry.
func TestReflectionEpisodeIsTheEntryWithItsLesson(t *testing.T) {
	entries := map[string]string{
		"first time":  "# Time check\n> Summary: asked the time\nThe user wanted the time.\nLesson: answer in UTC unless told otherwise\n",
		"second time": "\n# Second check\n> Summary: asked again\nThe same question.\n> **Lesson:** keep the clock tool at hand\n",
	}
	fake := newFakeModel(t, func(r *chatReq) reply {
		if strings.HasPrefix(*r.Messages[0].Content, "You maintain the long-term memory") {
			if role, _ := r.last(); role == "tool" {
				return text("Recorded an episode.")
			}
			for input, entry := range entries {
				if strings.Contains(*r.Messages[1].Content, "Input:\n"+input+"\n") {
					args, _ := json.Marshal(map[string]string{"path": "episodes/2025-06.md", "entry": entry})
					return calls("memory_append", string(args))
				}
			}
			return text("Nothing new.")
		}
		return timeScript(r)
	})
	h := newHarness(t, Options{Model: fake.client(t, nil)})
	for _, c := range []struct{ input, title, summary, lesson string }{
		{"first time", "Time check", "asked the time", "answer in UTC unless told otherwise"},
		{"second time", "Second check", "asked again", "keep the clock tool at hand"},
	} {
		pr := h.waitReflected(h.submit(c.input)).Context.PostReflection
		if ep := pr.Episode; ep == nil || ep.Title != c.title || ep.Summary != c.summary || ep.Lesson != c.lesson || ep.Details != entries[c.input] {
			t.Fatalf("%s: episode = %+v", c.input, ep)
		}
	}
	if f, _ := h.a.View().Fact("episodes/2025-06.md"); f.Content != entries["first time"]+entries["second time"] {
		t.Fatalf("episodes file = %q", f.Content)
	}
}

func TestRestartResumesAToolCallWithTheSameKey(t *testing.T) {
	g := &gateTool{arrived: make(chan struct{}, 4), release: make(chan struct{})}
	fake := newFakeModel(t, gateScript)
	opts := Options{Model: fake.client(t, nil), Tools: []tools.Tool{g}, DisableReflection: true, MaxActiveTasks: 1}
	h := newHarness(t, opts)
	id := h.submit("pass the gate")
	<-g.arrived
	// A second task waits in idle for the slot. Only active tasks can be
	// suspended; a waiting one can be cancelled, and stays failed across
	// the restart.
	other := h.submit("other")
	if o, _ := h.a.Task(other); !h.a.Queued(other) || o.State != fsm.StateIdle {
		t.Fatalf("second task not queued in idle: %s", o.State)
	}
	if _, err := h.a.Suspend(testCtx(t), other, "later"); !errors.Is(err, fsm.ErrInvalidTransition) {
		t.Fatalf("suspending a queued task: %v, want an invalid transition", err)
	}
	if _, err := h.a.Cancel(testCtx(t), other, "later"); err != nil {
		t.Fatal(err)
	}

	// Stop with a spent deadline: the running tool call is cancelled and
	// its completion is never recorded, as in a crash after the start.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h.a = nil
	close(g.release)
	h.start()
	task := h.wait(id)
	if task.Context.FinalResult != "passed" {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	key := IdempotencyKey(id, 1, 0)
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.keys) != 2 || g.keys[0] != key || g.keys[1] != key {
		t.Fatalf("tool keys = %v, want %s twice", g.keys, key)
	}
	got := types(h.events(id))
	if want := "MESSAGE_RECEIVED TASK_CREATED MODEL_CALLED REASON_DONE TOOL_CALL_STARTED TOOL_CALL_STARTED TOOL_CALL_COMPLETED"; !strings.HasPrefix(got, want) {
		t.Fatalf("events = %s", got)
	}
	if o, _ := h.a.Task(other); o.State != fsm.StateFailed || o.Context.Error != "cancelled: later" {
		t.Fatalf("other task = %s %q", o.State, o.Context.Error)
	}
	if got := types(h.events(other)); got != "MESSAGE_RECEIVED TASK_FAILED" {
		t.Fatalf("other task's events = %s", got)
	}
	sys := types(h.events(projection.SystemStream))
	if sys != "SYSTEM_STARTED SYSTEM_STOPPED SYSTEM_STARTED" {
		t.Fatalf("system events = %s", sys)
	}
	h.assertNoIssues()
}
