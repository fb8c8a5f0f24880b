package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// Errors returned by the Agent. Callers match them with errors.Is.
var (
	// ErrStopped is returned for new work before Start and once Stop has
	// begun: the agent no longer accepts inputs or commands.
	ErrStopped = errors.New("agent: not accepting work (stopped or stopping)")
	// ErrUnknownTaskType is returned by Submit for a task type the agent
	// does not have.
	ErrUnknownTaskType = errors.New("agent: unknown task type")
	// ErrInvalidInput is returned for an input or command argument that is
	// out of bounds (too long, too many metadata entries, ...).
	ErrInvalidInput = errors.New("agent: invalid input")
	// ErrTaskNotFound is returned for an unknown task id.
	ErrTaskNotFound = projection.ErrTaskNotFound
)

// System event types, appended to the "$system" stream (their bodies are
// projection.SystemBody).
const (
	SystemStarted = string(projection.SystemStarted)
	SystemStopped = string(projection.SystemStopped)
)

const (
	stateNew = iota
	stateRunning
	stateDraining
	stateStopped
)

// Agent is the thin orchestrator: it decides what a task needs from its
// folded state, does the I/O (a model call, a tool call), appends the event
// that records the outcome, and lets the fold move the task. It holds no
// task state of its own: tasks change only when the replay follower folds
// a committed event, and the follower's hook dispatches the next stage.
type Agent struct {
	opts       Options
	log        *eventlog.Log     // reads
	app        eventlog.Appender // writes: Options.Appender, or log
	view       *replay.View
	model      llm.Model
	catalog    *catalog // every tool known and the task types over them
	reflectReg *tools.Registry
	memory     *logMemory
	llmSem     semaphore
	toolSem    semaphore

	sched    *scheduler        // admission slots, stage goroutines, timers (own lock)
	toolIdle chan *toolCallRun // call goroutines waiting for a tool call (callTool)
	deltas   *deltaHub         // the live text of model calls (own lock; deltas.go)
	rates    *rateLimits       // the named models' rate limits (own locks)
	spend    *spendBook        // the spend projection and the budgets (own lock)
	watch    *watchers         // waiters, listeners, the hook's progress (own lock)

	// gate: intake (Submit, commands) holds it shared; Stop takes it to
	// wait for intake already past the check.
	gate      sync.RWMutex
	leaveGate func() // gate.RUnlock, made once: what intake returns

	mu        sync.Mutex // guards state and followErr
	state     int
	followErr error

	stages    sync.WaitGroup // task loops and reflections
	runCtx    context.Context
	cancelRun context.CancelFunc
	follow    context.CancelFunc
	followed  chan struct{}

	corr     idMap[ulid.ULID] // task id -> correlation (its root input), cached from TASK_CREATED
	handoffs idMap[*handoff]  // task id -> its handoff (handoff.go)
	lines    *lifecycleLines  // the hook's log lines, written beside the fold (tasklog.go)

	recovery *replay.Recovery

	// Tests observe stages reaching a semaphore through these.
	testLLMWait, testToolWait func()
}

// New returns an agent over l. The agent owns l from now on: Stop closes
// it, last.
func New(l *eventlog.Log, opts Options) (*Agent, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	rates := limitModels(&opts)
	a := &Agent{
		rates:    rates,
		spend:    newSpendBook(l, opts.Prices, opts.Budgets),
		opts:     opts,
		log:      l,
		app:      opts.Appender,
		model:    opts.Model,
		llmSem:   newSemaphore(opts.MaxConcurrentLLM),
		toolSem:  newSemaphore(opts.MaxConcurrentTools),
		watch:    newWatchers(),
		toolIdle: make(chan *toolCallRun),
		deltas:   newDeltaHub(),
	}
	if a.app == nil {
		a.app = l
	}
	a.leaveGate = a.gate.RUnlock
	a.runCtx, a.cancelRun = context.WithCancel(context.Background())
	a.sched = newScheduler(opts.MaxActiveTasks, a.runCtx, opts.Now, &a.stages, a.runStage)
	a.sched.limits = opts.Concurrency
	a.memory = &logMemory{a: a}
	builtins := append(tools.MemoryTools(a.memory), tools.NotifyTool(), tools.CurrentTimeTool(opts.Now))
	var err error
	if a.catalog, err = newCatalog(append(builtins, opts.Tools...), opts.Providers, opts.TaskTypes, &a.opts); err != nil {
		return nil, err
	}
	if a.reflectReg, err = tools.NewRegistry(builtins...); err == nil {
		a.reflectReg, err = a.reflectReg.Subset(tools.MemoryRead, tools.MemoryWrite, tools.MemoryPatch, tools.MemoryAppend)
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Start recovers through the shared replay fold (persisted projections plus
// the tail of the log), starts the live follower, records SYSTEM_STARTED
// on "$system" and resumes the tasks that were reasoning or acting, by
// priority then age, then queues the tasks waiting in idle behind them. Suspended tasks stay suspended until a message or a
// resume. If Start fails, the log is closed.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	if a.state != stateNew {
		a.mu.Unlock()
		return errors.New("agent: Start called twice")
	}
	a.mu.Unlock()

	ropts := a.opts.Replay
	if ropts == nil {
		ropts = &replay.Options{}
	}
	ropts = func(o replay.Options) *replay.Options {
		if o.Logger == nil {
			o.Logger = a.opts.Logger
		}
		return &o
	}(*ropts)
	view, rec, err := replay.Open(ctx, a.log, ropts)
	if err != nil {
		a.mu.Lock()
		a.state = stateStopped
		a.mu.Unlock()
		a.sched.close()
		a.cancelRun()
		a.log.Close()
		return fmt.Errorf("agent: recovery: %w", err)
	}
	a.view, a.recovery = view, rec
	if err := a.spend.rebuild(rec.Head, rec.InFlight, rec.Suspended, rec.Idle); err != nil {
		a.opts.Logger.Error("rebuilding the spend projection", "err", err)
	}
	a.watch.markHooked(rec.Head) // recovery folds without the hook: nothing before the head is pending

	a.lines = startLifecycleLines(a.opts.Logger.Handler())
	fctx, cancel := context.WithCancel(context.Background())
	a.follow, a.followed = cancel, make(chan struct{})
	go func() {
		defer close(a.followed)
		err := view.Follow(fctx, a.log, a.hook)
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, eventlog.ErrClosed) {
			a.opts.Logger.Error("live fold stopped", "err", err)
			a.mu.Lock()
			a.followErr = err
			a.mu.Unlock()
		}
	}()

	a.mu.Lock()
	a.state = stateRunning
	a.mu.Unlock()

	_, err = a.appendSystem(ctx, SystemStarted, projection.SystemBody{
		Model: a.model.Name(), Config: a.opts.ConfigHash, Head: rec.Head, Resumed: len(rec.InFlight), Suspended: len(rec.Suspended),
	})
	switch {
	case errors.Is(err, eventlog.ErrDamaged):
		// The log holds damaged data (records missing below the head, a
		// corrupt table) and refuses writes until it is restored. The
		// agent runs, so that what is intact can be read while the damage
		// is inspected, but resumes nothing: no outcome could be recorded.
		// The log's Health says so (the daemon's readiness).
		a.opts.Logger.Error("the event log is damaged and refuses writes: started without resuming any task; restore the log",
			"head", rec.Head, "in_flight", len(rec.InFlight), "err", err)
		return nil
	case err != nil:
		_ = a.Stop(ctx)
		return fmt.Errorf("agent: recording start: %w", err)
	}
	a.resume(rec.InFlight, rec.Idle)
	a.opts.Logger.Info("agent started", "model", a.model.Name(), "config", a.opts.ConfigHash, "head", rec.Head,
		"resumed", len(rec.InFlight), "suspended", len(rec.Suspended), "rebuilt", rec.Rebuilt)
	return nil
}

// resume schedules the owned tasks of recovery's lists, in order.
func (a *Agent) resume(lists ...[]fsm.Task) {
	for _, ts := range lists {
		for _, t := range ts {
			if a.owns(t.ID) {
				a.sched.schedule(t.ID, t.Priority, t.ConcurrencyKey)
			}
		}
	}
}

func (a *Agent) owns(id string) bool { return a.opts.Owns == nil || a.opts.Owns(id) }

// ResumeOwned starts the work due for every unfinished task it owns that
// match selects, once the fold holds the log's head, as the hook does for a
// task that changed (fsm.Next: a stage to run takes a slot, a timer is
// armed): pegasusd --cluster calls it with the tasks of a partition it just
// took (Options.Owns now says yes to them; the hook did not dispatch their
// events until then). It resumes what a restart's recovery resumes. A task
// the hook dispatched meanwhile may run its stage twice; the second outcome
// is refused as a conflict and dropped.
func (a *Agent) ResumeOwned(ctx context.Context, match func(task string) bool) error {
	if err := a.view.WaitFor(ctx, a.log.Head()); err != nil {
		return err
	}
	for _, t := range a.view.Active() {
		if match(t.ID) {
			a.dispatch(&t, fsm.Next(&t))
		}
	}
	return nil
}

// Disown stops running the tasks match selects, which Options.Owns no
// longer says yes to (pegasusd --cluster gives their partition to another
// daemon): none of them is admitted, woken or started again, and Disown
// returns once no stage of theirs runs, letting running stages finish
// their current step (whose outcome is recorded) until ctx ends, then
// cancelling them. A post-task reflection already running is not waited
// for.
func (a *Agent) Disown(ctx context.Context, match func(task string) bool) error {
	running := a.sched.drop(match, false)
	for i, ended := range running {
		select {
		case <-ended:
		case <-ctx.Done():
			for _, ended := range append(a.sched.drop(match, true), running[i:]...) {
				<-ended
			}
			return ctx.Err()
		}
	}
	return nil
}

// Recovery returns what Start recovered.
func (a *Agent) Recovery() *replay.Recovery { return a.recovery }

// Stop stops intake at once, lets running stages finish their current step
// (a model call or a tool call, whose outcome is recorded) until ctx's
// deadline, then cancels what is left, records SYSTEM_STOPPED, waits for
// the fold to reach the head, checkpoints the projections and closes the
// log, last. Tasks stopped mid-way resume at the next Start.
func (a *Agent) Stop(ctx context.Context) error {
	a.mu.Lock()
	if a.state == stateStopped || a.state == stateDraining {
		a.mu.Unlock()
		return nil
	}
	if a.state == stateNew {
		a.cancelRun()
	}
	started := a.state == stateRunning
	a.state = stateDraining
	a.mu.Unlock()
	a.sched.close()

	// Wait for intake already past the state check.
	a.gate.Lock()
	a.gate.Unlock() //nolint:staticcheck // an empty critical section is the point: a barrier

	var errs []error
	clean := true
	if started {
		done := make(chan struct{})
		go func() { a.stages.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			clean = false
			a.opts.Logger.Warn("stop deadline reached: cancelling running stages")
			a.cancelRun()
			<-done
		}
		a.cancelRun()
		// Record the stop with a fresh context: ctx may be spent, and the
		// record is one synced append.
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// A damaged log refused every write since it was found (Start
		// said so): the stop is not recorded, and that is no new error.
		if res, err := a.appendSystem(sctx, SystemStopped, projection.SystemBody{Head: a.log.Head(), Clean: clean}); errors.Is(err, eventlog.ErrDamaged) {
			a.opts.Logger.Warn("stop not recorded: the event log is damaged and refuses writes", "err", err)
		} else if err != nil {
			errs = append(errs, fmt.Errorf("agent: recording stop: %w", err))
		} else if err := a.view.WaitFor(sctx, res); err != nil {
			errs = append(errs, fmt.Errorf("agent: waiting for the fold: %w", err))
		}
		cancel()
		a.follow()
		<-a.followed
		a.lines.stop()
		// The checkpoint is bounded by the stop deadline: what it cannot
		// write is folded again at the next Start.
		if err := a.view.Checkpoint(ctx); err != nil && ctx.Err() != nil {
			a.opts.Logger.Warn("stop deadline reached: checkpoint not written; the tail is folded again at the next start", "err", err)
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	a.mu.Lock()
	a.state = stateStopped
	ferr := a.followErr
	a.mu.Unlock()
	if ferr != nil {
		errs = append(errs, fmt.Errorf("agent: live fold: %w", ferr))
	}
	if err := a.log.Close(); err != nil && !errors.Is(err, eventlog.ErrClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (a *Agent) appendSystem(ctx context.Context, typ string, body projection.SystemBody) (uint64, error) {
	data, err := projection.EncodeSystem(&body)
	if err != nil {
		return 0, err
	}
	res, err := a.app.Append(ctx, projection.SystemStream, eventlog.Any,
		eventlog.Event{Type: typ, Schema: projection.SystemSchemaVersion, Body: data})
	if err != nil {
		return 0, err
	}
	return res.LastSeq, nil
}

// intake guards one piece of intake: it fails once Stop began and
// otherwise holds the gate until done is called.
func (a *Agent) intake() (done func(), err error) {
	a.gate.RLock()
	a.mu.Lock()
	ok := a.state == stateRunning
	a.mu.Unlock()
	if !ok {
		a.gate.RUnlock()
		return nil, ErrStopped
	}
	return a.leaveGate, nil
}

// Accepting reports whether the agent takes new work: started and not
// stopping. The daemon's readiness probe.
func (a *Agent) Accepting() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state == stateRunning && a.followErr == nil
}

// ---- the hook: the follower calls it after folding each event.

func (a *Agent) hook(ch *replay.Change) error {
	defer a.watch.markHooked(ch.Raw.Seq)
	if ch.Kind != projection.KindTask {
		return nil
	}
	id := ch.Event.Stream
	done := ch.Err == nil && Done(&ch.After)
	defer a.watch.signal(id, done)
	if ch.Err != nil {
		// The fold refused an event: someone appended around the machine,
		// or a bug. The task is unchanged; verify reports it.
		a.opts.Logger.Warn("fold refused an event", taskIDAttr(id), machineAttr(&ch.Before), eventIDAttr(ch.Raw.ID), "seq", ch.Event.Seq, "type", ch.Event.Type, "err", ch.Err)
		return nil
	}
	a.logLifecycle(ch)
	a.spend.apply(&ch.Event, done && !Done(&ch.Before))
	ev, after := &ch.Event, &ch.After
	handedOff := a.handedOff(id, ch.Raw.ID)
	switch ev.Type {
	case fsm.MessageReceived, fsm.WebhookTriggered, fsm.ScheduleFired, fsm.TaskCreated:
		// Stored unless it is already (an admission in the input's
		// commit stored it first): a store takes the map's write lock,
		// which the stages' reads wait on.
		if v, ok := a.corr.load(id); !ok || v != ch.Raw.Correlation {
			a.corr.store(id, ch.Raw.Correlation)
		}
	case fsm.TaskNotify:
		if b, ok := ev.Body.(*fsm.TaskNotifyBody); ok {
			a.watch.notify(Notification{Type: NotifyMessage, TaskID: id, Message: b.Message, Seq: ev.Seq, Time: ev.Time})
		}
	case fsm.TaskCompleted:
		a.corr.remove(id)
		a.watch.notify(Notification{Type: NotifyCompleted, TaskID: id, Result: after.Context.FinalResult, Seq: ev.Seq, Time: ev.Time})
	case fsm.TaskFailed:
		a.corr.remove(id)
		a.watch.notify(Notification{Type: NotifyFailed, TaskID: id, Error: after.Context.Error, Seq: ev.Seq, Time: ev.Time})
	}
	was, now := fsm.Next(&ch.Before), fsm.Next(after)
	if now == was && len(after.History) == len(ch.Before.History) {
		return nil // a fact that leaves the same work due: its stage still runs
	}
	if !handedOff {
		// (Otherwise not the last event of a commit whose stage gave its
		// slot away: the last one says what is due.)
		a.dispatch(after, now)
	}
	if after.ParentID != "" && Done(after) && !Done(&ch.Before) {
		a.wakeParent(after)
	}
	return nil
}

// dispatch acts on the work the machine says is due for t, which just
// changed: a stage to run takes (or keeps) an admission slot; anything
// else gives the slot up. Waiting for input or for nothing also cancels a
// stage still running for the task (its outcome would be refused as a
// conflict anyway).
func (a *Agent) dispatch(t *fsm.Task, act fsm.Action) {
	switch {
	case !a.owns(t.ID):
		// Another daemon runs it (pegasusd --cluster).
	case act.Kind.NeedsSlot():
		a.sched.schedule(t.ID, t.Priority, t.ConcurrencyKey)
	case act.Kind == fsm.ActReflect:
		a.sched.release(t.ID, false)
		a.maybeReflect(t)
	case act.Kind == fsm.ActWaitTask:
		// The task may wait for a child that ended while it could not
		// record it (suspended since): then its stage runs at once.
		a.releaseWaiting(t, act.Task)
	case act.Kind == fsm.ActWaitUntil:
		a.sched.release(t.ID, false)
		a.sched.wakeAt(t.ID, t.Priority, t.ConcurrencyKey, act.At)
	default: // wait for input, or nothing
		a.sched.release(t.ID, true)
	}
}

// wakeParent schedules the parent of child, which just ended, if the
// parent waits for it: the parent's stage records the child's outcome.
func (a *Agent) wakeParent(child *fsm.Task) {
	p, err := a.view.Task(child.ParentID)
	if err != nil {
		return
	}
	if act := fsm.Next(&p); act.Kind == fsm.ActWaitTask && act.Task == child.ID && a.owns(p.ID) {
		a.sched.schedule(p.ID, p.Priority, p.ConcurrencyKey)
	}
}

// runStage is the scheduler's run: one stage of task id, as folded now.
func (a *Agent) runStage(ctx context.Context, id string) {
	if !a.owns(id) {
		// Disowned while it waited (a timer, the admission queue).
		a.sched.release(id, false)
		return
	}
	// A stage that ran on (chain.go) appended events the hook dispatched
	// while it worked; the next stage reads the task once they are all
	// folded, not a state in the middle of the last commit.
	if seq := a.sched.appendedSeq(id); seq > 0 {
		if err := a.view.WaitFor(ctx, seq); err != nil {
			return
		}
	}
	t, err := a.view.Task(id)
	if err != nil {
		a.opts.Logger.Error("task missing from the view", taskIDAttr(id), "err", err)
		return
	}
	a.stage(ctx, &t)
}

// stage does the work the machine says is due for t (fsm.Next): the
// agent dispatches on the action, never on a machine's state.
func (a *Agent) stage(ctx context.Context, t *fsm.Task) {
	act := fsm.Next(t)
	switch act.Kind {
	case fsm.ActStart:
		a.admit(ctx, t)
	case fsm.ActCallModel:
		a.callModel(ctx, t, act, nil)
	case fsm.ActRunStep:
		a.runStep(ctx, t, act)
	case fsm.ActCompile:
		a.outcome(ctx, t, t.Version, t.LastEvent, &fsm.TaskCompletedBody{Result: compileResult(t)})
	case fsm.ActWaitTask:
		a.awaitChild(ctx, t, act)
	case fsm.ActWaitUntil:
		a.wakeUp(ctx, t, act)
	}
}

// ---- waiting on tasks

// WaitUntil blocks until cond holds for task id as folded, or ctx ends, and
// returns the task. cond is checked at once and after every event of the
// task.
func (a *Agent) WaitUntil(ctx context.Context, id string, cond func(*fsm.Task) bool) (fsm.Task, error) {
	t, err := a.Task(id)
	if err != nil || cond(&t) {
		return t, a.dispatched(ctx, &t, err)
	}
	for {
		ch := a.watch.changed(id)
		// Look again now that a signal cannot be missed.
		if t, err = a.Task(id); err != nil || cond(&t) {
			return t, a.dispatched(ctx, &t, err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return t, ctx.Err()
		}
	}
}

// dispatched waits until the hook has dispatched t's last event: the view
// folds an event before the hook acts on it, and a caller that saw the
// task finished must also find what that started (a reflection, a woken
// parent) under way.
func (a *Agent) dispatched(ctx context.Context, t *fsm.Task, err error) error {
	if err != nil {
		return err
	}
	return a.watch.waitHooked(ctx, t.Seq)
}

// Done reports whether a task is finished: failed, or completed with its
// result recorded (terminal, with no result left to compile).
func Done(t *fsm.Task) bool {
	return t.IsTerminal() && fsm.Next(t).Kind != fsm.ActCompile
}

// WaitForTask blocks until task id is finished (see Done) or ctx ends.
// It is WaitUntil(ctx, id, Done), woken once, by the event that finishes
// the task, rather than after each of its events.
//
// The waiter is registered before the task is read, so that one read
// serves a task that is not done yet (the common case: it was just
// submitted) and the event that finishes it cannot be missed.
func (a *Agent) WaitForTask(ctx context.Context, id string) (fsm.Task, error) {
	for {
		dw := a.watch.whenDone(id)
		t, err := a.Task(id)
		if err != nil || Done(&t) {
			a.watch.leave(id, dw)
			return t, a.dispatched(ctx, &t, err)
		}
		select {
		case <-dw.ch:
			a.watch.leave(id, dw)
			if t, err = a.Task(id); err != nil || Done(&t) {
				return t, a.dispatched(ctx, &t, err)
			}
		case <-ctx.Done():
			a.watch.leave(id, dw)
			return t, ctx.Err()
		}
	}
}

// ---- queries

// Task returns a task as folded.
func (a *Agent) Task(id string) (fsm.Task, error) {
	if a.view == nil {
		return fsm.Task{}, ErrStopped
	}
	return a.view.Task(id)
}

// View returns the fold that Start recovered and keeps following: task
// lists, progress, stats, memory; nil before Start. Unlike the log and the
// model, which the caller opens and hands to New (so it holds them
// already), the view is built by the agent, so this is how the daemon's
// API and metrics reach it.
func (a *Agent) View() *replay.View { return a.view }

// TaskTypes returns the names of the task types: the built-in ones, then
// those of Options.TaskTypes.
func (a *Agent) TaskTypes() []string {
	out := make([]string, 0, len(a.catalog.types))
	for _, tt := range a.catalog.types {
		out = append(out, tt.Name)
	}
	return out
}

// Tools returns every tool known now, in name order: the built-in ones,
// ask_user (offered to every type, never executed), Options.Tools (worker
// tools among them) and the Providers' tools now.
func (a *Agent) Tools() []tools.Tool {
	all, _ := a.catalog.current(&a.opts)
	ts := all.Tools()
	i, _ := slices.BinarySearchFunc(ts, AskUserTool, func(t tools.Tool, name string) int { return strings.Compare(t.Name(), name) })
	return slices.Insert(ts, i, tools.Tool(askUser{}))
}

// Types returns each task type resolved now (its tools and version), in
// the order of TaskTypes.
func (a *Agent) Types() []TaskTypeInfo {
	_, kinds := a.catalog.current(&a.opts)
	out := make([]TaskTypeInfo, 0, len(a.catalog.types))
	for _, tt := range a.catalog.types {
		k := kinds[tt.Name]
		out = append(out, TaskTypeInfo{TaskType: tt, ToolNames: slices.Clone(k.toolNames), Version: k.version})
	}
	return out
}

// Queued reports whether task id is waiting for an admission slot.
func (a *Agent) Queued(id string) bool { return a.sched.queued(id) }

// QueuedTasks returns the ids of the tasks waiting for an admission slot,
// in no particular order.
func (a *Agent) QueuedTasks() []string { return a.sched.queuedIDs() }

// RuntimeStats are the agent's scheduling counters.
type RuntimeStats struct {
	ActiveSlots    int `json:"active_slots"`     // tasks holding an admission slot
	MaxActiveTasks int `json:"max_active_tasks"` //
	Queued         int `json:"queued"`           // tasks waiting for a slot
	LLMInUse       int `json:"llm_in_use"`       // model calls running
	ToolsInUse     int `json:"tools_in_use"`     // tool calls running
	MaxLLM         int `json:"max_llm"`          // --max-concurrent-llm
	MaxTools       int `json:"max_tools"`        // --max-concurrent-tools
}

// Runtime returns the scheduling counters.
func (a *Agent) Runtime() RuntimeStats {
	active, queued := a.sched.counts()
	return RuntimeStats{ActiveSlots: active, MaxActiveTasks: a.opts.MaxActiveTasks, Queued: queued,
		LLMInUse: len(a.llmSem), ToolsInUse: len(a.toolSem), MaxLLM: cap(a.llmSem), MaxTools: cap(a.toolSem)}
}

// ---- appending

// correlation returns the root input of task id: cached from its first
// event, else read from the log (the task id is the creating input's id).
func (a *Agent) correlation(id string) ulid.ULID {
	if v, ok := a.corr.load(id); ok {
		return v
	}
	if uid, err := ulid.ParseStrict(id); err == nil {
		if ev, err := a.log.Get(uid); err == nil {
			a.corr.store(id, ev.Correlation)
			return ev.Correlation
		}
	}
	return ulid.ULID{}
}

// event builds a task event caused by cause.
func (a *Agent) event(taskID string, cause ulid.ULID, body fsm.Body) eventlog.Event {
	return correlatedEvent(a.correlation(taskID), cause, body)
}

// correlatedEvent is event with the task's correlation known: the events
// of one outcome look it up once.
func correlatedEvent(correlation, cause ulid.ULID, body fsm.Body) eventlog.Event {
	data, err := fsm.Encode(body)
	if err != nil {
		// Every body this package builds is encodable; a failure is a bug.
		panic(fmt.Sprintf("agent: encoding %s: %v", body.EventType(), err))
	}
	return eventlog.Event{
		Type: string(body.EventType()), Causation: cause, Correlation: correlation,
		Schema: fsm.SchemaVersion, Body: data,
	}
}

// outcome appends the events that record the outcome of t's stage, built
// from bodies, expecting t's stream at version v. The stages that follow
// and need no I/O go in the same commit, as the machine says they are due
// once these events are folded (Apply, then Next on a copy; the agent
// never routes on its own): a respond or generate step (STEP_COMPLETED
// with its text, caused by the event before it, as if it ran on its own
// after that event was folded), and TASK_COMPLETED with the compiled
// result when the result is due, so that no crash can leave a completed
// task without its result. When the task needs no slot after them, the
// slot passes to the next task before the commit (handOff).
func (a *Agent) outcome(ctx context.Context, t *fsm.Task, v uint64, cause ulid.ULID, bodies ...fsm.Body) (eventlog.AppendResult, bool) {
	return a.outcomeHeld(ctx, t, nil, v, cause, bodies...)
}

// outcomeHeld is outcome after the events h holds (nil: none). When the
// stage due after the outcome can start at once (a tool call; a model call
// unless a model call is among the events), it runs with the events held,
// which its first append carries (chain.go).
func (a *Agent) outcomeHeld(ctx context.Context, t *fsm.Task, h *held, v uint64, cause ulid.ULID, bodies ...fsm.Body) (eventlog.AppendResult, bool) {
	pred := t.Fork() // a prediction: Apply writes none of the memory it shares with t
	ok := true
	now := a.opts.Now()
	// The events are built here first, and copied into their array once
	// their number and the stage chained after them are known: the array
	// is made once, as large as they and that stage need (chainRoom).
	var buf [4 + maxChained]eventlog.Event // (more bodies than 4: out grows)
	out := buf[:0]
	corr := a.correlation(t.ID)
	add := func(b fsm.Body) {
		ev := correlatedEvent(corr, cause, b)
		ev.ID = a.log.NewID() // known before the commit: a later stage's cause, handOff's
		// The View folds b rather than decode ev.Body again.
		a.view.Expect(ev.ID, ev.Body, b)
		out = append(out, ev)
		ok = ok && predict(&pred, &out[len(out)-1], b, now)
	}
	for _, b := range bodies {
		add(b)
	}
	next := fsm.Next(&pred)
	for range maxChained {
		if !ok {
			break
		}
		if next.Kind == fsm.ActCompile {
			add(&fsm.TaskCompletedBody{Result: compileResult(&pred)})
		} else if b := pureStep(&pred, next); b != nil {
			cause = out[len(out)-1].ID
			add(b)
		} else {
			break
		}
		next = fsm.Next(&pred)
	}
	room := 0
	if ok {
		room = chainRoom(next)
	}
	evs := append(h.room(len(out)+room), out...)
	if ok && next.Kind.NeedsSlot() {
		if res, done, chained := a.chain(ctx, pred, next, h, v, evs); chained {
			return res, done
		}
	}
	if !ok || next.Kind.NeedsSlot() {
		return a.appendHeld(ctx, t, h, v, evs...)
	}
	return h.carry(v, evs, func(v uint64, evs []eventlog.Event) (eventlog.AppendResult, bool) {
		return a.handOff(ctx, t, v, evs)
	})
}

// maxChained bounds the stages outcome chains in one commit.
const maxChained = 8

// pureStep returns the body that records step act of t when running it
// needs no I/O (a respond or generate step completes with its text), or
// nil: a tool call or a sub task, or not a step due.
func pureStep(t *fsm.Task, act fsm.Action) fsm.Body {
	step := t.Context.Plan.CurrentStep()
	if act.Kind != fsm.ActRunStep || step == nil || step.Index != act.Step ||
		act.StepType == fsm.ActionToolCall || act.StepType == fsm.ActionSubTask {
		return nil
	}
	return fsm.StepDone(act, step.ActionParams["text"], false)
}

// appendTask appends events to task t's stream expecting it at version
// v. A conflict means the task moved (a suspend, a cancel, a message)
// while the stage worked: the stale outcome is dropped, never applied.
//
// Through an Options.Appender (pegasusd --cluster), an append that failed
// otherwise, and may succeed later (no stream leader during an election,
// an acknowledgement that never came), is sent again with the same event
// ids, so that one that was stored after all is not stored twice, with a
// backoff from appendRetryFirst to appendRetryMax, for as long as the
// stage runs and the agent owns the task: the stage's outcome (a model's
// answer, a tool's result) is not lost to a passing failure, and the
// task does not wait for the next start. The log itself fails only for
// good (ErrFailed, corruption): its ids are left to it, which spares the
// idempotency lookup of ids given by the caller.
func (a *Agent) appendTask(ctx context.Context, t *fsm.Task, v uint64, evs ...eventlog.Event) (eventlog.AppendResult, bool) {
	return a.appendRef(ctx, refOf(t), v, evs...)
}

// taskRef is what appending to a task's stream needs of the task: its id,
// and its machine for the log lines. A callback that appends holds one
// rather than the task, which then stays where its stage put it (on the
// stage's stack, when it can).
type taskRef struct {
	id      string
	machine fsm.MachineRef
}

func refOf(t *fsm.Task) taskRef { return taskRef{id: t.ID, machine: t.Machine} }

// appendRef is appendTask for the task t refers to.
func (a *Agent) appendRef(ctx context.Context, t taskRef, v uint64, evs ...eventlog.Event) (eventlog.AppendResult, bool) {
	idempotent := a.app != eventlog.Appender(a.log)
	if idempotent {
		for i := range evs {
			if evs[i].ID == (ulid.ULID{}) {
				evs[i].ID = a.log.NewID()
			}
		}
	}
	wait := appendRetryFirst
	for attempt := 1; ; attempt++ {
		res, err := a.app.Append(ctx, t.id, eventlog.Exactly(v), evs...)
		switch {
		case err == nil:
			a.sched.appended(t.id, res.LastSeq)
			if attempt > 1 {
				a.opts.Logger.Info("stage outcome recorded after a retry", taskIDAttr(t.id), machineRefAttr(t.machine), "type", evs[len(evs)-1].Type, "attempts", attempt)
			}
			return res, true
		case errors.Is(err, eventlog.ErrConflict):
			a.opts.Logger.Debug("stale stage outcome dropped", taskIDAttr(t.id), machineRefAttr(t.machine), "type", evs[len(evs)-1].Type, "err", err)
			return res, false
		case ctx.Err() != nil || errors.Is(err, eventlog.ErrClosed):
			a.opts.Logger.Debug("stage outcome not recorded: stopping", taskIDAttr(t.id), machineRefAttr(t.machine), "type", evs[len(evs)-1].Type)
			return res, false
		case !idempotent || !retryable(err) || !a.owns(t.id):
			a.opts.Logger.Error("appending a stage outcome failed; the task resumes at the next start",
				taskIDAttr(t.id), machineRefAttr(t.machine), "type", evs[len(evs)-1].Type, "err", err)
			return res, false
		}
		if attempt == 1 {
			a.opts.Logger.Warn("appending a stage outcome failed; retrying with the same event ids",
				taskIDAttr(t.id), machineRefAttr(t.machine), "type", evs[len(evs)-1].Type, "err", err)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
		case <-timer.C:
		}
		wait = min(2*wait, appendRetryMax)
	}
}

// The backoff of appendTask's retries.
const (
	appendRetryFirst = 20 * time.Millisecond
	appendRetryMax   = 5 * time.Second
)

// retryable reports whether an append that failed with err may succeed
// if sent again unchanged: not bad input, not an id used for other
// content, not a log that refuses writes until a restart or found
// corruption.
func retryable(err error) bool {
	return !errors.Is(err, eventlog.ErrInvalid) && !errors.Is(err, eventlog.ErrIDReused) &&
		!errors.Is(err, eventlog.ErrFailed) && !eventlog.IsCorruption(err)
}
