// Package brokerbench holds pegasusd's black-box benchmark workloads, run
// against a daemon's URL over HTTP:
//
//   - Run, the Dispatch broker's (issue 12, docs/benchmarks.md "The
//     broker"): clients create no-op tasks (POST /api/v1/tasks) while
//     workers long-poll for their assignments and complete each task with
//     one request, as real workers do;
//   - RunTasks, the agent's (issue 15, docs/benchmarks.md "Tasks through
//     the HTTP API", tasks.go): clients create no-op tasks (POST
//     /v1/tasks) that the daemon's own agent runs with its model.
//
// The go benchmarks of cmd/pegasusd and pegasus-bench -broker and -tasks
// run them.
//
// Two shapes each. Closed loop (Rate 0): Clients create Tasks tasks as fast as
// the broker answers; the figure is tasks/s. Open loop (Rate > 0): one task
// is offered every 1/Rate seconds for Duration, whatever the broker's
// answers, and the latency of each task counts from the time it was due to
// be sent (no coordinated omission); the figure is p50/p99.
//
// In the broker's workload, create-to-complete is measured from the
// client's send (its time travels in the task's metadata) to the worker's
// 200 answer to /complete.
package brokerbench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/client"
)

// Config is one run. Each field's comment ends with its default.
type Config struct {
	// URL is the daemon's root, e.g. http://127.0.0.1:7070. Required.
	URL string
	// Token is sent as a bearer token when set (a daemon with --token).
	// The default value is none.
	Token string
	// Clients create tasks in the closed loop. The default value is 16.
	Clients int
	// Workers long-poll and complete; each registers with MaxTasks. The
	// default values are 8 and 4.
	Workers, MaxTasks int
	// Tasks is how many tasks the closed loop creates. The default value
	// is 10,000.
	Tasks int
	// Rate > 0 makes an open loop: tasks offered per second, for Duration.
	// The default value is 0 (closed loop).
	Rate float64
	// Duration of the open loop. The default value is 10s.
	Duration time.Duration
	// Prefix names the workers (PREFIX0, PREFIX1, ...) so that runs against
	// one daemon do not share them. The default value is "bench".
	Prefix string
}

func (c Config) withDefaults() Config {
	if c.Clients <= 0 {
		c.Clients = 16
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.MaxTasks <= 0 {
		c.MaxTasks = 4
	}
	if c.Tasks <= 0 {
		c.Tasks = 10000
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = "bench"
	}
	return c
}

// Result is a run's figures.
type Result struct {
	Tasks   int           // tasks created and completed
	Elapsed time.Duration // from the first create to the last completion
	PerSec  float64       // Tasks / Elapsed
	Offered float64       // the open loop's rate (0: closed loop)
	P50     time.Duration // create-to-complete
	P99     time.Duration
	Max     time.Duration
	// AssignP50 and AssignP99 are the create-to-assign part, up to the
	// broker's assigned_at (the daemon's clock: on one machine, the same).
	AssignP50, AssignP99 time.Duration
}

type run struct {
	cfg Config
	cs  *clients
	c   *client.Client // the tasks' creator, agent "client"

	mu   sync.Mutex
	lat  []time.Duration
	alat []time.Duration // create-to-assign
	last time.Time       // the last completion
	done chan struct{}
	n    atomic.Int64 // completions
	want int64
}

// drainTimeout bounds the drain of a run's workers at its end.
const drainTimeout = 10 * time.Second

// Run runs the workload and returns its figures. It fails on the first
// request the daemon refuses, or when ctx ends before every task is done.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	r := &run{cfg: cfg, done: make(chan struct{}), cs: newClients(cfg, cfg.Clients+cfg.Workers)}
	defer r.cs.close()
	var err error
	if r.c, err = r.cs.as("client"); err != nil {
		return Result{}, err
	}
	if r.want, err = cfg.want(); err != nil {
		return Result{}, err
	}
	r.lat = make([]time.Duration, 0, r.want)
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := make([]*client.Client, cfg.Workers)
	// Drain the run's workers when it ends: they stop polling, but stay
	// alive for the broker until its worker TTL, and a next run against
	// the same daemon (workers of its own) would have its tasks assigned
	// to them and never done.
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(parent), drainTimeout)
		defer dcancel()
		for i, w := range workers {
			if w != nil {
				_, _ = w.Drain(dctx, cfg.Prefix+strconv.Itoa(i)) // best effort: the run's figures stand
			}
		}
	}()
	for i := range workers {
		if workers[i], err = r.cs.as(cfg.Prefix + strconv.Itoa(i)); err != nil {
			return Result{}, err
		}
		if _, err := workers[i].Register(ctx, nil, cfg.MaxTasks); err != nil {
			return Result{}, err
		}
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			if err := r.work(ctx, w); err != nil && ctx.Err() == nil {
				cancel(err)
			}
		})
	}
	start := time.Now()
	var cerr error
	if cfg.Rate > 0 {
		cerr = openLoop(ctx, start, cfg.Rate, r.want, r.create)
	} else {
		cerr = closedLoop(ctx, cfg.Clients, r.want, r.create)
	}
	if cerr != nil {
		cancel(cerr)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
	}
	cancel(nil)
	wg.Wait()
	if r.n.Load() < r.want {
		// The first cause wins: a refused request, or the caller's ctx.
		return Result{}, fmt.Errorf("brokerbench: %d of %d tasks done: %w", r.n.Load(), r.want, context.Cause(ctx))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res := newResult(r.want, r.last.Sub(start), cfg.Rate, r.lat)
	slices.Sort(r.alat)
	res.AssignP50, res.AssignP99 = r.alat[len(r.alat)/2], r.alat[len(r.alat)*99/100]
	return res, nil
}

// create creates one no-op task whose latency counts from t0.
func (r *run) create(ctx context.Context, t0 time.Time) error {
	_, err := r.c.CreateDispatch(ctx, api.CreateDispatch{Title: "noop", Metadata: api.StringMetadata(map[string]string{"t0": strconv.FormatInt(t0.UnixNano(), 10)})})
	return err
}

// work is one worker: long-poll for its assignments, complete each with
// one request, until ctx ends.
func (r *run) work(ctx context.Context, w *client.Client) error {
	for ctx.Err() == nil {
		tasks, err := w.Poll(ctx, time.Second)
		if err != nil {
			return err
		}
		for _, t := range tasks {
			if _, err := w.Complete(ctx, t.TaskID, json.RawMessage(`{}`)); err != nil {
				return err
			}
			now := time.Now()
			t0, _ := strconv.ParseInt(t.MetadataText("t0"), 10, 64)
			r.mu.Lock()
			r.lat = append(r.lat, now.Sub(time.Unix(0, t0)))
			r.alat = append(r.alat, t.AssignedAt.Sub(time.Unix(0, t0)))
			r.last = now
			r.mu.Unlock()
			if r.n.Add(1) == r.want {
				close(r.done)
			}
		}
	}
	return nil
}
