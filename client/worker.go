package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pegasus-engine/pegasus/api"
)

// Handler runs one broker task. It returns the task's result (any value
// encoding/json takes; nil for none) or an error: the worker then fails
// the task, which the broker retries while it has retries left, unless
// the error is marked by Permanent. ctx ends when the worker stops waiting
// for it (WorkerOptions.ShutdownTimeout after a shutdown began); a
// handler should then return promptly.
type Handler interface {
	Handle(ctx context.Context, t *Task) (result any, err error)
}

// HandlerFunc is a function as a Handler.
type HandlerFunc func(ctx context.Context, t *Task) (any, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, t *Task) (any, error) { return f(ctx, t) }

// Task is a broker task handed to a Handler: the task as the broker
// assigned it, and a way to report progress.
type Task struct {
	api.DispatchTask
	w   *Worker
	mu  sync.Mutex
	msg string // the last progress message: what heartbeats repeat
}

// Progress reports progress (POST /api/v1/tasks/{id}/progress); the
// message is also what the worker's heartbeats repeat from then on. An
// error is returned after the client's retries; the task goes on.
func (t *Task) Progress(ctx context.Context, message string) error {
	t.mu.Lock()
	t.msg = message
	t.mu.Unlock()
	_, err := t.w.c.ReportProgress(ctx, t.TaskID, message)
	return err
}

func (t *Task) message() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.msg
}

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	// Capabilities are what the worker can do; the broker hands it only
	// tasks that require nothing else (compared ignoring case). The
	// default value is none: tasks that require nothing.
	Capabilities []string
	// MaxTasks is how many handlers run at once (the registration's
	// max_tasks). The default value is 1.
	MaxTasks int
	// PollWait is how long one long poll waits for a task. The default
	// value is 30s.
	PollWait time.Duration
	// ShutdownTimeout is how long Run, once its context is done, waits
	// for running handlers before it cancels their contexts. The default
	// value is 30s.
	ShutdownTimeout time.Duration
	// Logger receives what the worker does and the errors it survives.
	// The default value is a logger that discards everything.
	Logger *slog.Logger
}

// EnsureDefaults fills in the default of every field left zero and
// returns o.
func (o *WorkerOptions) EnsureDefaults() *WorkerOptions {
	if o.MaxTasks == 0 {
		o.MaxTasks = 1
	}
	if o.PollWait == 0 {
		o.PollWait = maxPoll
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Validate refuses options a worker cannot run with.
func (o *WorkerOptions) Validate() error {
	switch {
	case o.MaxTasks < 1:
		return fmt.Errorf("client: MaxTasks %d: want at least 1", o.MaxTasks)
	case o.PollWait < time.Second:
		return fmt.Errorf("client: PollWait %s: want at least 1s", o.PollWait)
	case o.ShutdownTimeout < 0:
		return fmt.Errorf("client: ShutdownTimeout %s: want at least 0", o.ShutdownTimeout)
	}
	return nil
}

// Worker is a Dispatch broker worker (docs/broker.md) under the client's
// AgentID: it registers its capabilities, long-polls for the tasks
// assigned to it, runs up to MaxTasks handlers at once, sends heartbeats
// while a handler runs a task with heartbeat_seconds, and completes or
// fails each task with what its handler returned.
//
// It survives the daemon: a poll or a report that fails is retried with
// backoff (the client's MinBackoff to MaxBackoff) for as long as it
// takes; only its context stops it. A task is handed to one handler once:
// the worker reports its start before it runs it, and a task it runs is
// not started again.
type Worker struct {
	c    *Client
	opts WorkerOptions
	log  *slog.Logger
}

// NewWorker returns a worker that works for the daemon of c, as worker
// c.AgentID(). opts may be nil.
func NewWorker(c *Client, opts *WorkerOptions) (*Worker, error) {
	var o WorkerOptions
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Worker{c: c, opts: o, log: o.Logger.With("worker", c.AgentID())}, nil
}

// Run registers the worker and runs tasks with h until ctx is done. Then
// it drains: it takes no new task, waits up to ShutdownTimeout for the
// running handlers and reports their outcome, and returns nil (or
// ErrShutdownTimeout when it had to cancel handlers: their tasks are
// failed, retryable, for the broker to run again).
func (w *Worker) Run(ctx context.Context, h Handler) error {
	// Handlers and reports outlive ctx by up to ShutdownTimeout: work is
	// their own context, cancelled when the drain gives up.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	if err := w.retry(ctx, "register", func() error {
		_, err := w.c.Register(ctx, w.opts.Capabilities, w.opts.MaxTasks)
		return err
	}); err != nil {
		return misconfigured(err)
	}
	w.log.Info("worker registered", "capabilities", w.opts.Capabilities, "max_tasks", w.opts.MaxTasks)
	slots := make(chan struct{}, w.opts.MaxTasks)
	var wg sync.WaitGroup
	var mu sync.Mutex
	running := map[string]bool{}
	var stopped error // a poll the server refused for good
	for ctx.Err() == nil && stopped == nil {
		select { // a free slot before asking for work
		case slots <- struct{}{}:
			<-slots
		case <-ctx.Done():
			continue
		}
		var tasks []api.DispatchTask
		if err := w.retry(ctx, "poll", func() (err error) {
			tasks, err = w.c.Poll(ctx, w.opts.PollWait)
			return err
		}); err != nil {
			stopped = misconfigured(err)
			break
		}
		for _, t := range tasks {
			if ctx.Err() != nil {
				break // assigned, not started: the broker times it out and retries it
			}
			mu.Lock()
			dup := running[t.TaskID]
			mu.Unlock()
			if dup {
				continue
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				continue
			}
			// Each task starts on its own goroutine: a poll that returns
			// many tasks does not start them one round trip after another.
			// The running set keeps a later poll, which may still see the
			// task assigned, from taking it twice.
			mu.Lock()
			running[t.TaskID] = true
			mu.Unlock()
			task := &Task{DispatchTask: t, w: w, msg: "started"}
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(running, t.TaskID)
					mu.Unlock()
					<-slots
				}()
				if w.start(ctx, task) {
					w.runTask(work, h, task)
				}
			})
		}
	}
	// Drain: nothing new is taken; the running handlers get
	// ShutdownTimeout.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(w.opts.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		w.log.Info("worker stopped")
		return stopped
	case <-timer.C:
		w.log.Warn("shutdown timeout: cancelling the running handlers")
		stopWork()
		<-done
		return ErrShutdownTimeout
	}
}

// ErrShutdownTimeout is returned by Worker.Run when handlers still ran
// ShutdownTimeout after its context was done, and were cancelled.
var ErrShutdownTimeout = errors.New("client: worker shutdown timed out; running handlers were cancelled")

// start reports the task's start (its first progress report), so that no
// later poll returns it again. It reports false when the task is not
// this worker's to run any more (it timed out meanwhile) or ctx ended.
func (w *Worker) start(ctx context.Context, t *Task) bool {
	err := w.retry(ctx, "start "+t.TaskID, func() error {
		_, err := w.c.ReportProgress(ctx, t.TaskID, t.message())
		return err
	})
	if err != nil && ctx.Err() == nil {
		w.log.Warn("task not started: the broker refused its start", "task_id", t.TaskID, "err", err)
	}
	return err == nil
}

// runTask runs the handler on t, with heartbeats when t has
// heartbeat_seconds, then reports its outcome.
func (w *Worker) runTask(ctx context.Context, h Handler, t *Task) {
	log := w.log.With("task_id", t.TaskID)
	stopBeats := func() {}
	if t.HeartbeatSeconds > 0 {
		hctx, stop := context.WithCancel(ctx)
		beating := make(chan struct{})
		go func() { defer close(beating); w.heartbeat(hctx, t) }()
		stopBeats = func() { stop(); <-beating } // no heartbeat after the outcome
	}
	result, err := w.call(ctx, h, t)
	stopBeats()
	report := func() error {
		_, rerr := w.c.Complete(ctx, t.TaskID, result)
		return rerr
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	outcome := "complete"
	if err != nil {
		outcome = "fail"
		report = func() error {
			_, rerr := w.c.Fail(ctx, t.TaskID, err)
			return rerr
		}
	}
	if ctx.Err() != nil {
		// The shutdown timeout cancelled the handler: a short grace to
		// say so, so that the broker retries the task at once.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), reportGrace)
		defer cancel()
	}
	refused := w.retry(ctx, outcome+" "+t.TaskID, report)
	switch {
	case refused != nil && ctx.Err() == nil:
		// The attempt is over (it timed out, and is retried or dead):
		// the broker keeps the outcome it decided.
		log.Warn("the broker refused the task's outcome", "outcome", outcome, "err", refused)
	case ctx.Err() != nil:
		log.Warn("the task's outcome was not reported before the shutdown timeout", "outcome", outcome)
	default:
		log.Info("task done", "outcome", outcome, "err", err)
	}
}

// call runs the handler, turning a panic into a (retryable) error.
func (w *Worker) call(ctx context.Context, h Handler, t *Task) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			result, err = nil, fmt.Errorf("the handler panicked: %v", p)
		}
	}()
	return h.Handle(ctx, t)
}

// heartbeat repeats the last progress message three times per
// heartbeat_seconds while the handler runs, so that the broker does not
// time the task out for lack of news.
func (w *Worker) heartbeat(ctx context.Context, t *Task) {
	every := time.Duration(t.HeartbeatSeconds) * time.Second / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// A failed heartbeat is not retried here: the next one comes
			// soon, and the client retried this one already.
			if _, err := w.c.ReportProgress(ctx, t.TaskID, t.message()); err != nil && ctx.Err() == nil {
				w.log.Warn("heartbeat failed", "task_id", t.TaskID, "err", err)
			}
		}
	}
}

// reportGrace is how long a handler cancelled by the shutdown timeout
// has to report its failure.
const reportGrace = 5 * time.Second

// retry calls f until it succeeds (nil), ctx ends (its error) or the
// server refuses it for good (that error: final), waiting between
// attempts from the client's MinBackoff up to its MaxBackoff: a worker
// never gives up on a transient error.
func (w *Worker) retry(ctx context.Context, what string, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || final(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.log.Warn("worker request failed; retrying", "request", what, "attempt", attempt, "err", err)
		if err := sleep(ctx, w.c.backoff(attempt)); err != nil {
			return err
		}
	}
}

// final reports whether err is an answer of the server that asking again
// cannot change: the task is not, or no longer, this worker's (404,
// 409), the request is malformed (400) or not allowed (401).
func final(err error) bool {
	var e *Error
	return errors.As(err, &e) && (errors.Is(e, ErrConflict) || errors.Is(e, ErrNotFound) ||
		errors.Is(e, ErrBadRequest) || errors.Is(e, ErrUnauthorized))
}

// misconfigured is Run's error when the server refused the registration
// or a poll for good; nil when ctx ended.
func misconfigured(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return fmt.Errorf("client: the worker stopped: %w", err)
}
