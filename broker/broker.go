package broker

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/watermark"
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
	// or on a task in no state to take it (a *ReportError says which).
	// Nothing was recorded.
	ErrNotAssigned = errors.New("broker: the task takes no report from this agent")
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
	// Seq returns the sequence of the last event folded.
	Seq() uint64
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
	// often, and this often it looks at every live task, not only at those
	// that changed or fell due. The default value is 30s.
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
	// Appender receives every event the broker writes; the log given to
	// New is where it reads, and Appender must make an append visible
	// there before it returns (pegasusd --cluster passes the replicated
	// log). The default value is the log given to New.
	Appender eventlog.Appender
	// Owns says whether this broker decides a task's assignment,
	// timeouts, retries and dead letters, and whether its built-in worker
	// runs the task (pegasusd --cluster: the tasks of the partitions the
	// daemon holds). A broker that does not own a task leaves it alone;
	// a worker polling it still gets the task once the owner's assignment
	// reaches its log. The default value is nil: every task.
	Owns func(task string) bool
	// Share, when set, tells the other brokers that a registered worker
	// (not the built-in one) made a request to this one at a time, so
	// that the owners of tasks count it alive (pegasusd --cluster: an
	// entry in a JetStream key-value bucket, whose updates each daemon
	// gives to SeenElsewhere). It is called at a worker's first request
	// and then at most every WorkerTTL/4 per worker, must not block, and
	// is not called with the broker's lock held. The default value is
	// nil: liveness stays in this broker.
	Share func(worker string, at time.Time)
	// AgentTaskTypes are the agent's task types: the built-in worker
	// registers each as a capability besides "agent", and a broker task
	// that requires one runs as an agent task of that type (pegasusd
	// passes its configuration's types). The default value is general,
	// explore and plan.
	AgentTaskTypes []string
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
	if len(o.AgentTaskTypes) == 0 {
		o.AgentTaskTypes = defaultAgentTaskTypes
	}
	return o
}

// Broker hands dispatch tasks to workers. It is the only place that does
// the broker's I/O, in the agent's loop shape: ask the machine what is due
// (fsm.Next), do it, append the outcome. It never names a machine's
// states.
type Broker struct {
	log   *eventlog.Log     // reads
	app   eventlog.Appender // writes: Options.Appender, or log
	tasks Tasks
	opts  Options
	from  uint64 // the view's position when New loaded the live tasks

	mu         sync.Mutex
	live       map[string]*entry            // dispatch tasks that are not finished, as last folded (index.go)
	byWorker   map[string]map[string]*entry // the live tasks each worker runs
	dirty      []*entry                     // live tasks changed since the loop last looked, each once (entry.dirty)
	due        dueHeap                      // when live tasks fall due (deadlines, run_at, backoffs)
	ready      readyHeap                    // pending tasks due now, in queue order
	readyKeys  map[string]int               // entries in ready per requirement key (reqKey)
	workerCh   map[string]chan struct{}     // closed when a worker's tasks change (its long polls)
	lastFull   time.Time                    // when the loop last looked at every live task
	workers    projection.Workers           // registered workers, from WorkersStream (loadWorkers)
	workersVer uint64                       // the version of WorkersStream folded into workers
	seen       map[string]time.Time         // worker liveness: requests here, and SeenElsewhere
	shared     map[string]time.Time         // when Seen last gave a worker to Options.Share
	changed    chan struct{}                // closed after every dispatch event folded; made when a waiter asks (nil: none waits)
	kick       chan struct{}                // wakes the loop (buffered 1)
	agentWake  chan struct{}                // wakes the built-in worker's loop (RunAgentWorker), nil before
	agentAll   atomic.Bool                  // the built-in worker looks at every live task at its next wake (CheckAll)
	running    bool

	workersMu sync.Mutex     // held by loadWorkers: one reads the log at a time
	followed  watermark.Mark // the last event follow has indexed
	children  *childIndex    // parent_task_id -> children (children.go)
}

// New returns a broker over the log l and the view tasks of it, with the
// live dispatch tasks and the registered workers loaded.
func New(l *eventlog.Log, tasks Tasks, opts Options) (*Broker, error) {
	b := &Broker{log: l, tasks: tasks, opts: opts.EnsureDefaults(), live: map[string]*entry{},
		byWorker: map[string]map[string]*entry{}, workerCh: map[string]chan struct{}{}, readyKeys: map[string]int{},
		workers: projection.Workers{}, seen: map[string]time.Time{}, shared: map[string]time.Time{}, kick: make(chan struct{}, 1),
		children: newChildIndex()}
	if b.app = b.opts.Appender; b.app == nil {
		b.app = l
	}
	// Run follows the log from the view's position before the load, so
	// that a task the view folds meanwhile is indexed either way.
	b.from = tasks.Seq()
	b.followed.Advance(b.from)
	for _, t := range tasks.DispatchTasks() {
		b.observeLocked(t.ID, t, true)
		b.children.add(t.ParentID, t.ID)
	}
	b.loadChildren()
	if err := b.loadWorkers(); err != nil {
		return nil, err
	}
	return b, nil
}

// loadWorkers folds into the registry the worker events the log holds
// beyond those folded, in the stream's order: at the start, after this
// broker's own (workerEvent) and after any other daemon's (follow), so
// that every broker of a cluster knows every worker.
func (b *Broker) loadWorkers() error {
	b.workersMu.Lock()
	defer b.workersMu.Unlock()
	b.mu.Lock()
	from := b.workersVer + 1
	b.mu.Unlock()
	type workerEv struct {
		et      fsm.EventType
		body    *projection.WorkerBody
		at      time.Time
		version uint64
	}
	var evs []workerEv
	it := b.log.ReadStream(projection.WorkersStream, from)
	for it.Next() {
		ev := it.Event()
		body, err := projection.DecodeWorker(ev.Schema, ev.Body)
		if err != nil {
			it.Close()
			return fmt.Errorf("broker: %s seq %d: %w", projection.WorkersStream, ev.Seq, err)
		}
		evs = append(evs, workerEv{fsm.EventType(ev.Type), body, ev.Time, ev.Version})
	}
	if err := it.Close(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ev := range evs {
		if err := b.workers.Apply(ev.et, ev.body, ev.at); err != nil {
			return err
		}
		b.workersVer = ev.version
	}
	return nil
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
	sub := b.log.SubscribeBuffered(ctx, b.from+1, followBuffer)
	defer sub.Close()
	errc := make(chan error, 1)
	go func() {
		err := b.follow(ctx, sub)
		b.followed.Advance(math.MaxUint64) // nothing is indexed any more: nobody waits for it
		errc <- err
	}()
	for {
		next := b.step(ctx)
		wait := b.opts.CheckInterval
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(b.opts.Now()), 0))
		}
		if _, err := b.sleep(ctx, errc, b.kick, wait); err != nil {
			return err
		}
	}
}

// followBuffer is how many events the broker's followers (its index, the
// built-in agent worker) have buffered before the log drops them to
// reading back what they missed: more than a commit of 16 batches of 100
// tasks, so that a flood of batches is followed from memory, not read
// back from storage event by event.
const followBuffer = 4096

// sleep waits between two steps of a loop: for a wake-up, for d to pass
// (elapsed true), or for what ends the loop (the context, or the error of
// its follower on errc), which it returns.
func (b *Broker) sleep(ctx context.Context, errc <-chan error, wake <-chan struct{}, d time.Duration) (elapsed bool, err error) {
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case err := <-errc:
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, err
	case <-wake:
		return false, nil
	case <-b.opts.After(d):
		return true, nil
	}
}

// follow indexes the dispatch tasks of every event appended, once the
// view folded it, and wakes the loop and the waiters.
func (b *Broker) follow(ctx context.Context, sub *eventlog.Subscription) error {
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		isWorker := ev.Stream == projection.WorkersStream
		if !isWorker && !strings.HasPrefix(ev.Type, "DISPATCH_") {
			kids := b.children.of(ev.Stream)
			if len(kids) > 0 {
				// A parent moved: its tool tasks may be unwanted now.
				if err := b.tasks.WaitFor(ctx, ev.Seq); err != nil {
					return err
				}
				b.mu.Lock()
				for _, c := range kids {
					if e, ok := b.live[c]; ok {
						b.markLocked(e)
					}
				}
				b.mu.Unlock()
			}
			b.followed.Advance(ev.Seq)
			if len(kids) > 0 {
				b.wake()
			}
			continue
		}
		if err := b.tasks.WaitFor(ctx, ev.Seq); err != nil {
			return err
		}
		if isWorker {
			if err := b.loadWorkers(); err != nil {
				return err
			}
		} else {
			t, err := b.tasks.Task(ev.Stream)
			b.mu.Lock()
			b.observeLocked(ev.Stream, t, err == nil)
			b.mu.Unlock()
			if err == nil && ev.Version == 1 {
				b.children.add(t.ParentID, t.ID)
			}
		}
		b.followed.Advance(ev.Seq)
		b.notify()
	}
}

// notify wakes the loop and everyone waiting for a change.
func (b *Broker) notify() {
	b.mu.Lock()
	b.changedLocked()
	b.mu.Unlock()
	b.wake()
}

// changedLocked wakes everyone waiting for a change (Wait). Called with
// b.mu held.
func (b *Broker) changedLocked() {
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

// decision is a broker decision on a task taken by step under b.mu and
// appended after it.
type decision struct {
	t  fsm.Task // the task's id, version and last event; no dispatch part
	ev typedBody
}

// decisionOn is decision ev on the index's task t. The decision is
// appended after b.mu is released, while t's dispatch part (an entry's,
// rewritten in place) may change: it keeps none of it.
func decisionOn(t *fsm.Task, ev typedBody) decision {
	c := *t
	c.Dispatch = nil
	return decision{c, ev}
}

// step does the work due now: it looks at the live tasks that changed or
// fell due since the last step (at every live task once per
// CheckInterval), decides the timeouts, retries and dead letters due and
// the assignments of the head of the queue to the workers with room, and
// appends them all in one synced commit. It returns the earliest time
// something else falls due (zero: nothing is scheduled).
func (b *Broker) step(ctx context.Context) time.Time {
	now := b.opts.Now()
	var decisions []decision
	b.mu.Lock()
	if now.Sub(b.lastFull) >= b.opts.CheckInterval {
		b.lastFull = now
		for _, e := range b.live {
			b.markLocked(e)
		}
	}
	b.popDueLocked(now)
	dirty := b.dirty
	b.dirty = nil
	for _, e := range dirty {
		e.dirty = false
		if e.gone {
			continue
		}
		id, t := e.t.ID, &e.t
		act := fsm.Action{Kind: e.next, At: e.nextAt}
		if act.Kind == fsm.ActAssign || act.Kind == fsm.ActWaitWorker {
			if why := b.unwanted(t); why != "" && b.owns(id) {
				if e.queued {
					b.unqueueLocked(e)
				}
				decisions = append(decisions, decisionOn(t, eventOf(fsm.DispatchCancelled, &fsm.DispatchCancelledBody{AgentID: BrokerAgent, Reason: why})))
				continue
			}
		}
		switch act.Kind {
		case fsm.ActAssign:
			if !b.owns(id) {
				continue // its owner's broker assigns it (CheckAll when this one takes it)
			}
			if act.At.After(now) {
				b.scheduleLocked(e, act.At)
			} else if !e.queued {
				b.queueLocked(e)
			} else {
				b.requeueLocked(e)
			}
		case fsm.ActWaitWorker, fsm.ActRetry, fsm.ActDeadLetter:
			if act.Kind == fsm.ActWaitWorker && act.At.After(now) {
				b.scheduleLocked(e, act.At)
				continue
			}
			if !b.owns(id) {
				continue // its owner's broker decides
			}
			decisions = append(decisions, decisionOn(t, b.ownerDecision(t, act.Kind)))
		}
	}
	if b.dirty == nil { // none marked meanwhile: keep the room
		clear(dirty)
		b.dirty = dirty[:0]
	}
	decisions = b.assignLocked(now, decisions)
	b.compactLocked()
	next := b.nextDueLocked()
	b.mu.Unlock()

	// The next step must see this one's outcome in the index, or it would
	// count a worker's load short and decide again on stale versions.
	last, failed := b.appendAll(ctx, decisions, now)
	if last > 0 {
		if err := b.followed.Wait(ctx, last); err != nil {
			b.opts.Logger.Debug("broker: wait for the index", "err", err)
		}
	}
	if failed {
		// A decision not recorded for another reason than a conflict
		// (whose event wakes the loop): the log could not take it now.
		// The next step takes it again soon, not at CheckInterval.
		if retry := now.Add(decisionRetry); next.IsZero() || next.After(retry) {
			next = retry
		}
	}
	return next
}

// decisionRetry is how soon the loop takes again a decision the log could
// not record (pegasusd --cluster: an election, a busy partition).
const decisionRetry = time.Second

// assignLocked appends to ds the assignments of the tasks at the head of
// the queue that eligible workers have room for. Tasks no worker can take
// now (capabilities) stay queued in their place. It stops as soon as no
// worker has room, or as soon as every requirement key still queued was
// found unplaceable in this step (load only grows within a step), so a
// long queue costs nothing while the workers that could take it are busy,
// even when others (the built-in agent, a GPU worker) sit idle.
func (b *Broker) assignLocked(now time.Time, ds []decision) []decision {
	load := map[string]int{}
	room := 0
	for id, w := range b.workers {
		load[id] = len(b.byWorker[id])
		if b.aliveLocked(id, w, now) {
			room += max(w.MaxTasks-load[id], 0)
		}
	}
	var skipped []*entry
	blocked := map[string]bool{} // requirement keys no worker can take now
	for room > 0 && len(b.ready) > 0 && !b.allBlockedLocked(blocked) {
		e := heap.Pop(&b.ready).(*entry)
		key := e.qkey
		b.unqueueLocked(e)
		if b.live[e.t.ID] != e || !b.owns(e.t.ID) {
			continue // finished meanwhile, or its partition was given away
		}
		if e.next != fsm.ActAssign || e.nextAt.After(now) {
			b.markLocked(e)
			continue
		}
		if blocked[key] {
			skipped = append(skipped, e)
			continue
		}
		w, score := b.pickLocked(&e.t, load, now)
		if w == "" {
			// No eligible worker now, nor for any task with the same
			// requirements in this step; a registration or a report wakes
			// the loop.
			blocked[key] = true
			skipped = append(skipped, e)
			continue
		}
		ds = append(ds, decisionOn(&e.t, eventOf(fsm.DispatchAssigned, &fsm.DispatchAssignedBody{AgentID: BrokerAgent, Worker: w, Score: score})))
		load[w]++
		room--
	}
	for _, e := range skipped {
		b.queueLocked(e)
	}
	return ds
}

// allBlockedLocked reports whether every requirement key with tasks in the
// ready queue is in blocked.
func (b *Broker) allBlockedLocked(blocked map[string]bool) bool {
	if len(blocked) == 0 {
		return false
	}
	for k := range b.readyKeys {
		if !blocked[k] {
			return false
		}
	}
	return true
}

// appendAll appends the decisions of one step (timeouts, retries, dead
// letters, assignments: one event each, on distinct tasks) in one atomic
// append, one synced commit, each at the version of the task it was taken
// on. If a task moved meanwhile the append is refused as a whole, and each
// decision is tried alone. It returns the last sequence appended (0:
// none), and whether a decision was not recorded for another reason than
// a conflict. A task whose decision was not recorded is looked at again
// by the next step.
func (b *Broker) appendAll(ctx context.Context, ds []decision, now time.Time) (last uint64, failed bool) {
	batch := make([]eventlog.StreamAppend, 0, len(ds))
	for i := range ds {
		d := &ds[i]
		ev, err := encodeEvent(&d.t, now, d.ev)
		if err != nil {
			b.opts.Logger.Warn("broker: encode", "task", d.t.ID, "type", d.ev.et, "err", err)
			b.again(d.t.ID)
			continue
		}
		batch = append(batch, eventlog.StreamAppend{Stream: d.t.ID, Expected: eventlog.Exactly(d.t.Version), Events: []eventlog.Event{ev}})
	}
	if len(batch) == 0 {
		return 0, false
	}
	res, err := b.app.AppendMulti(ctx, batch...)
	if err == nil {
		b.opts.Logger.Debug("broker decisions", "n", len(batch))
		return res[len(res)-1].LastSeq, false
	}
	for _, sa := range batch {
		r, err := b.app.Append(ctx, sa.Stream, sa.Expected, sa.Events...)
		if err != nil {
			b.opts.Logger.Debug("broker decision not recorded", "task", sa.Stream, "type", sa.Events[0].Type, "err", err)
			b.again(sa.Stream)
			failed = failed || !errors.Is(err, eventlog.ErrConflict)
			continue
		}
		b.opts.Logger.Debug("broker decision", "task", sa.Stream, "type", sa.Events[0].Type)
		last = max(last, r.LastSeq)
	}
	return last, failed
}

// ownerDecision is the event that records what the machine says is due
// for t, an ActWaitWorker past its deadline, an ActRetry or an
// ActDeadLetter: the decisions only the owner of t's partition takes.
func (b *Broker) ownerDecision(t *fsm.Task, kind fsm.ActionKind) typedBody {
	switch kind {
	case fsm.ActWaitWorker:
		return eventOf(fsm.DispatchTimedOut, &fsm.DispatchTimedOutBody{AgentID: BrokerAgent})
	case fsm.ActRetry:
		jitter := b.opts.Jitter(fsm.DispatchBackoff(t))
		return eventOf(fsm.DispatchRetried, &fsm.DispatchRetriedBody{AgentID: BrokerAgent, JitterMS: jitter.Milliseconds()})
	default:
		_, why := fsm.DispatchRetryDue(t)
		return eventOf(fsm.DispatchDeadLettered, &fsm.DispatchDeadLetteredBody{AgentID: BrokerAgent, Reason: why})
	}
}

// unwanted says why the result of live task t is no longer wanted, or "":
// a worker tool call's task (source ToolSource) whose agent task ended or
// no longer waits for it (its pending call names another task, or none).
// The broker then cancels it (DISPATCH_CANCELLED), and dead-letters it
// next by the seed's rule, as it is not retry eligible any more.
func (b *Broker) unwanted(t *fsm.Task) string {
	if t.Context.Source != ToolSource || t.ParentID == "" {
		return ""
	}
	p, err := b.tasks.Task(t.ParentID)
	switch {
	case err != nil || p.Dispatch != nil:
		return ""
	case p.IsTerminal():
		if p.Context.Error != "" {
			return fmt.Sprintf("agent task %s failed: %s", p.ID, p.Context.Error)
		}
		return fmt.Sprintf("agent task %s ended", p.ID)
	case p.Context.PendingCall == nil || p.Context.PendingCall.Task != t.ID:
		return fmt.Sprintf("agent task %s no longer waits for it", p.ID)
	}
	return ""
}

// owns reports whether this broker decides task id's assignment,
// timeouts, retries and dead letters (Options.Owns).
func (b *Broker) owns(id string) bool { return b.opts.Owns == nil || b.opts.Owns(id) }

// CheckAll has the loop, and the built-in worker's, look at every live
// task at once, as they do every CheckInterval (WorkerTTL/3): pegasusd --cluster calls it when it takes a partition,
// whose tasks' decisions are its own from then on.
func (b *Broker) CheckAll() {
	b.agentAll.Store(true)
	b.mu.Lock()
	b.lastFull = time.Time{}
	aw := b.agentWake
	b.mu.Unlock()
	b.wake()
	if aw != nil {
		select {
		case aw <- struct{}{}:
		default:
		}
	}
}

// again has the next step look at task id again (its decision was not
// recorded). A refusal for a conflict needs no help: the event that moved
// the task marks it too.
func (b *Broker) again(id string) {
	b.mu.Lock()
	if e, ok := b.live[id]; ok {
		b.markLocked(e)
	}
	b.mu.Unlock()
}

// liveTasks returns the live dispatch tasks, oldest first, as the view
// folded them now (a task that finished since the index saw it is left
// out).
func (b *Broker) liveTasks() []fsm.Task {
	b.mu.Lock()
	ids := sortedIDs(b.live)
	b.mu.Unlock()
	return b.viewTasks(ids, func(t *fsm.Task) bool { return !t.IsTerminal() })
}

// aliveLocked reports whether worker id (w) may get a new task now: seen
// within WorkerTTL and not draining.
func (b *Broker) aliveLocked(id string, w *projection.Worker, now time.Time) bool {
	seen, ok := b.seen[id]
	return ok && now.Sub(seen) <= b.opts.WorkerTTL && !w.Draining
}

// pickLocked chooses the worker for t: alive, not draining, below its
// max_tasks, with every required capability; the least loaded first, then
// by id. The score is the seed's 1.0 + priority*0.05, scaled by the
// capability match (1 for an eligible worker).
func (b *Broker) pickLocked(t *fsm.Task, load map[string]int, now time.Time) (string, float64) {
	best, bestLoad := "", 0
	for id, w := range b.workers {
		if !b.aliveLocked(id, w, now) || load[id] >= w.MaxTasks || !w.Has(t.Dispatch.RequiredCapabilities) {
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
	res, err := b.app.Append(ctx, t.ID, eventlog.Exactly(t.Version), out...)
	if err != nil {
		return res, err
	}
	return res, b.WaitFor(ctx, res.LastSeq)
}

// WaitFor blocks until every read of b reflects the log up to seq: the
// view has folded it and, while the loop runs, follow has indexed it. A
// command waits for its own append, so that the caller's next read sees
// its write (a worker's long poll after its report does not return the
// task it just completed); a server waits for the events it serves, so
// that a client that saw an event reads a task that includes it.
func (b *Broker) WaitFor(ctx context.Context, seq uint64) error {
	if err := b.tasks.WaitFor(ctx, seq); err != nil {
		return err
	}
	b.mu.Lock()
	running := b.running
	b.mu.Unlock()
	if !running {
		return nil
	}
	return b.followed.Wait(ctx, seq)
}

// encodeEvent builds the log event of a decision on t at time now.
func encodeEvent(t *fsm.Task, now time.Time, e typedBody) (eventlog.Event, error) {
	data, err := fsm.Encode(e.body)
	if err != nil {
		return eventlog.Event{}, err
	}
	return eventlog.Event{Type: string(e.et), Time: now, Schema: fsm.SchemaVersion, Body: data, Causation: t.LastEvent}, nil
}

// Wait blocks until cond holds for the broker's view of things (checked
// at once and after every dispatch or worker event), or ctx ends.
func (b *Broker) Wait(ctx context.Context, cond func() bool) error {
	return b.waitOn(ctx, cond, func() chan struct{} {
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		return b.changed
	})
}

// waitOn checks cond at once and after each close of the channel that
// next returns (called with b.mu held), until cond holds or ctx ends.
func (b *Broker) waitOn(ctx context.Context, cond func() bool, next func() chan struct{}) error {
	for {
		b.mu.Lock()
		ch := next()
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
