package client_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/client"
	"github.com/pegasus-engine/pegasus/internal/daemontest"
)

// calls counts a handler's calls per task.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
}

func (c *calls) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// runWorker runs a worker with h until the test stops it with the
// returned function, which returns Run's error.
func runWorker(t *testing.T, c *client.Client, opts client.WorkerOptions, h client.HandlerFunc) (stop func() error) {
	t.Helper()
	w, err := client.NewWorker(c, &opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, h) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// create makes n broker tasks that require capability.
func create(t *testing.T, c *client.Client, n int, d api.CreateDispatch) []string {
	t.Helper()
	var ids []string
	for range n {
		task, err := c.CreateDispatch(t.Context(), d)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.TaskID)
	}
	return ids
}

func completed(d api.DispatchTask) bool { return d.Status == api.StatusCompleted }

// fast is a client that retries quickly: the tests' daemon restarts in
// well under a second.
var fast = client.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}

func fastClient(t *testing.T, server, agent string) *client.Client {
	t.Helper()
	o := fast
	o.AgentID = agent
	c, err := client.New(server, &o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestWorkerConcurrency: a worker with MaxTasks 3 runs three handlers at
// once, and never a fourth while they run.
func TestWorkerConcurrency(t *testing.T) {
	c := fastClient(t, server, unique("conc-worker"))
	var running, most atomic.Int32
	arrived := make(chan string, 10)
	release := make(chan struct{})
	var seen calls
	capConc := unique("conc") // the daemon is shared: a run of its own
	runWorker(t, c, client.WorkerOptions{Capabilities: []string{capConc}, MaxTasks: 3}, func(ctx context.Context, task *client.Task) (any, error) {
		seen.add(task.TaskID)
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		arrived <- task.TaskID
		<-release
		return "ok", nil
	})
	ids := create(t, c, 6, api.CreateDispatch{Title: "conc", RequiredCapabilities: []string{capConc}})
	for range 3 {
		select {
		case <-arrived:
		case <-time.After(20 * time.Second):
			t.Fatalf("fewer than 3 handlers started; calls %v", seen.get())
		}
	}
	if n := running.Load(); n != 3 {
		t.Fatalf("%d handlers run at once, want 3", n)
	}
	close(release)
	for _, id := range ids {
		waitDispatch(t, c, id, completed)
	}
	if m := most.Load(); m != 3 {
		t.Fatalf("at most %d handlers ran at once, want 3", m)
	}
	for _, id := range ids {
		if n := seen.get()[id]; n != 1 {
			t.Fatalf("task %s handled %d times", id, n)
		}
	}
}

// TestWorkerHeartbeat: a task with heartbeat_seconds 3 whose handler runs
// 7.5 s is not timed out: the worker's heartbeats keep it alive. (With 1 s
// the heartbeat sent every third of it was late once on a machine at load
// average 14, and the task was timed out and handled twice.)
func TestWorkerHeartbeat(t *testing.T) {
	c := fastClient(t, server, unique("hb-worker"))
	var seen calls
	capHb := unique("hb") // the daemon is shared: a run of its own
	runWorker(t, c, client.WorkerOptions{Capabilities: []string{capHb}}, func(ctx context.Context, task *client.Task) (any, error) {
		seen.add(task.TaskID)
		select { // the work itself: 2.5 heartbeat periods
		case <-time.After(7500 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return "slow", nil
	})
	id := create(t, c, 1, api.CreateDispatch{Title: "slow", RequiredCapabilities: []string{capHb}, HeartbeatSeconds: 3})[0]
	d := waitDispatch(t, c, id, func(d api.DispatchTask) bool {
		return d.Status != api.StatusPending && d.Status != api.StatusAssigned && d.Status != api.StatusInProgress
	})
	if d.Status != api.StatusCompleted || d.RetryCount != 0 || seen.get()[id] != 1 {
		t.Fatalf("task %+v, handled %d times: want completed at the first attempt", d, seen.get()[id])
	}
	evs, err := c.DispatchEvents(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Events {
		if ev.Type == "DISPATCH_TIMED_OUT" {
			t.Fatalf("the task timed out: %s", ev.Summary)
		}
	}
}

// TestWorkerFailures: a handler's error fails the attempt and the broker
// retries it; a Permanent error dead-letters the task at once.
func TestWorkerFailures(t *testing.T) {
	c := fastClient(t, server, unique("fail-worker"))
	var seen calls
	capFail := unique("fail") // the daemon is shared: a run of its own
	runWorker(t, c, client.WorkerOptions{Capabilities: []string{capFail}}, func(ctx context.Context, task *client.Task) (any, error) {
		seen.add(task.TaskID)
		switch {
		case task.Title == "corrupt":
			return nil, client.Permanent(errors.New("corrupt input"))
		case task.RetryCount == 0:
			return nil, errors.New("flaky")
		}
		return "second time lucky", nil
	})
	corrupt := create(t, c, 1, api.CreateDispatch{Title: "corrupt", RequiredCapabilities: []string{capFail}})[0]
	flaky := create(t, c, 1, api.CreateDispatch{Title: "flaky", RequiredCapabilities: []string{capFail}})[0]
	d := waitDispatch(t, c, corrupt, func(d api.DispatchTask) bool { return d.DeadLettered })
	if d.DeadLetterReason != "not_retry_eligible" || d.Error != "corrupt input" || d.RetryCount != 0 || seen.get()[corrupt] != 1 {
		t.Fatalf("the permanent failure: %+v, handled %d times", d, seen.get()[corrupt])
	}
	d = waitDispatch(t, c, flaky, completed)
	if d.RetryCount != 1 || seen.get()[flaky] != 2 {
		t.Fatalf("the transient failure: %+v, handled %d times; want completed at the second attempt", d, seen.get()[flaky])
	}
}

// TestWorkerDrain: once its context is done, a worker takes no new task
// and Run returns only when the running handler has finished and its
// task is completed.
func TestWorkerDrain(t *testing.T) {
	c := fastClient(t, server, unique("drain-worker"))
	var seen calls
	started := make(chan struct{})
	release := make(chan struct{})
	capDrain := unique("drain") // the daemon is shared: a run of its own
	stop := runWorker(t, c, client.WorkerOptions{Capabilities: []string{capDrain}}, func(ctx context.Context, task *client.Task) (any, error) {
		seen.add(task.TaskID)
		close(started)
		<-release
		return "drained", nil
	})
	first := create(t, c, 1, api.CreateDispatch{Title: "first", RequiredCapabilities: []string{capDrain}})[0]
	<-started
	stopped := make(chan error)
	go func() { stopped <- stop() }()
	second := create(t, c, 1, api.CreateDispatch{Title: "second", RequiredCapabilities: []string{capDrain}})[0]
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while a handler ran", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d, err := c.GetDispatch(t.Context(), first); err != nil || d.Status != api.StatusCompleted {
		t.Fatalf("the running task after the drain: %+v, %v", d, err)
	}
	if n := seen.get()[second]; n != 0 {
		t.Fatalf("the task created during the drain was handled %d times", n)
	}
}

// TestWorkerShutdownTimeout: a handler still running ShutdownTimeout
// after the drain began has its context cancelled; its task is failed,
// retryable, and Run says so.
func TestWorkerShutdownTimeout(t *testing.T) {
	c := fastClient(t, server, unique("stuck-worker"))
	started := make(chan struct{})
	capStuck := unique("stuck") // the daemon is shared: a run of its own
	stop := runWorker(t, c, client.WorkerOptions{Capabilities: []string{capStuck}, ShutdownTimeout: 100 * time.Millisecond},
		func(ctx context.Context, task *client.Task) (any, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		})
	id := create(t, c, 1, api.CreateDispatch{Title: "stuck", RequiredCapabilities: []string{capStuck}})[0]
	<-started
	if err := stop(); !errors.Is(err, client.ErrShutdownTimeout) {
		t.Fatalf("Run: %v, want ErrShutdownTimeout", err)
	}
	d := waitDispatch(t, c, id, func(d api.DispatchTask) bool { return d.RetryCount == 1 })
	if d.DeadLettered {
		t.Fatalf("the cancelled task: %+v, want retried", d)
	}
}

// countingTransport counts the requests to a path that got no answer.
type countingTransport struct {
	path   string
	failed atomic.Int32
}

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil && r.URL.Path == ct.path {
		ct.failed.Add(1)
	}
	return resp, err
}

// TestWorkerSurvivesKill: the daemon is killed with SIGKILL under a worker
// that is polling and running a task, and restarted on the same data
// directory and port. The worker rides out the failed polls and reports,
// finishes the task it ran (its completion reaches the new daemon), and
// takes new work; each task is handled once, none is lost.
func TestWorkerSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	d, err := daemontest.Start(bin, filepath.Join(dir, "data"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Kill() }()
	ct := &countingTransport{path: "/api/v1/tasks"}
	o := fast
	o.AgentID, o.HTTPClient = unique("crash-worker"), &http.Client{Transport: ct}
	c, err := client.New(d.URL, &o)
	if err != nil {
		t.Fatal(err)
	}
	var seen calls
	holding := make(chan struct{})
	release := make(chan struct{})
	capCrash := unique("crash") // the daemon is shared: a run of its own
	runWorker(t, c, client.WorkerOptions{Capabilities: []string{capCrash}, MaxTasks: 2}, func(ctx context.Context, task *client.Task) (any, error) {
		seen.add(task.TaskID)
		if task.Title == "hold" {
			close(holding)
			<-release
		}
		return task.Title, nil
	})
	spec := api.CreateDispatch{RequiredCapabilities: []string{capCrash}}
	spec.Title = "before"
	before := create(t, c, 1, spec)[0]
	waitDispatch(t, c, before, completed)
	spec.Title = "hold"
	held := create(t, c, 1, spec)[0]
	<-holding

	if err := d.Kill(); err != nil {
		t.Fatal(err)
	}
	// The worker's poll in flight breaks; the next ones find nobody.
	deadline := time.Now().Add(20 * time.Second)
	for ct.failed.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ct.failed.Load() < 2 {
		t.Fatal("the worker's polls never failed")
	}
	if d, err = d.Restart(); err != nil {
		t.Fatal(err)
	}
	close(release) // the held task completes on the new daemon
	spec.Title = "after"
	after := create(t, c, 1, spec)[0]
	for _, id := range []string{before, held, after} {
		task := waitDispatch(t, c, id, completed)
		if task.RetryCount != 0 || string(task.Result) != `"`+task.Title+`"` {
			t.Fatalf("task %s: %+v", id, task)
		}
	}
	got := seen.get()
	if len(got) != 3 || got[before] != 1 || got[held] != 1 || got[after] != 1 {
		t.Fatalf("handled %v, want each of %s once", got, strings.Join([]string{before, held, after}, ", "))
	}
}
