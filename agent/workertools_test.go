package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/broker"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

// brokerClock is the broker's clock in these tests: time moves only by
// Advance (then CheckAll has the broker look again).
type brokerClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *brokerClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// After never fires: the tests wake the broker with CheckAll after moving
// the clock, so no timer races a test's step.
func (c *brokerClock) After(time.Duration) <-chan time.Time { return nil }

func (c *brokerClock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// brokerSide is a real broker over the agent's view, started after the
// agent (it needs the view) and again after each restart; Delegate waits
// for it.
type brokerSide struct {
	t      *testing.T
	clk    *brokerClock
	mu     sync.Mutex
	b      *broker.Broker
	ready  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	calls  int // Delegate calls
	block  chan struct{}
}

func newBrokerSide(t *testing.T) *brokerSide {
	return &brokerSide{t: t, clk: &brokerClock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}, ready: make(chan struct{})}
}

// delegate is the agent's Options.Delegate: the broker's CreateToolTask.
// With block set, the first call waits for it (or its context) instead.
func (s *brokerSide) delegate(ctx context.Context, d Delegation) error {
	s.mu.Lock()
	s.calls++
	block, ready := s.block, s.ready
	s.block = nil
	s.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	b := s.b
	s.mu.Unlock()
	return b.CreateToolTask(ctx, broker.ToolCall(d))
}

// start runs a broker over h's agent and registers worker "w1" with caps.
func (s *brokerSide) start(h *harness, caps ...string) {
	s.t.Helper()
	b, err := broker.New(h.log, broker.FromView(h.a.View()), broker.Options{Now: s.clk.Now, After: s.clk.After,
		Jitter: func(time.Duration) time.Duration { return 0 }})
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(ctx) }()
	if _, err := b.Register(testCtx(s.t), "w1", caps, 4); err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.b, s.cancel, s.done = b, cancel, done
	close(s.ready)
	s.mu.Unlock()
}

// stop stops the broker's loop (before the agent closes the log).
func (s *brokerSide) stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.ready = nil, make(chan struct{})
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// take waits until worker w1 holds a task whose retry count is retries
// and returns it.
func (s *brokerSide) take(retries int) fsm.Task {
	s.t.Helper()
	var got fsm.Task
	err := s.b.WaitAgent(testCtx(s.t), "w1", func() bool {
		for _, t := range s.b.AgentTasks("w1") {
			if t.Dispatch.RetryCount == retries {
				got = t
				return true
			}
		}
		return false
	})
	if err != nil {
		s.t.Fatalf("worker w1 got no task (retry %d): %v", retries, err)
	}
	return got
}

// report is worker w1's report on task id.
func (s *brokerSide) report(id string, kind fsm.EventType, rep fsm.DispatchReportBody) {
	s.t.Helper()
	if _, _, err := s.b.Report(testCtx(s.t), id, "w1", kind, rep); err != nil {
		s.t.Fatalf("%s on %s: %v", kind, id, err)
	}
}

var weatherTool = &tools.WorkerTool{ToolName: "weather", ToolDescription: "The weather in a city.",
	Params:     json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
	Capability: "weather", TimeoutSeconds: 30, MaxRetries: 2, HeartbeatSeconds: 10}

func weatherScript(r *chatReq) reply {
	if role, content := r.last(); role == "tool" {
		return text("weather says: " + content)
	}
	return calls("weather", `{"city":"Paris"}`)
}

func workerHarness(t *testing.T, s *brokerSide) *harness {
	fake := newFakeModel(t, weatherScript)
	h := newHarness(t, Options{Model: fake.client(t, nil), Tools: []tools.Tool{weatherTool}, Delegate: s.delegate,
		DisableReflection: true})
	t.Cleanup(s.stop) // before the harness's own cleanup closes the log
	s.start(h, "weather")
	return h
}

// weatherCall starts a broker and an agent, submits a task that calls the
// weather worker tool, and returns once worker w1 holds the broker task.
func weatherCall(t *testing.T) (*brokerSide, *harness, string, fsm.Task) {
	t.Helper()
	s := newBrokerSide(t)
	h := workerHarness(t, s)
	id := h.submit("weather in Paris?")
	return s, h, id, s.take(0)
}

// A worker tool's call runs as a dispatch task created through the broker:
// the agent task waits for it, and the worker's result is the call's.
func TestWorkerToolRunsAsABrokerTask(t *testing.T) {
	s, h, id, job := weatherCall(t)
	waiting, _ := h.a.Task(id)
	if act := fsm.Next(&waiting); act.Kind != fsm.ActWaitTask || act.Task != job.ID || act.Kind.NeedsSlot() {
		t.Fatalf("the agent task's work while the worker runs: %s", act)
	}
	if job.ParentID != id || job.Context.Source != broker.ToolSource || job.Dispatch.Description != `{"city":"Paris"}` ||
		job.Dispatch.HeartbeatSeconds != 10 || job.Dispatch.TimeoutSeconds != 30 || job.Dispatch.MaxRetries != 2 ||
		job.Metadata[broker.MetaIdempotencyKey] != IdempotencyKey(id, 1, 0) || job.Metadata[broker.MetaTool] != "weather" {
		t.Fatalf("the dispatch task = %+v %+v", job, job.Dispatch)
	}
	if _, _, err := s.b.Report(testCtx(t), job.ID, "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{"sky":"clear"}`}); err != nil {
		t.Fatal(err)
	}
	task := h.wait(id)
	if task.Context.FinalResult != `weather says: {"sky":"clear"}` {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	evs := h.events(id)
	var started *fsm.ToolCallStartedBody
	var startedAt, completed int
	for i, ev := range evs {
		switch b := ev.Body.(type) {
		case *fsm.ToolCallStartedBody:
			started, startedAt = b, i
		case *fsm.ToolCallResultBody:
			completed = i
			if b.Task != job.ID || b.Source != "worker:weather" || b.Result != `{"sky":"clear"}` || ev.Type != fsm.ToolCallCompleted {
				t.Fatalf("%s = %+v", ev.Type, b)
			}
		}
	}
	if started == nil || started.Task != job.ID || started.Source != "worker:weather" || completed == 0 {
		t.Fatalf("TOOL_CALL_STARTED = %+v; events %s", started, types(evs))
	}
	created := h.events(job.ID)[0]
	if created.Type != fsm.DispatchCreated {
		t.Fatalf("the dispatch task starts with %s", created.Type)
	}
	raw, err := h.log.Get(created.ID)
	if err != nil || raw.Causation != evs[startedAt].ID {
		t.Fatalf("DISPATCH_CREATED caused by %s, want the TOOL_CALL_STARTED %s (%v)", raw.Causation, evs[startedAt].ID, err)
	}
	if cs := s.b.Children(id); len(cs) != 1 || cs[0] != job.ID {
		t.Fatalf("children of the agent task = %v", cs)
	}
	s.stop()
	h.assertNoIssues()
	h.verify()
}

// A broker task that exhausts its retries by heartbeat timeouts fails the
// call with the broker's reason, which the model sees; the task goes on.
func TestWorkerToolDeadLetterFailsTheCall(t *testing.T) {
	s := newBrokerSide(t)
	h := workerHarness(t, s)
	id := h.submit("weather in Paris?")
	for retry := range 3 { // max_retries 2: three attempts
		s.take(retry)
		s.clk.Advance(11 * time.Second) // past heartbeat_seconds=10
		s.b.CheckAll()
	}
	task := h.wait(id)
	const why = "tool weather failed: dead-lettered after 3 timeouts (heartbeat_seconds=10)"
	if task.State != fsm.StateCompleted || !strings.Contains(task.Context.FinalResult, why) {
		t.Fatalf("task %s result %q", task.State, task.Context.FinalResult)
	}
	var failed *fsm.ToolCallResultBody
	for _, ev := range h.events(id) {
		if ev.Type == fsm.ToolCallFailed {
			failed = ev.Body.(*fsm.ToolCallResultBody)
		}
	}
	if failed == nil || failed.Error != why || failed.Task == "" {
		t.Fatalf("TOOL_CALL_FAILED = %+v", failed)
	}
	// `pegasus-replay why` walks the causation tree from the input: the
	// broker task hangs under the call, and the failure says why.
	w, err := replay.Explain(testCtx(t), replay.FromLog(h.log), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	var walk func(n *replay.Node)
	walk = func(n *replay.Node) {
		fe, derr := replay.Decode(n.Event)
		lines = append(lines, replay.Summarize(fe, derr))
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(w.Tree)
	tree := strings.Join(lines, "\n")
	for _, want := range []string{why, "source=worker:weather", `title="tool weather"`, "reason=retries_exhausted", "model=fake-1", "type_version="} {
		if !strings.Contains(tree, want) {
			t.Errorf("why's tree does not say %q:\n%s", want, tree)
		}
	}
	s.stop()
	h.verify()
}

// A crash between TOOL_CALL_STARTED (which names the broker task) and the
// broker task's creation: after the restart the waiting step creates it,
// with the same id and key, and there is one broker task, not two.
func TestWorkerToolCrashBeforeTheBrokerTaskIsCreated(t *testing.T) {
	s := newBrokerSide(t)
	s.block = make(chan struct{}) // the first Delegate waits: the "crash" comes first
	h := workerHarness(t, s)
	id := h.submit("weather in Paris?")
	h.waitUntil(id, func(t *fsm.Task) bool { return t.Context.PendingCall != nil && t.Context.PendingCall.Task != "" })
	pending, _ := h.a.Task(id)
	child := pending.Context.PendingCall.Task

	s.stop()
	h.crash()
	if _, err := h.a.Task(child); !errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("the broker task exists before the restart created it: %v", err)
	}
	s.start(h, "weather")
	job := s.take(0)
	if job.ID != child {
		t.Fatalf("the broker task is %s, want the id recorded before the crash %s", job.ID, child)
	}
	s.report(job.ID, fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `"sunny"`})
	task := h.wait(id)
	if task.Context.FinalResult != `weather says: "sunny"` {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	if all := s.b.Tasks(); len(all) != 1 {
		t.Fatalf("%d broker tasks, want 1", len(all))
	}
	s.mu.Lock()
	calls := s.calls
	s.mu.Unlock()
	if calls != 2 {
		t.Fatalf("Delegate called %d times, want 2 (before the crash, after the restart)", calls)
	}
	s.stop()
	h.verify()
}

// Delegating the same call twice (the same child, or the same key) creates
// one broker task.
func TestCreateToolTaskIsIdempotent(t *testing.T) {
	s, h, id, job := weatherCall(t)
	d := broker.ToolCall{Parent: id, Child: job.ID, Key: IdempotencyKey(id, 1, 0), Tool: weatherTool, Arguments: json.RawMessage(`{"city":"Paris"}`)}
	if err := s.b.CreateToolTask(testCtx(t), d); err != nil {
		t.Fatal(err)
	}
	d.Child = h.log.NewID().String() // another id, the same key
	if err := s.b.CreateToolTask(testCtx(t), d); err != nil {
		t.Fatal(err)
	}
	if all := s.b.Tasks(); len(all) != 1 {
		t.Fatalf("%d broker tasks, want 1", len(all))
	}
}

// Without a broker (no Delegate) a worker tool's call fails at once.
func TestWorkerToolWithoutABrokerFails(t *testing.T) {
	fake := newFakeModel(t, weatherScript)
	h := newHarness(t, Options{Model: fake.client(t, nil), Tools: []tools.Tool{weatherTool}, DisableReflection: true})
	task := h.wait(h.submit("weather?"))
	if !strings.Contains(task.Context.FinalResult, "no broker") {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	h.verify()
}

// crash stops the agent with a spent deadline, so that its running stages
// are cancelled and their outcomes never recorded, as in a crash, and
// starts it again over the same files.
func (h *harness) crash() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.a.Stop(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.a = nil
	h.start()
}

func (h *harness) waitUntil(id string, cond func(*fsm.Task) bool) fsm.Task {
	h.t.Helper()
	task, err := h.a.WaitUntil(testCtx(h.t), id, cond)
	if err != nil {
		h.t.Fatalf("waiting for %s: %v", id, err)
	}
	return task
}

// Cancelling the agent task cancels its tool call's broker task: the
// broker records DISPATCH_CANCELLED and dead-letters it, and the worker's
// late report is refused.
func TestCancellingTheAgentTaskCancelsTheBrokerTask(t *testing.T) {
	s, h, id, job := weatherCall(t)
	s.report(job.ID, fsm.DispatchProgress, fsm.DispatchReportBody{Message: "looking"})
	if _, err := h.a.Cancel(testCtx(t), id, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	ended := h.waitUntil(job.ID, func(t *fsm.Task) bool { return t.IsDeadLetter() })
	if ended.State != fsm.StateFailed || !strings.HasPrefix(ended.Dispatch.Error, "cancelled: agent task "+id+" failed: cancelled: changed my mind") {
		t.Fatalf("the broker task: %s %q", ended.State, ended.Dispatch.Error)
	}
	var got []string
	for _, ev := range h.events(job.ID) {
		got = append(got, string(ev.Type))
	}
	if want := "DISPATCH_CREATED DISPATCH_ASSIGNED DISPATCH_STARTED DISPATCH_CANCELLED DISPATCH_DEAD_LETTERED"; strings.Join(got, " ") != want {
		t.Fatalf("broker task events %v, want %s", got, want)
	}
	if _, _, err := s.b.Report(testCtx(t), job.ID, "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `1`}); err == nil {
		t.Fatal("a report on a cancelled task was accepted")
	}
	s.stop()
	h.verify()
}

// An agent task suspended while its tool call's broker task runs keeps
// waiting for it; resumed after the broker task ended, it records the
// result at once.
func TestWorkerToolResultAfterASuspension(t *testing.T) {
	s, h, id, job := weatherCall(t)
	if _, err := h.a.Suspend(testCtx(t), id, "later"); err != nil {
		t.Fatal(err)
	}
	s.report(job.ID, fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `"rain"`})
	h.waitUntil(job.ID, func(t *fsm.Task) bool { return t.State == fsm.StateCompleted })
	if _, err := h.a.Resume(testCtx(t), id, "now"); err != nil {
		t.Fatal(err)
	}
	if task := h.wait(id); task.Context.FinalResult != `weather says: "rain"` {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	s.stop()
	h.verify()
}
