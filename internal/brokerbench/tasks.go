package brokerbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/client"
)

// The agent's workload (issue 15): clients create no-op tasks with POST
// /v1/tasks, and the daemon's agent runs each (admission, one model call
// that answers at once, the response): four synced appends per task, each
// stage dispatched once the previous one is folded. The daemon's model
// must answer at once: the offline model (no --llm-base-url), to which
// the input "noop" is neither a question about the time nor a request to
// remember something, so it answers with one sentence and calls no tool.
//
// Completion is observed without asking about each task:
//
//   - the closed loop polls GET /v1/stats every StatsEvery for the count of
//     finished tasks (its cost to the daemon is one small read per poll,
//     whatever the rate); the run ends at the poll that sees them all, so
//     its time is late by at most StatsEvery;
//   - the open loop follows GET /v1/events/stream (Server-Sent Events) from
//     the log's head at the start, and a task's create-to-complete runs
//     from its due time to its TASK_COMPLETED event reaching the client:
//     the latency a client watching its tasks sees. The stream costs the
//     daemon the JSON form of every event, which at the open loop's rate
//     is a small part of its time.
//
// A task that fails (TASK_FAILED) fails the run.

// TasksInput is the input of every task of RunTasks.
const TasksInput = "noop"

// statsEvery is how often the closed loop of RunTasks polls /v1/stats.
const statsEvery = 5 * time.Millisecond

// finished is the count of tasks the daemon's stats show finished.
type finished struct{ completed, failed int64 }

// agent is the agent's workload's client of the daemon.
type agent struct{ c *client.Client }

func (a agent) finished(ctx context.Context) (finished, uint64, error) {
	var st struct {
		Tasks struct{ Completed, Failed int64 }
		Log   struct{ Head uint64 }
	}
	if err := a.c.Do(ctx, "GET", "/v1/stats", nil, nil, &st); err != nil {
		return finished{}, 0, err
	}
	return finished{st.Tasks.Completed, st.Tasks.Failed}, st.Log.Head, nil
}

// RunTasks runs the agent's workload: Clients, Tasks, Rate and Duration
// as for Run (Workers, MaxTasks and Prefix are not used). It fails on the
// first request the daemon refuses, on a task that fails, or when ctx
// ends before every task is done.
func RunTasks(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	want, err := cfg.want()
	if err != nil {
		return Result{}, err
	}
	cs := newClients(cfg, cfg.Clients)
	defer cs.close()
	cl, err := cs.as("client")
	if err != nil {
		return Result{}, err
	}
	c := agent{cl}
	base, head, err := c.finished(ctx)
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if cfg.Rate <= 0 {
		start := time.Now()
		errc := make(chan error, 1)
		go func() { errc <- closedLoop(ctx, cfg.Clients, want, c.create) }()
		end, err := c.waitFinished(ctx, base, want)
		if err != nil {
			cancel(err)
		}
		if cerr := <-errc; err == nil {
			err = cerr
		}
		if err != nil {
			return Result{}, err
		}
		return newResult(want, end.Sub(start), 0, nil), nil
	}
	w, err := c.watch(ctx, head)
	if err != nil {
		return Result{}, err
	}
	defer w.close()
	start := time.Now()
	go func() {
		if err := openLoop(ctx, start, cfg.Rate, want, func(ctx context.Context, t0 time.Time) error {
			id, err := c.createTask(ctx)
			if err == nil {
				w.created(id, t0)
			}
			return err
		}); err != nil {
			cancel(err)
		}
	}()
	lat, last, err := w.wait(ctx, int(want))
	if err != nil {
		return Result{}, err
	}
	return newResult(want, last.Sub(start), cfg.Rate, lat), nil
}

func (a agent) create(ctx context.Context, _ time.Time) error {
	_, err := a.createTask(ctx)
	return err
}

func (a agent) createTask(ctx context.Context) (string, error) {
	created, err := a.c.Submit(ctx, api.CreateTask{Input: TasksInput})
	return created.TaskID, err
}

// waitFinished polls the stats until n tasks more than base are finished
// and returns the time it saw them.
func (a agent) waitFinished(ctx context.Context, base finished, n int64) (time.Time, error) {
	tick := time.NewTicker(statsEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("brokerbench: waiting for %d tasks to finish: %w", n, context.Cause(ctx))
		case <-tick.C:
		}
		f, _, err := a.finished(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if f.failed > base.failed {
			return time.Time{}, fmt.Errorf("brokerbench: %d tasks failed", f.failed-base.failed)
		}
		if f.completed-base.completed >= n {
			return time.Now(), nil
		}
	}
}

// watcher follows the event stream and matches each TASK_COMPLETED with
// the time its task was due to be created.
type watcher struct {
	stop  context.CancelFunc
	mu    sync.Mutex
	due   map[string]time.Time // created, not yet seen completed
	done  map[string]time.Time // seen completed, not yet known created
	lat   []time.Duration
	last  time.Time
	fail  error
	event chan struct{} // a task matched, or the stream failed
}

// watch starts following the event stream after seq.
func (a agent) watch(ctx context.Context, after uint64) (*watcher, error) {
	sub := a.c.Subscribe(client.StreamOptions{AfterSeq: after})
	ctx, stop := context.WithCancel(ctx)
	w := &watcher{stop: stop, due: map[string]time.Time{}, done: map[string]time.Time{}, event: make(chan struct{}, 1)}
	go func() {
		defer sub.Close()
		err := w.read(ctx, sub)
		w.mu.Lock()
		w.fail = fmt.Errorf("brokerbench: the event stream ended: %w", err)
		w.mu.Unlock()
		w.wake()
	}()
	return w, nil
}

func (w *watcher) close() { w.stop() }

func (w *watcher) wake() {
	select {
	case w.event <- struct{}{}:
	default:
	}
}

// read matches the completions of the stream until it fails.
func (w *watcher) read(ctx context.Context, sub *client.Subscription) error {
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		switch ev.Type {
		case "TASK_FAILED":
			return fmt.Errorf("task %s failed", ev.Stream)
		case "TASK_COMPLETED":
			w.mu.Lock()
			if t0, ok := w.due[ev.Stream]; ok {
				delete(w.due, ev.Stream)
				w.matched(t0, now)
			} else {
				w.done[ev.Stream] = now
			}
			w.mu.Unlock()
		}
	}
}

// created records that task id was created, due at t0.
func (w *watcher) created(id string, t0 time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at, ok := w.done[id]; ok {
		delete(w.done, id)
		w.matched(t0, at)
		return
	}
	w.due[id] = t0
}

func (w *watcher) matched(t0, at time.Time) {
	w.lat = append(w.lat, at.Sub(t0))
	if at.After(w.last) {
		w.last = at
	}
	w.wake()
}

// wait returns the latencies once n tasks are matched, and the time of
// the last completion.
func (w *watcher) wait(ctx context.Context, n int) ([]time.Duration, time.Time, error) {
	for {
		w.mu.Lock()
		lat, last, fail := w.lat, w.last, w.fail
		w.mu.Unlock()
		if len(lat) >= n {
			return lat, last, nil
		}
		if fail != nil {
			return nil, time.Time{}, fail
		}
		select {
		case <-w.event:
		case <-ctx.Done():
			return nil, time.Time{}, fmt.Errorf("brokerbench: %d of %d tasks done: %w", len(lat), n, context.Cause(ctx))
		}
	}
}
