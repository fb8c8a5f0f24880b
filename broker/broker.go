package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// BrokerAgent is the agent_id the broker records on its own decisions
// (assignments, timeouts, retries, dead letters).
const BrokerAgent = "$broker"

// Errors of the broker. The HTTP API maps them to statuses.
var (
	// ErrNotFound: no dispatch task (or worker) with that id.
	ErrNotFound = errors.New("broker: not found")
	// ErrNotAssigned: a report from an agent the task is not assigned to,
	// or on a task in no state to take it. Nothing was recorded.
	ErrNotAssigned = errors.New("broker: the task is not assigned to this agent")
	// ErrInvalid: bad input (the message says what); nothing was recorded.
	ErrInvalid = errors.New("broker: invalid request")
	// ErrNotDeadLetter: a requeue of a task that is not in the DLQ.
	ErrNotDeadLetter = errors.New("broker: not a dead letter")
	// ErrStopped: the broker is not running.
	ErrStopped = errors.New("broker: stopped")
)

// Tasks is what the broker reads tasks from: the daemon's folded view
// (FromView), which some follower keeps up to date with the log.
type Tasks interface {
	// Task returns a task as folded.
	Task(id string) (fsm.Task, error)
	// WaitFor blocks until the view has folded seq.
	WaitFor(ctx context.Context, seq uint64) error
	// DispatchTasks returns the tasks in the states of dispatch.task (and
	// maybe others, which the broker skips).
	DispatchTasks() []fsm.Task
}

// FromView adapts the daemon's replay.View.
func FromView(v *replay.View) Tasks { return viewTasks{v} }

type viewTasks struct{ *replay.View }

func (v viewTasks) DispatchTasks() []fsm.Task {
	m, err := fsm.MachineFor(fsm.DispatchMachine)
	if err != nil {
		return nil
	}
	// The persisted read model too: finished tasks are evicted from memory
	// at checkpoints.
	var out []fsm.Task
	q := replay.Query{Filter: projection.Filter{States: m.States()}, Limit: replay.MaxLimit}
	for {
		page, err := v.Tasks(context.Background(), q)
		if err != nil {
			return out
		}
		for _, s := range page.Tasks {
			if s.Machine != fsm.DispatchMachine.String() {
				continue
			}
			if t, err := v.Task(s.ID); err == nil {
				out = append(out, t)
			}
		}
		if page.Next == "" {
			return out
		}
		q.Cursor = page.Next
	}
}

// Options configure a Broker, like pebble's: each field's default is in
// its comment; EnsureDefaults fills them.
type Options struct {
	// CheckInterval is the longest the loop sleeps: it wakes at the times
	// the machine said (deadlines, run_at, backoffs) and at least this
	// often. The default value is 30s.
	CheckInterval time.Duration
	// WorkerTTL is how long a worker counts as alive after its last request
	// carrying X-Agent-ID; a worker not seen for longer gets no new task.
	// The default value is 90s.
	WorkerTTL time.Duration
	// Now is the broker's clock. The default value is time.Now.
	Now func() time.Time
	// After returns a channel that fires after d (the loop's timer). The
	// default value is time.After.
	After func(d time.Duration) <-chan time.Time
	// Jitter draws a retry's jitter in [0, max]. The default value draws
	// it uniformly.
	Jitter func(max time.Duration) time.Duration
	// Logger receives the broker's decisions at debug level. The default
	// value discards them.
	Logger *slog.Logger
}

// EnsureDefaults returns o with its zero fields set to their defaults.
func (o Options) EnsureDefaults() Options {
	if o.CheckInterval <= 0 {
		o.CheckInterval = 30 * time.Second
	}
	if o.WorkerTTL <= 0 {
		o.WorkerTTL = 90 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.Jitter == nil {
		o.Jitter = func(m time.Duration) time.Duration {
			if m <= 0 {
				return 0
			}
			return time.Duration(rand.Int64N(int64(m/time.Millisecond)+1)) * time.Millisecond
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Broker hands dispatch tasks to workers. It is the only place that does
// the broker's I/O, in the agent's loop shape: ask the machine what is due
// (fsm.Next), do it, append the outcome. It never names a machine's
// states.
type Broker struct {
	log   *eventlog.Log
	tasks Tasks
	opts  Options

	mu      sync.Mutex
	live    map[string]struct{}  // dispatch tasks that are not finished
	workers projection.Workers   // registered workers, from WorkersStream
	seen    map[string]time.Time // worker liveness (memory only)
	changed chan struct{}        // closed and replaced after every dispatch event folded
	kick    chan struct{}        // wakes the loop (buffered 1)
	running bool

	children *childIndex // parent_task_id -> children (children.go)
}

// New returns a broker over the log l and the view tasks of it, with the
// live dispatch tasks and the registered workers loaded.
func New(l *eventlog.Log, tasks Tasks, opts Options) (*Broker, error) {
	b := &Broker{log: l, tasks: tasks, opts: opts.EnsureDefaults(), live: map[string]struct{}{},
		workers: projection.Workers{}, seen: map[string]time.Time{}, changed: make(chan struct{}), kick: make(chan struct{}, 1),
		children: newChildIndex()}
	for _, t := range tasks.DispatchTasks() {
		if t.Dispatch != nil && !t.IsTerminal() {
			b.live[t.ID] = struct{}{}
		}
		if t.Dispatch != nil {
			b.children.add(t.ParentID, t.ID)
		}
	}
	b.loadChildren()
	it := l.ReadStream(projection.WorkersStream, 1)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		body, err := projection.DecodeWorker(ev.Schema, ev.Body)
		if err != nil {
			return nil, fmt.Errorf("broker: %s seq %d: %w", projection.WorkersStream, ev.Seq, err)
		}
		if err := b.workers.Apply(fsm.EventType(ev.Type), body, ev.Time); err != nil {
			return nil, err
		}
	}
	return b, it.Err()
}

// Run drives the broker until ctx ends: it follows the log (every folded
// dispatch event wakes it), and does the work due (assign, time out,
// retry, dead-letter), then sleeps until the next time the machine named
// or CheckInterval, whichever is first.
func (b *Broker) Run(ctx context.Context) error {
	b.mu.Lock()
	b.running = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.running = false
		b.mu.Unlock()
	}()
	sub := b.log.Subscribe(ctx, b.log.Head()+1)
	defer sub.Close()
	errc := make(chan error, 1)
	go func() { errc <- b.follow(ctx, sub) }()
	for {
		next := b.step(ctx)
		wait := b.opts.CheckInterval
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(b.opts.Now()), 0))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		case <-b.kick:
		case <-b.opts.After(wait):
		}
	}
}

// follow tracks the dispatch tasks of every event appended, once the view
// folded it, and wakes the loop and the waiters.
func (b *Broker) follow(ctx context.Context, sub *eventlog.Subscription) error {
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		isWorker := ev.Stream == projection.WorkersStream
		if !isWorker && !strings.HasPrefix(ev.Type, "DISPATCH_") {
			continue
		}
		if err := b.tasks.WaitFor(ctx, ev.Seq); err != nil {
			return err
		}
		if !isWorker {
			t, err := b.tasks.Task(ev.Stream)
			b.mu.Lock()
			if err == nil && t.Dispatch != nil && !t.IsTerminal() {
				b.live[t.ID] = struct{}{}
			} else {
				delete(b.live, ev.Stream)
			}
			b.mu.Unlock()
			if err == nil && ev.Version == 1 {
				b.children.add(t.ParentID, t.ID)
			}
		}
		b.notify()
	}
}

// notify wakes the loop and everyone waiting for a change.
func (b *Broker) notify() {
	b.mu.Lock()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// step does the work due now for every live task and returns the earliest
// time something else becomes due (zero: nothing is scheduled).
func (b *Broker) step(ctx context.Context) time.Time {
	now := b.opts.Now()
	var next time.Time
	later := func(at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	var queue []fsm.Task
	load := map[string]int{}
	for _, t := range b.liveTasks() {
		act := fsm.Next(&t)
		switch act.Kind {
		case fsm.ActAssign:
			if act.At.After(now) {
				later(act.At)
				continue
			}
			queue = append(queue, t)
		case fsm.ActWaitWorker:
			load[act.Task]++
			if act.At.After(now) {
				later(act.At)
				continue
			}
			b.decide(ctx, &t, fsm.DispatchTimedOut, &fsm.DispatchTimedOutBody{AgentID: BrokerAgent}, now)
		case fsm.ActRetry:
			jitter := b.opts.Jitter(fsm.DispatchBackoff(&t))
			b.decide(ctx, &t, fsm.DispatchRetried, &fsm.DispatchRetriedBody{AgentID: BrokerAgent, JitterMS: jitter.Milliseconds()}, now)
		case fsm.ActDeadLetter:
			_, why := fsm.DispatchRetryDue(&t)
			b.decide(ctx, &t, fsm.DispatchDeadLettered, &fsm.DispatchDeadLetteredBody{AgentID: BrokerAgent, Reason: why}, now)
		}
	}
	slices.SortFunc(queue, func(x, y fsm.Task) int { return projection.QueueLess(&x, &y) })
	var batch []eventlog.StreamAppend
	var batched []*fsm.Task
	for i := range queue {
		t := &queue[i]
		w, score := b.pick(t, load, now)
		if w == "" {
			continue // no eligible worker now; a registration or a report wakes the loop
		}
		ev, err := encodeEvent(t, now, eventOf(fsm.DispatchAssigned, &fsm.DispatchAssignedBody{AgentID: BrokerAgent, Worker: w, Score: score}))
		if err != nil {
			b.opts.Logger.Warn("broker: encode", "task", t.ID, "err", err)
			continue
		}
		batch = append(batch, eventlog.StreamAppend{Stream: t.ID, Expected: eventlog.Exactly(t.Version), Events: []eventlog.Event{ev}})
		batched = append(batched, t)
		load[w]++
	}
	b.assignAll(ctx, batch, batched, now)
	return next
}

// assignAll appends the assignments of one step in one atomic append (one
// synced commit); if a task moved meanwhile the batch is refused as a
// whole, and each assignment is tried alone.
func (b *Broker) assignAll(ctx context.Context, batch []eventlog.StreamAppend, tasks []*fsm.Task, now time.Time) {
	if len(batch) == 0 {
		return
	}
	res, err := b.log.AppendMulti(ctx, batch...)
	if err == nil {
		if err := b.tasks.WaitFor(ctx, res[len(res)-1].LastSeq); err != nil {
			b.opts.Logger.Debug("broker: wait for the fold", "err", err)
		}
		return
	}
	for i, sa := range batch {
		if _, err := b.log.Append(ctx, sa.Stream, sa.Expected, sa.Events...); err != nil {
			b.opts.Logger.Debug("broker decision not recorded", "task", tasks[i].ID, "err", err)
			continue
		}
	}
	if err := b.tasks.WaitFor(ctx, b.log.Head()); err != nil {
		b.opts.Logger.Debug("broker: wait for the fold", "err", err)
	}
}

// liveTasks returns the live dispatch tasks as folded.
func (b *Broker) liveTasks() []fsm.Task {
	b.mu.Lock()
	ids := make([]string, 0, len(b.live))
	for id := range b.live {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	out := make([]fsm.Task, 0, len(ids))
	for _, id := range ids {
		if t, err := b.tasks.Task(id); err == nil && t.Dispatch != nil {
			out = append(out, t)
		}
	}
	return out
}

// pick chooses the worker for t: alive, not draining, below its max_tasks,
// with every required capability; the least loaded first, then by id. The
// score is the seed's 1.0 + priority*0.05, scaled by the capability match
// (1 for an eligible worker).
func (b *Broker) pick(t *fsm.Task, load map[string]int, now time.Time) (string, float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	best, bestLoad := "", 0
	for id, w := range b.workers {
		seen, ok := b.seen[id]
		if !ok || now.Sub(seen) > b.opts.WorkerTTL || w.Draining || load[id] >= w.MaxTasks || !w.Has(t.Dispatch.RequiredCapabilities) {
			continue
		}
		if id == AgentWorkerID && len(t.Dispatch.RequiredCapabilities) == 0 {
			continue // the built-in agent runs only the tasks that ask for one of its capabilities
		}
		if best == "" || load[id] < bestLoad || (load[id] == bestLoad && id < best) {
			best, bestLoad = id, load[id]
		}
	}
	if best == "" {
		return "", 0
	}
	return best, 1.0 + float64(t.Priority)*0.05
}

// decide appends the broker's decision ev for t, expecting t's version: a
// concurrent report wins and the loop looks again. It reports whether the
// event was appended.
func (b *Broker) decide(ctx context.Context, t *fsm.Task, et fsm.EventType, body fsm.Body, now time.Time) bool {
	_, err := b.append(ctx, t, now, eventOf(et, body))
	if err != nil {
		b.opts.Logger.Debug("broker decision not recorded", "task", t.ID, "type", et, "err", err)
		return false
	}
	b.opts.Logger.Debug("broker decision", "task", t.ID, "type", et)
	return true
}

type typedBody struct {
	et   fsm.EventType
	body fsm.Body
}

func eventOf(et fsm.EventType, body fsm.Body) typedBody { return typedBody{et, body} }

// append appends evs to t's stream at t's version, at time now, and waits
// until the view folded them.
func (b *Broker) append(ctx context.Context, t *fsm.Task, now time.Time, evs ...typedBody) (eventlog.AppendResult, error) {
	out := make([]eventlog.Event, len(evs))
	for i, e := range evs {
		ev, err := encodeEvent(t, now, e)
		if err != nil {
			return eventlog.AppendResult{}, err
		}
		out[i] = ev
	}
	res, err := b.log.Append(ctx, t.ID, eventlog.Exactly(t.Version), out...)
	if err != nil {
		return res, err
	}
	return res, b.tasks.WaitFor(ctx, lastSeq(res))
}

// encodeEvent builds the log event of a decision on t at time now.
func encodeEvent(t *fsm.Task, now time.Time, e typedBody) (eventlog.Event, error) {
	data, err := fsm.Encode(e.body)
	if err != nil {
		return eventlog.Event{}, err
	}
	return eventlog.Event{Type: string(e.et), Time: now, Schema: fsm.SchemaVersion, Body: data, Causation: t.LastEvent}, nil
}

func lastSeq(r eventlog.AppendResult) uint64 {
	if n := len(r.Events); n > 0 {
		return r.Events[n-1].Seq
	}
	return 0
}

// Wait blocks until cond holds for the broker's view of things (checked
// at once and after every dispatch or worker event), or ctx ends.
func (b *Broker) Wait(ctx context.Context, cond func() bool) error {
	for {
		b.mu.Lock()
		ch := b.changed
		b.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// newID draws a task id from the log.
func (b *Broker) newID() ulid.ULID { return b.log.NewID() }
