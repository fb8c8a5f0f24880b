package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// fakeClock is the broker's clock in tests: time moves only by Advance,
// and armed tells the test that the loop went back to sleep.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	armed  chan struct{} // one value per After call
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC), armed: make(chan struct{}, 1024)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
	} else {
		c.timers = append(c.timers, fakeTimer{c.now.Add(d), ch})
	}
	c.armed <- struct{}{}
	return ch
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
		} else {
			keep = append(keep, t)
		}
	}
	c.timers = keep
}

// advance moves the clock by d and wakes the broker's loop. The wake
// covers a step that read the clock just before it moved and would sleep
// until a time computed from the old one: the loop's timer is a duration
// from its own reading of the clock (as time.After is), so a move between
// that reading and the timer's arming would leave it late. A step does
// what is due at the clock's time whenever it runs, so the wake changes
// nothing but when.
func (h *harness) advance(d time.Duration) {
	h.clk.Advance(d)
	h.b.wake()
}

// settle waits until the loop has done everything due now: with the view
// caught up with the log, two full steps after a kick that append nothing.
func (h *harness) settle() {
	h.t.Helper()
	for range 100 {
		head := h.log.Head()
		if err := h.b.tasks.WaitFor(h.ctx, head); err != nil {
			h.t.Fatal(err)
		}
		for range 2 {
			for len(h.clk.armed) > 0 {
				<-h.clk.armed
			}
			h.b.wake()
			select {
			case <-h.clk.armed:
			case <-time.After(10 * time.Second):
				h.t.Fatal("the broker loop never went back to sleep")
			}
		}
		if h.log.Head() == head {
			return
		}
	}
	h.t.Fatal("the broker never settled")
}

type harness struct {
	t   *testing.T
	ctx context.Context
	log *eventlog.Log
	b   *Broker
	clk *fakeClock
	wg  sync.WaitGroup
}

func newHarness(t *testing.T) *harness { t.Helper(); return newHarnessRun(t, true) }

// newHarnessRun is newHarness; with run false the broker's loop is not
// started (harness.run starts it).
func newHarnessRun(t *testing.T, run bool) *harness { t.Helper(); return newHarnessWith(t, run, nil) }

// newHarnessWith is newHarnessRun with, if app is not nil, the broker's
// Options.Appender made from the log.
func newHarnessWith(t *testing.T, run bool, app func(*eventlog.Log) eventlog.Appender) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l, err := eventlog.Open("data", &eventlog.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := replay.Open(ctx, l, &replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	opts := Options{Now: clk.Now, After: clk.After, Jitter: func(time.Duration) time.Duration { return 0 }}
	if app != nil {
		opts.Appender = app(l)
	}
	b, err := New(l, FromView(v), opts)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: ctx, log: l, b: b, clk: clk}
	h.wg.Add(1)
	go func() { defer h.wg.Done(); _ = v.Follow(ctx, l, nil) }()
	t.Cleanup(func() {
		cancel()
		h.wg.Wait()
		_ = l.Close()
	})
	if run {
		h.run()
	}
	return h
}

// run starts the broker's loop.
func (h *harness) run() {
	h.wg.Add(1)
	go func() { defer h.wg.Done(); _ = h.b.Run(h.ctx) }()
}

func (h *harness) create(title string, prio int, caps ...string) fsm.Task {
	h.t.Helper()
	body := fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: title, Priority: prio,
		RequiredCapabilities: caps, MaxRetries: fsm.DefaultMaxRetries, RetryEligible: true})
	return h.createBody(body)
}

func (h *harness) createBody(body fsm.DispatchCreatedBody) fsm.Task {
	h.t.Helper()
	t, err := h.b.create(h.ctx, ulid.ULID{}, body, ulid.ULID{}, ulid.ULID{})
	if err != nil {
		h.t.Fatal(err)
	}
	return t
}

func (h *harness) register(id string, maxTasks int, caps ...string) {
	h.t.Helper()
	if _, err := h.b.Register(h.ctx, id, caps, maxTasks); err != nil {
		h.t.Fatal(err)
	}
}

// waitTask waits until cond holds for task id.
func (h *harness) waitTask(id string, what string, cond func(*fsm.Task) bool) fsm.Task {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	var t fsm.Task
	err := h.b.Wait(ctx, func() bool {
		var err error
		t, err = h.b.Task(id)
		return err == nil && cond(&t)
	})
	if err != nil {
		h.t.Fatalf("task %s: never %s; now %s\n%s", id, what, t.State, fsm.Describe(t))
	}
	return t
}

func assignedTo(w string) func(*fsm.Task) bool {
	return func(t *fsm.Task) bool { return t.State == fsm.StateAssigned && t.Dispatch.AssignedAgent == w }
}

// TestQueueOrderAndMatching: priority DESC then created_at ASC; every
// required capability, case-insensitive; max_tasks per worker; the least
// loaded eligible worker; drained workers get nothing new.
func TestQueueOrderAndMatching(t *testing.T) {
	h := newHarness(t)
	low := h.create("low", 1)
	high := h.create("high", 9)
	gpu := h.create("gpu job", 5, "GPU", "cuda")
	old := h.create("old mid", 5)
	young := h.create("young mid", 5)
	h.settle() // no worker: everything waits in pending
	for _, task := range []fsm.Task{low, high, gpu, old, young} {
		if got, _ := h.b.Task(task.ID); got.State != fsm.StatePending {
			t.Fatalf("%s assigned without a worker: %s", task.Dispatch.Title, got.State)
		}
	}
	// One slot: the highest priority goes first.
	h.register("cpu", 1, "general")
	h.waitTask(high.ID, "assigned to cpu", assignedTo("cpu"))
	h.settle()
	for _, task := range []fsm.Task{low, gpu, old, young} {
		if got, _ := h.b.Task(task.ID); got.State != fsm.StatePending {
			t.Fatalf("%s assigned beyond max_tasks=1", task.Dispatch.Title)
		}
	}
	// A worker with the capabilities (other case) takes the gpu job, not
	// the older mid-priority task it could also run: that one needs
	// nothing, so it goes to ... whoever is least loaded next.
	h.register("gpu-box", 1, "gpu", "CUDA", "general")
	h.waitTask(gpu.ID, "assigned to gpu-box", assignedTo("gpu-box"))
	// Finish high: cpu is free and takes the oldest of the priority-5 tasks.
	if _, _, err := h.b.Report(h.ctx, high.ID, "cpu", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{}`}); err != nil {
		t.Fatal(err)
	}
	h.waitTask(old.ID, "assigned to cpu", assignedTo("cpu"))
	// Drain gpu-box: when its task ends it gets nothing new.
	if _, err := h.b.Drain(h.ctx, "gpu-box", "operator"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.b.Report(h.ctx, gpu.ID, "gpu-box", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{}`}); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if got, _ := h.b.Task(young.ID); got.State != fsm.StatePending {
		t.Fatalf("a drained worker got a new task: %s", got.Dispatch.AssignedAgent)
	}
	w, _ := h.b.Worker("gpu-box")
	if !w.Draining || w.DrainedBy != "operator" || len(w.ActiveTasks) != 0 {
		t.Fatalf("gpu-box: %+v", w)
	}
}

// TestTimeoutWatcher: the loop wakes at the deadline the machine said, not
// before; the timed-out task is retried and, after max_retries, dead-
// lettered; a requeue brings it back with its retries reset.
func TestTimeoutWatcher(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	task := h.createBody(fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: "silent", TimeoutSeconds: 60, MaxRetries: 1, RetryEligible: true}))
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	h.settle()
	h.advance(59 * time.Second) // the 30 s check fires: nothing is due yet
	h.settle()
	if got, _ := h.b.Task(task.ID); got.State != fsm.StateAssigned {
		t.Fatalf("timed out before its deadline: %s", got.State)
	}
	h.b.Seen("w1") // still alive, still silent about the task
	h.advance(time.Second)
	got := h.waitTask(task.ID, "retried and assigned again", func(t *fsm.Task) bool {
		return t.Dispatch.RetryCount == 1 && t.State == fsm.StateAssigned
	})
	if !got.Dispatch.AssignedAt.Equal(h.clk.Now()) {
		t.Fatalf("assigned at %s, clock %s", got.Dispatch.AssignedAt, h.clk.Now())
	}
	h.settle()
	h.b.Seen("w1")
	h.advance(60 * time.Second)
	got = h.waitTask(task.ID, "dead-lettered", (*fsm.Task).IsDeadLetter)
	if got.State != fsm.StateTimedOut || got.Dispatch.DeadLetterReason != fsm.DeadLetterExhausted {
		t.Fatalf("dead letter: %s %s", got.State, got.Dispatch.DeadLetterReason)
	}
	if n := len(h.b.DLQ()); n != 1 {
		t.Fatalf("DLQ has %d tasks", n)
	}
	st := h.b.Stats()
	if st.DeadLetters != 1 || st.Retries != 1 || st.ByStatus["timed_out"] != 1 {
		t.Fatalf("stats: %+v", st)
	}
	// Requeue by filter: one atomic append, recorded with who did it.
	n, err := h.b.RequeueMatching(h.ctx, "mike", "fixed", projection.DLQFilter{Error: ""})
	if err != nil || n != 1 {
		t.Fatalf("requeue: %d %v", n, err)
	}
	got = h.waitTask(task.ID, "assigned after the requeue", assignedTo("w1"))
	if got.Dispatch.RetryCount != 0 || got.Dispatch.Requeues != 1 {
		t.Fatalf("after requeue: %+v", got.Dispatch)
	}
	if _, err := h.b.Requeue(h.ctx, task.ID, "mike", ""); !errors.Is(err, ErrNotDeadLetter) {
		t.Fatalf("requeue of a live task: %v", err)
	}
}

// TestReports: only the assigned worker reports (nothing recorded
// otherwise); a failure with retry_eligible comes back and succeeds on
// another try; a repeated completion is answered like the first.
func TestReports(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	task := h.create("flaky", 0)
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	before, _ := h.b.Task(task.ID)
	if _, _, err := h.b.Report(h.ctx, task.ID, "w2", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{}`}); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("report from another worker: %v", err)
	}
	if after, _ := h.b.Task(task.ID); after.Version != before.Version {
		t.Fatal("a refused report changed the task")
	}
	if _, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchProgress, fsm.DispatchReportBody{Message: "10%"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "flaked"}); err != nil {
		t.Fatal(err)
	}
	h.waitTask(task.ID, "retried and assigned", func(t *fsm.Task) bool { return t.Dispatch.RetryCount == 1 && t.State == fsm.StateAssigned })
	done, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{"n":1}`})
	if err != nil || replayed || done.State != fsm.StateCompleted {
		t.Fatalf("complete: %s %v %v", done.State, replayed, err)
	}
	again, replayed, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{"n":1}`})
	if err != nil || !replayed || again.Version != done.Version {
		t.Fatalf("repeated complete: v%d (first v%d) replayed=%v %v", again.Version, done.Version, replayed, err)
	}
	if _, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{"n":2}`}); !errors.Is(err, ErrNotAssigned) {
		t.Fatalf("a different second completion: %v", err)
	}
}

// TestDelayedAndBackoff: run_at keeps a task pending until then; the loop
// wakes at that time.
func TestDelayedTask(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	at := h.clk.Now().Add(10 * time.Second)
	task := h.createBody(fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: "later", RunAt: at, MaxRetries: 3, RetryEligible: true}))
	h.settle()
	if got, _ := h.b.Task(task.ID); got.State != fsm.StatePending {
		t.Fatalf("assigned before run_at: %s", got.State)
	}
	h.b.Seen("w1")
	h.advance(10 * time.Second)
	got := h.waitTask(task.ID, "assigned at run_at", assignedTo("w1"))
	if !got.Dispatch.AssignedAt.Equal(at) {
		t.Fatalf("assigned at %s, want %s", got.Dispatch.AssignedAt, at)
	}
}

// TestReturningWorkerWakesTheLoop: the lost wake-up behind a requeued task
// that stayed pending while a worker had room. A worker not heard from for
// longer than WorkerTTL gets nothing; when it calls again, that request
// must wake the loop, or the task waits for an unrelated event or the next
// CheckInterval. The fake clock stands still after the requeue, so no
// timer can stand in for the wake-up.
func TestReturningWorkerWakesTheLoop(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	task := h.createBody(fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: "flaky", MaxRetries: 0, RetryEligible: true}))
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	if _, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	h.waitTask(task.ID, "dead-lettered", (*fsm.Task).IsDeadLetter)
	h.settle()
	h.advance(2 * time.Minute) // w1 is silent beyond the 90 s WorkerTTL
	h.settle()
	if _, err := h.b.Requeue(h.ctx, task.ID, "mike", "fixed"); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if got, _ := h.b.Task(task.ID); !got.IsTerminal() && got.Dispatch.AssignedAgent != "" {
		t.Fatalf("assigned to a worker not seen for 2 minutes: %s", got.Dispatch.AssignedAgent)
	}
	h.b.Seen("w1") // w1 is back, with room: its request alone must wake the loop
	h.waitTask(task.ID, "assigned to the returning worker", assignedTo("w1"))
}

// TestTasksAppendedBeforeRun: a task the view folds between New and Run
// is assigned: Run follows the log from where New loaded the live tasks,
// not from the head when it starts.
func TestTasksAppendedBeforeRun(t *testing.T) {
	h := newHarnessRun(t, false)
	h.register("w1", 1)
	task := h.create("early", 0)
	h.run()
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
}

// TestIndexForgetsFinishedTasks: the loop's index holds the live tasks
// only; the deadlines of finished tasks do not pile up in its heaps.
func TestIndexForgetsFinishedTasks(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 2)
	for i := range 150 {
		task := h.create("t", i%3)
		h.waitTask(task.ID, "assigned", assignedTo("w1"))
		if _, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{}`}); err != nil {
			t.Fatal(err)
		}
	}
	h.settle()
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if len(h.b.live) != 0 || len(h.b.byWorker) != 0 || len(h.b.due) > 64 || len(h.b.ready) > 64 {
		t.Fatalf("index after 150 finished tasks: %d live, %d workers, %d due, %d ready",
			len(h.b.live), len(h.b.byWorker), len(h.b.due), len(h.b.ready))
	}
}

// TestOneCommitPerStep: the decisions a step takes together (here three
// timeouts, then three dead letters) are appended in one synced commit,
// not one each.
func TestOneCommitPerStep(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 3)
	var ids []string
	for range 3 {
		task := h.createBody(fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: "silent", TimeoutSeconds: 60, MaxRetries: 0, RetryEligible: false}))
		ids = append(ids, task.ID)
	}
	for _, id := range ids {
		h.waitTask(id, "assigned", assignedTo("w1"))
	}
	h.settle()
	before := h.log.Stats().Commits
	h.advance(60 * time.Second)
	for _, id := range ids {
		h.waitTask(id, "dead-lettered", (*fsm.Task).IsDeadLetter)
	}
	h.settle()
	if n := h.log.Stats().Commits - before; n != 2 {
		t.Fatalf("3 timeouts and 3 dead letters took %d commits, want 2", n)
	}
}

// TestIdleWorkerBehindUnplaceableQueue: with the only worker that has room
// unable to take the tasks at the head of the queue (they need a
// capability it lacks), a step skips them as a group, still finds the one
// task deep in the queue the worker can take, and leaves the others queued
// and counted in their place.
func TestIdleWorkerBehindUnplaceableQueue(t *testing.T) {
	h := newHarness(t)
	var waiting []fsm.Task
	for i := range 40 {
		waiting = append(waiting, h.create(fmt.Sprintf("render %d", i), 9, "GPU"))
	}
	cpu := h.create("count words", 0, "general")
	h.settle()
	h.register("cpu", 1, "General")
	h.waitTask(cpu.ID, "assigned to cpu", assignedTo("cpu"))
	h.settle()
	for _, task := range waiting {
		if got, _ := h.b.Task(task.ID); got.State != fsm.StatePending {
			t.Fatalf("%s left the queue without a gpu worker: %s", task.Dispatch.Title, got.State)
		}
	}
	h.b.mu.Lock()
	queued, keys := len(h.b.ready), maps.Clone(h.b.readyKeys)
	h.b.mu.Unlock()
	if queued != len(waiting) || len(keys) != 1 || keys["gpu"] != len(waiting) {
		t.Fatalf("ready queue: %d tasks, keys %v; want %d under \"gpu\"", queued, keys, len(waiting))
	}
	// A worker with the capability takes them in queue order.
	h.register("gpu-box", 2, "gpu")
	h.waitTask(waiting[0].ID, "assigned to gpu-box", assignedTo("gpu-box"))
	h.waitTask(waiting[1].ID, "assigned to gpu-box", assignedTo("gpu-box"))
}

// TestOwnsDecides: a broker that does not own a task neither assigns it
// nor times it out; its owner does both, from the moment it takes it
// (CheckAll).
func TestOwnsDecides(t *testing.T) {
	h := newHarnessRun(t, false)
	var owned atomic.Bool
	h.b.opts.Owns = func(string) bool { return owned.Load() }
	h.run()
	h.register("w1", 1)
	task := h.createBody(fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: "silent", TimeoutSeconds: 60, MaxRetries: 1, RetryEligible: true}))
	h.settle()
	if got, _ := h.b.Task(task.ID); got.State != fsm.StatePending {
		t.Fatalf("assigned by a broker that does not own it: %s", got.State)
	}
	owned.Store(true)
	h.b.CheckAll()
	h.waitTask(task.ID, "assigned by its owner", assignedTo("w1"))
	owned.Store(false)
	h.settle()
	h.advance(2 * time.Minute) // past the deadline and a full check
	h.settle()
	if got, _ := h.b.Task(task.ID); got.State != fsm.StateAssigned {
		t.Fatalf("timed out by a broker that does not own it: %s", got.State)
	}
	owned.Store(true)
	h.b.CheckAll()
	h.waitTask(task.ID, "timed out and retried by its owner", func(t *fsm.Task) bool { return t.Dispatch.RetryCount == 1 })
}

// TestSharedLiveness: a registered worker's requests are shared (at its
// first one, then at most every WorkerTTL/4), and a worker seen only by
// another broker (SeenElsewhere) gets this broker's tasks; an older
// sighting changes nothing.
func TestSharedLiveness(t *testing.T) {
	h := newHarnessRun(t, false)
	type sighting struct {
		worker string
		at     time.Time
	}
	shared := make(chan sighting, 16)
	h.b.opts.Share = func(w string, at time.Time) { shared <- sighting{w, at} }
	h.run()
	if err := h.b.RegisterAgentWorker(h.ctx, 1); err != nil {
		t.Fatal(err)
	}
	h.b.Seen(AgentWorkerID)
	h.b.Seen("client") // not a worker
	h.register("w1", 1)
	if got := <-shared; got.worker != "w1" || !got.at.Equal(h.clk.Now()) {
		t.Fatalf("shared %+v, want w1 at registration", got)
	}
	h.advance(20 * time.Second) // under WorkerTTL/4 (22.5s)
	h.b.Seen("w1")
	h.advance(5 * time.Second)
	h.b.Seen("w1")
	if got := <-shared; got.worker != "w1" || !got.at.Equal(h.clk.Now()) {
		t.Fatalf("shared %+v, want w1 25s after its registration", got)
	}
	select {
	case got := <-shared:
		t.Fatalf("shared %+v more often than every WorkerTTL/4, or a worker that is not one", got)
	default:
	}

	// w2 registers with another daemon (its event reaches this one's log)
	// and talks to that daemon only.
	data, err := projection.EncodeWorker(&projection.WorkerBody{Worker: "w2", Capabilities: []string{"gpu"}, MaxTasks: 1, By: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.log.Append(h.ctx, projection.WorkersStream, eventlog.Any, eventlog.Event{Type: string(projection.WorkerRegistered),
		Time: h.clk.Now(), Schema: projection.WorkerSchemaVersion, Body: data}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	if err := h.b.Wait(ctx, func() bool { _, err := h.b.Worker("w2"); return err == nil }); err != nil {
		t.Fatal("a worker registered through another daemon never reached this broker's registry")
	}
	h.advance(2 * time.Minute) // w2 is silent here beyond WorkerTTL
	h.settle()
	task := h.create("render", 0, "gpu")
	h.settle()
	if got, _ := h.b.Task(task.ID); got.State != fsm.StatePending {
		t.Fatalf("assigned to a worker nobody saw for 2 minutes: %s", got.State)
	}
	h.b.SeenElsewhere("w2", h.clk.Now().Add(-time.Second)) // its request to the other broker wakes this one
	h.waitTask(task.ID, "assigned to the worker seen elsewhere", assignedTo("w2"))
	old := h.clk.Now().Add(-time.Hour)
	h.b.SeenElsewhere("w2", old)
	if w, _ := h.b.Worker("w2"); !w.Alive || w.LastSeen.Equal(old) {
		t.Fatalf("an older sighting replaced a newer one: %+v", w)
	}
}

// TestIndexHoldsOnlySchedulingFields: the loop's index keeps what its
// decisions read, not a task's text (it would keep every queued task's
// text in memory outside the view's budget), and shares no dispatch
// fields with the view; every answer still carries the whole task.
func TestIndexHoldsOnlySchedulingFields(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1, "gpu")
	desc := strings.Repeat("d", 4096)
	body := fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: "big", Description: desc,
		RequiredCapabilities: []string{"gpu"}, MaxRetries: fsm.DefaultMaxRetries, RetryEligible: true,
		Metadata: map[string]string{"k": "v"}})
	created := h.createBody(body)
	queued := h.createBody(body)
	for _, c := range []fsm.Task{created, queued} {
		if c.Dispatch.Description != desc || c.Metadata["k"] != "v" {
			t.Fatalf("created task %s lost its fields: %+v", c.ID, c.Dispatch)
		}
	}
	h.waitTask(created.ID, "assigned", assignedTo("w1"))
	h.settle()

	h.b.mu.Lock()
	for id, e := range h.b.live {
		view, err := h.b.tasks.Task(id)
		if err != nil {
			t.Fatal(err)
		}
		if e.t.Dispatch == view.Dispatch {
			t.Errorf("index entry %s shares the view's dispatch fields", id)
		}
		if e.t.Dispatch.Description != "" || e.t.Dispatch.Title != "" || e.t.Metadata != nil || e.t.History != nil {
			t.Errorf("index entry %s holds the task's text: title %q, %d bytes of description, metadata %v, %d transitions",
				id, e.t.Dispatch.Title, len(e.t.Dispatch.Description), e.t.Metadata, len(e.t.History))
		}
	}
	n := len(h.b.live)
	h.b.mu.Unlock()
	if n != 2 {
		t.Fatalf("index holds %d tasks, want 2", n)
	}

	live := h.b.Live()
	mine := h.b.AgentTasks("w1")
	if len(live) != 2 || len(mine) != 1 || mine[0].ID != created.ID {
		t.Fatalf("Live %d tasks, AgentTasks(w1) %d, want 2 and 1 (%s)", len(live), len(mine), created.ID)
	}
	for _, x := range append(live, mine...) {
		if x.Dispatch.Description != desc || x.Dispatch.Title != "big" || x.Metadata["k"] != "v" || len(x.History) == 0 {
			t.Errorf("task %s answered without its fields: title %q, %d bytes of description, metadata %v",
				x.ID, x.Dispatch.Title, len(x.Dispatch.Description), x.Metadata)
		}
	}
}

// TestReportAnswersItsOwnOutcome: a report's answer is the task as the
// report left it, even when the loop has already folded the task's next
// event (a failure that may not be retried is dead-lettered as soon as the
// loop follows it): the failure is answered failed, not yet dead-lettered,
// at the failure's version, as docs/broker.md shows.
func TestReportAnswersItsOwnOutcome(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	task := h.create("no retry", 0)
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	testAnswering = func(id string) {
		h.waitTask(id, "dead-lettered", (*fsm.Task).IsDeadLetter)
	}
	t.Cleanup(func() { testAnswering = nil })
	no := false
	got, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "connection refused", RetryEligible: &no})
	if err != nil {
		t.Fatal(err)
	}
	last, _ := h.b.Task(task.ID)
	if got.State != fsm.StateFailed || got.IsDeadLetter() || got.Version != last.Version-1 {
		t.Fatalf("answer: %s, dead-lettered %v, v%d; the task is at v%d", got.State, got.IsDeadLetter(), got.Version, last.Version)
	}
}

// TestRequeueAnswersItsOwnOutcome: a requeue's answer is the task back in
// the queue, even when the loop has already assigned it to a worker with
// room, as docs/broker.md shows.
func TestRequeueAnswersItsOwnOutcome(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	task := h.create("no retry", 0)
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	no := false
	if _, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "boom", RetryEligible: &no}); err != nil {
		t.Fatal(err)
	}
	h.waitTask(task.ID, "dead-lettered", (*fsm.Task).IsDeadLetter)
	h.b.Seen("w1")
	testAnswering = func(id string) { h.waitTask(id, "assigned again", assignedTo("w1")) }
	t.Cleanup(func() { testAnswering = nil })
	got, err := h.b.Requeue(h.ctx, task.ID, "mike", "fixed")
	if err != nil {
		t.Fatal(err)
	}
	last, _ := h.b.Task(task.ID)
	if got.State != fsm.StatePending || got.Version != last.Version-1 {
		t.Fatalf("answer: %s at v%d; the task is %s at v%d", got.State, got.Version, last.State, last.Version)
	}
}
