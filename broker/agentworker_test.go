package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// runAgentWorker runs b's built-in worker until the returned stop is
// called (or the test ends).
func (h *harness) runAgentWorker(b *Broker) (stop func()) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.RunAgentWorker(ctx, 2) }()
	stop = func() { cancel(); <-done }
	h.t.Cleanup(stop)
	return stop
}

// childEvents appends to a child task what the agent would have: its
// machine's events, at the child's version.
func (h *harness) childEvents(id string, bodies ...fsm.Body) {
	h.t.Helper()
	c, err := h.b.tasks.Task(id)
	if err != nil {
		h.t.Fatal(err)
	}
	var evs []eventlog.Event
	for _, b := range bodies {
		data, err := fsm.Encode(b)
		if err != nil {
			h.t.Fatal(err)
		}
		evs = append(evs, eventlog.Event{Type: string(b.EventType()), Schema: fsm.SchemaVersion, Body: data, Causation: c.LastEvent})
	}
	res, err := h.log.Append(h.ctx, id, eventlog.Exactly(c.Version), evs...)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.b.tasks.WaitFor(h.ctx, res.LastSeq); err != nil {
		h.t.Fatal(err)
	}
}

func childCreated(c *fsm.Task) *fsm.TaskCreatedBody {
	return &fsm.TaskCreatedBody{Machine: c.Machine, TaskType: c.Type, InputText: c.Context.InputText,
		Source: c.Context.Source, Priority: c.Priority, ParentTaskID: c.ParentID}
}

// streamTypes lists the types of a stream's events.
func (h *harness) streamTypes(stream string) []string {
	h.t.Helper()
	var out []string
	it := h.log.ReadStream(stream, 1)
	defer it.Close()
	for it.Next() {
		out = append(out, it.Event().Type)
	}
	if err := it.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// waitChildren waits until broker task id has n children in b's index,
// all folded, and returns them. It looks after every event appended.
func (h *harness) waitChildren(b *Broker, id string, n int) []fsm.Task {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	sub := h.log.Subscribe(ctx, 1)
	defer sub.Close()
	var out []fsm.Task
	for {
		out = out[:0]
		for _, c := range b.Children(id) {
			if ct, err := h.b.tasks.Task(c); err == nil {
				out = append(out, ct)
			}
		}
		if len(out) == n {
			return out
		}
		ev, err := sub.Next(ctx)
		if err == nil {
			err = h.b.tasks.WaitFor(ctx, ev.Seq)
		}
		if err != nil {
			h.t.Fatalf("task %s: %d children, want %d", id, len(out), n)
		}
	}
}

func mustULID(t *testing.T, s string) ulid.ULID {
	t.Helper()
	id, err := ulid.ParseStrict(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestAgentWorker: the built-in agent registers as a worker; a broker task
// that asks for one of its capabilities runs as a pegasus.task child; the
// child's failure fails the attempt (retry_eligible), the retry runs a new
// child, whose result completes the broker task; a task that asks for no
// capability is left to external workers.
func TestAgentWorker(t *testing.T) {
	h := newHarness(t)
	h.runAgentWorker(h.b)
	w := h.waitWorker(AgentWorkerID)
	if !slices.Equal(w.Capabilities, AgentCapabilities) || w.MaxTasks != 2 {
		t.Fatalf("registered as %+v", w)
	}
	plain := h.create("no capability asked", 5)
	task := h.create("plan the trip", 0, "Plan")

	first := h.waitChildren(h.b, task.ID, 1)[0]
	if first.ParentID != task.ID || first.Type != "plan" || first.Context.Source != AgentSource || first.Context.InputText != "plan the trip" {
		t.Fatalf("child: %s", fsm.Describe(first))
	}
	started := h.waitTask(task.ID, "started by pegasus", func(t *fsm.Task) bool { return t.State == fsm.StateInProgress })
	if ev, err := h.log.Get(mustULID(t, first.ID)); err != nil || ev.Causation != started.LastEvent {
		t.Fatalf("the child's input is caused by %v, want the start report %s (%v)", ev.Causation, started.LastEvent, err)
	}

	// The agent fails the child: the attempt fails, retryable; the retry
	// runs as a second child.
	h.childEvents(first.ID, childCreated(&first), &fsm.TaskFailedBody{Reason: "model_error", Error: "the model is down"})
	children := h.waitChildren(h.b, task.ID, 2)
	second := children[0] // in id order: the retry's child may sort first
	if second.ID == first.ID {
		second = children[1]
	}
	got, _ := h.b.Task(task.ID)
	if got.Dispatch.RetryCount != 1 {
		t.Fatalf("after the child failed: %s", fsm.Describe(got))
	}
	var failed fsm.DispatchReportBody
	h.findBody(task.ID, fsm.DispatchFailed, &failed)
	if !strings.Contains(failed.Error, "the model is down") || failed.RetryEligible == nil || !*failed.RetryEligible {
		t.Fatalf("failure report: %+v", failed)
	}

	// The second child completes: so does the broker task, with its result.
	h.childEvents(second.ID, childCreated(&second),
		&fsm.ReasonDoneBody{Plan: fsm.Plan{Goal: "answer", Steps: []fsm.PlanStep{{ActionType: fsm.ActionRespond, ActionParams: map[string]string{"text": "go by train"}}}}},
		&fsm.StepCompletedBody{Result: "go by train"}, &fsm.TaskCompletedBody{Result: "go by train"})
	done := h.waitTask(task.ID, "completed", func(t *fsm.Task) bool { return t.State == fsm.StateCompleted })
	var res map[string]string
	if err := json.Unmarshal([]byte(done.Dispatch.Result), &res); err != nil || res["result"] != "go by train" || res["pegasus_task_id"] != second.ID {
		t.Fatalf("result %s (%v)", done.Dispatch.Result, err)
	}
	if got, _ := h.b.Task(plain.ID); got.State != fsm.StatePending {
		t.Fatalf("a task asking for no capability went to the built-in agent: %s", got.State)
	}
}

// TestAgentWorkerRestart: what a crash leaves half done is finished at
// start-up, once: a started task whose child was never created gets it;
// a child that ended before its report was appended is reported; the
// registration is not recorded again; the index of children is rebuilt.
func TestAgentWorkerRestart(t *testing.T) {
	h := newHarness(t)
	stop := h.runAgentWorker(h.b)
	h.waitWorker(AgentWorkerID)
	ended := h.create("ended while down", 0, "agent")
	c := h.waitChildren(h.b, ended.ID, 1)[0]
	stop()

	// While the worker is down: ended's child completes (no report yet),
	// and a new task is assigned to pegasus and started, but its child is
	// not created (the crash came between the two).
	h.childEvents(c.ID, childCreated(&c),
		&fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{ActionType: fsm.ActionRespond}}}},
		&fsm.StepCompletedBody{Result: "done"}, &fsm.TaskCompletedBody{Result: "done"})
	h.b.Seen(AgentWorkerID)
	half := h.create("started, no child", 0, "explore")
	h.waitTask(half.ID, "assigned", assignedTo(AgentWorkerID))
	if _, _, err := h.b.Report(h.ctx, half.ID, AgentWorkerID, fsm.DispatchProgress, fsm.DispatchReportBody{Message: "starting"}); err != nil {
		t.Fatal(err)
	}

	// A new broker over the same log and view (a restart), its worker only.
	b2, err := New(h.log, h.b.tasks, Options{Now: h.clk.Now, After: h.clk.After})
	if err != nil {
		t.Fatal(err)
	}
	if got := b2.Children(ended.ID); len(got) != 1 || got[0] != c.ID {
		t.Fatalf("children after the restart: %v", got)
	}
	h.runAgentWorker(b2)
	h.waitTask(ended.ID, "completed", func(t *fsm.Task) bool { return t.State == fsm.StateCompleted })
	hc := h.waitChildren(b2, half.ID, 1)[0]
	if hc.Type != "explore" {
		t.Fatalf("child type %q", hc.Type)
	}
	// Let both finish and look at the log: one report, one child each.
	h.childEvents(hc.ID, childCreated(&hc), &fsm.TaskFailedBody{Reason: "cancelled", Error: "cancelled"})
	h.waitTask(half.ID, "retried", func(t *fsm.Task) bool { return t.Dispatch.RetryCount == 1 })
	if got := strings.Join(h.streamTypes(ended.ID), " "); got != "DISPATCH_CREATED DISPATCH_ASSIGNED DISPATCH_STARTED DISPATCH_COMPLETED" {
		t.Fatalf("ended: %s", got)
	}
	if got := strings.Count(strings.Join(h.streamTypes(half.ID), " "), "DISPATCH_FAILED"); got != 1 {
		t.Fatalf("half: %d failure reports", got)
	}
	if got := h.streamTypes(projection.WorkersStream); len(got) != 1 {
		t.Fatalf("worker events: %v (the restart registered again)", got)
	}
}

func (h *harness) waitWorker(id string) WorkerInfo {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	var w WorkerInfo
	if err := h.b.Wait(ctx, func() bool {
		var err error
		w, err = h.b.Worker(id)
		return err == nil
	}); err != nil {
		h.t.Fatalf("worker %s never registered", id)
	}
	return w
}

// findBody decodes the last event of type et on stream into body.
func (h *harness) findBody(stream string, et fsm.EventType, body fsm.Body) {
	h.t.Helper()
	it := h.log.ReadStream(stream, 1)
	defer it.Close()
	found := false
	for it.Next() {
		if ev := it.Event(); ev.Type == string(et) {
			b, err := fsm.Decode(et, ev.Schema, ev.Body)
			if err != nil {
				h.t.Fatal(err)
			}
			data, _ := json.Marshal(b)
			if err := json.Unmarshal(data, body); err != nil {
				h.t.Fatal(err)
			}
			found = true
		}
	}
	if !found {
		h.t.Fatalf("no %s on %s", et, stream)
	}
}

// TestChildIndex: a task's children come from the broker's index, kept as
// tasks are created and rebuilt by New (a restart); grandchildren are the
// children's, not the parent's.
func TestChildIndex(t *testing.T) {
	h := newHarness(t)
	parent := h.create("parent", 0)
	var want []string
	for i := range 3 {
		body := fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: fmt.Sprint("child ", i), ParentTaskID: parent.ID, MaxRetries: 1, RetryEligible: true})
		want = append(want, h.createBody(body).ID)
	}
	grand := h.createBody(fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: "grandchild", ParentTaskID: want[0], MaxRetries: 1, RetryEligible: true}))
	if got := h.b.Children(parent.ID); !slices.Equal(got, want) {
		t.Fatalf("children %v, want %v", got, want)
	}
	b2, err := New(h.log, h.b.tasks, Options{Now: h.clk.Now, After: h.clk.After})
	if err != nil {
		t.Fatal(err)
	}
	if got := b2.Children(parent.ID); !slices.Equal(got, want) {
		t.Fatalf("after a restart: children %v, want %v", got, want)
	}
	if got := b2.Children(want[0]); len(got) != 1 || got[0] != grand.ID {
		t.Fatalf("grandchildren %v", got)
	}
	if got := b2.Children(grand.ID); len(got) != 0 {
		t.Fatalf("a leaf has children %v", got)
	}
	// A child indexed before its creation is folded (the built-in worker
	// indexes its child first) is not named until the view holds it.
	pending := ulid.Make().String()
	b2.children.add(parent.ID, pending)
	if got := b2.Children(parent.ID); !slices.Equal(got, want) {
		t.Fatalf("a child the view does not hold is named: %v, want %v", got, want)
	}
}

// TestAgentWorkerCancelsStaleChild: when an attempt run by the built-in
// agent times out, its child, still running, is cancelled (TASK_FAILED,
// caused by the timeout); the retry's child runs.
func TestAgentWorkerCancelsStaleChild(t *testing.T) {
	h := newHarness(t)
	h.runAgentWorker(h.b)
	h.waitWorker(AgentWorkerID)
	task := h.createBody(fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: "slow thought",
		RequiredCapabilities: []string{"agent"}, TimeoutSeconds: 60, MaxRetries: 1, RetryEligible: true}))
	first := h.waitChildren(h.b, task.ID, 1)[0]
	h.childEvents(first.ID, childCreated(&first)) // the agent admitted it: it reasons
	h.waitTask(task.ID, "started", func(t *fsm.Task) bool { return t.State == fsm.StateInProgress })
	h.advance(60 * time.Second)
	children := h.waitChildren(h.b, task.ID, 2)
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	sub := h.log.Subscribe(ctx, 1)
	defer sub.Close()
	for {
		c, err := h.b.tasks.Task(first.ID)
		if err == nil && c.IsTerminal() {
			if c.Context.Error == "" || !strings.Contains(c.Context.Error, task.ID) {
				t.Fatalf("the stale child ended with %q", c.Context.Error)
			}
			ev, _ := h.log.Get(mustULID(t, c.LastEvent.String()))
			if cause, _ := h.log.Get(ev.Causation); cause.Type != string(fsm.DispatchTimedOut) {
				t.Fatalf("the cancel is caused by %s, want the timeout", cause.Type)
			}
			break
		}
		ev, err := sub.Next(ctx)
		if err == nil {
			err = h.b.tasks.WaitFor(ctx, ev.Seq)
		}
		if err != nil {
			t.Fatalf("the stale child was never cancelled: %v", err)
		}
	}
	for _, c := range children {
		if now, _ := h.b.tasks.Task(c.ID); c.ID != first.ID && now.IsTerminal() {
			t.Fatal("the retry's child was cancelled")
		}
	}
	if got, _ := h.b.Task(task.ID); got.Dispatch.RetryCount != 1 {
		t.Fatalf("task: %s", fsm.Describe(got))
	}
}

// TestAgentWorkerOwns: the built-in worker of a daemon that does not own
// a broker task assigned to "pegasus" (another daemon's worker runs it)
// leaves it alone; once it owns the task, it starts it.
func TestAgentWorkerOwns(t *testing.T) {
	h := newHarnessRun(t, false)
	var owned atomic.Bool
	h.b.opts.Owns = func(string) bool { return owned.Load() }
	h.run()
	if err := h.b.RegisterAgentWorker(h.ctx, 1); err != nil {
		t.Fatal(err)
	}
	h.b.Seen(AgentWorkerID)
	owned.Store(true) // assigned by its owner, then given away
	task := h.create("plan the trip", 0, "plan")
	h.waitTask(task.ID, "assigned to pegasus", assignedTo(AgentWorkerID))
	owned.Store(false)
	w := &agentWorker{b: h.b, wake: make(chan struct{}, 1), ended: map[string]ulid.ULID{}, mine: map[string]struct{}{}}
	w.step(h.ctx, true)
	if got, _ := h.b.Task(task.ID); got.State != fsm.StateAssigned || len(h.b.Children(task.ID)) != 0 {
		t.Fatalf("a worker that does not own the task ran it: %s, children %v", got.State, h.b.Children(task.ID))
	}
	owned.Store(true)
	w.step(h.ctx, true)
	h.waitTask(task.ID, "started by its owner's worker", func(t *fsm.Task) bool { return t.State == fsm.StateInProgress })
	h.waitChildren(h.b, task.ID, 1)
}

// TestAgentWorkerTypes: the built-in worker's capabilities are "agent" and
// the agent's task types (a configuration's too), and a broker task that
// requires one of them, in any case, runs as an agent task of that type.
func TestAgentWorkerTypes(t *testing.T) {
	b := &Broker{opts: Options{AgentTaskTypes: []string{"general", "explore", "plan", "Research"}}.EnsureDefaults()}
	if got, want := b.AgentCapabilities(), []string{"agent", "general", "explore", "plan", "research"}; !slices.Equal(got, want) {
		t.Fatalf("capabilities %v, want %v", got, want)
	}
	for caps, want := range map[string]string{"RESEARCH": "Research", "agent": "general", "gpu,plan": "plan"} {
		if got := b.agentTaskType(strings.Split(caps, ",")); got != want {
			t.Errorf("a task requiring %s runs as type %q, want %q", caps, got, want)
		}
	}
	if d := (&Broker{opts: Options{}.EnsureDefaults()}).AgentCapabilities(); !slices.Equal(d, AgentCapabilities) {
		t.Errorf("default capabilities %v, want %v", d, AgentCapabilities)
	}
}
