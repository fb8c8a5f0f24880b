package broker

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// The built-in agent as a worker (docs/broker.md, "The built-in agent").
//
// It registers as AgentWorkerID with AgentCapabilities. A broker task
// assigned to it runs as a pegasus.task child: the worker reports the
// start (DISPATCH_STARTED), appends the child's input (MESSAGE_RECEIVED
// with parent_task_id = the broker task, source AgentSource), which the
// agent runs like any task, and when the child ends it completes the
// broker task with the child's result or fails it with retry_eligible
// true, so a broker task run by the agent gets deadlines, retries and the
// DLQ like any other.
//
// It acts only on what the machines say is due (fsm.Next of the broker
// task, fsm.Next and IsTerminal of the child), and is restartable by
// construction: the child's id is fixed by the attempt (agentChildID), so
// creating it again after a crash finds it in the log and appends nothing,
// and every report is appended at the version of the task it was decided
// on, so a report that made it before the crash is not made twice. Its
// start-up step is the same as every other step: for each live broker
// task assigned to it, do what is due (start, create the child, report
// its end).
const (
	// AgentWorkerID is the worker id of the built-in agent.
	AgentWorkerID = "pegasus"
	// AgentSource is the source of the pegasus.task children the built-in
	// worker creates.
	AgentSource = "broker"
)

// AgentCapabilities are the built-in agent's capabilities with the
// default task types: "agent", and its task types. A broker task must
// require at least one of them (and nothing else) to be run by the agent;
// a task that requires nothing goes to external workers only. With
// Options.AgentTaskTypes, the capabilities are "agent" and those types
// (Broker.AgentCapabilities).
var AgentCapabilities = []string{"agent", "general", "explore", "plan"}

// defaultAgentTaskTypes are the agent's built-in task types, the
// default of Options.AgentTaskTypes.
var defaultAgentTaskTypes = []string{"general", "explore", "plan"}

// AgentCapabilities are the capabilities the built-in worker registers:
// "agent" and the agent's task types, in lower case.
func (b *Broker) AgentCapabilities() []string {
	caps := []string{"agent"}
	for _, t := range b.opts.AgentTaskTypes {
		if t = strings.ToLower(t); !slices.Contains(caps, t) {
			caps = append(caps, t)
		}
	}
	return caps
}

// RunAgentWorker runs the built-in agent as a worker until ctx ends: it
// registers (when not registered as such already: a drain survives a
// restart), then, at start and after every broker event and every event
// of a child it runs, does what is due for the broker tasks assigned to
// it. maxTasks is how many it runs at once (0 means 1).
func (b *Broker) RunAgentWorker(ctx context.Context, maxTasks int) error {
	sub := b.log.SubscribeBuffered(ctx, b.log.Head()+1, followBuffer)
	defer sub.Close()
	if err := b.RegisterAgentWorker(ctx, maxTasks); err != nil {
		return err
	}
	w := &agentWorker{b: b, wake: make(chan struct{}, 1), ended: map[string]ulid.ULID{}, mine: map[string]struct{}{}}
	b.mu.Lock()
	b.agentWake = w.wake
	b.mu.Unlock()
	w.endedBefore()
	errc := make(chan error, 1)
	go func() { errc <- w.follow(ctx, sub) }()
	all := true // look at every live task: at start, then at each tick
	for {
		b.Seen(AgentWorkerID) // alive while it runs
		w.cancelStale(ctx)
		w.step(ctx, all)
		var err error
		if all, err = b.sleep(ctx, errc, w.wake, b.opts.WorkerTTL/3); err != nil {
			return err
		}
		all = b.agentAll.Swap(false) || all
	}
}

// RegisterAgentWorker records WORKER_REGISTERED for the built-in agent
// unless the registry already holds it with these capabilities and
// max_tasks (0 means 1). RunAgentWorker calls it; a daemon calls it first
// too, so that the worker is registered once it serves.
func (b *Broker) RegisterAgentWorker(ctx context.Context, maxTasks int) error {
	maxTasks = max(maxTasks, 1)
	b.mu.Lock()
	w, ok := b.workers[AgentWorkerID]
	caps := b.AgentCapabilities()
	same := ok && w.MaxTasks == maxTasks && slices.Equal(w.Capabilities, caps)
	b.mu.Unlock()
	if same {
		return nil
	}
	_, err := b.Register(ctx, AgentWorkerID, caps, maxTasks)
	return err
}

// agentWorker is the state of one RunAgentWorker: its wake-up, the broker
// tasks assigned to it, and those whose attempt ended by a timeout, whose
// children may still run.
type agentWorker struct {
	b    *Broker
	wake chan struct{} // buffered 1

	mu    sync.Mutex
	mine  map[string]struct{}  // broker tasks assigned to the agent (a hint: step asks the machine)
	ended map[string]ulid.ULID // broker task -> the event that ended an attempt (the cancel's cause)
}

// follow wakes the worker's loop, once the view folded it, after an
// assignment to the agent, a timeout of a task with children, and every
// event of a child the index knows. It reads nothing else, so a busy
// broker of external workers costs it a map lookup per event and the
// decoding of each assignment's small body.
func (w *agentWorker) follow(ctx context.Context, sub *eventlog.Subscription) error {
	b := w.b
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		assigned, timedOut := ev.Type == string(fsm.DispatchAssigned), ev.Type == string(fsm.DispatchTimedOut)
		if assigned {
			// Another worker's assignment is none of its business: read
			// the body, not the folded task (the step asks the machine).
			body, err := fsm.Decode(fsm.DispatchAssigned, ev.Schema, ev.Body)
			if a, ok := body.(*fsm.DispatchAssignedBody); err != nil || !ok || a.Worker != AgentWorkerID {
				continue
			}
		}
		if !assigned && !timedOut && b.children.parentOf(ev.Stream) == "" {
			continue
		}
		if err := b.tasks.WaitFor(ctx, ev.Seq); err != nil {
			return err
		}
		switch {
		case assigned:
			if t, err := b.tasks.Task(ev.Stream); err != nil || !waitsForAgent(&t) {
				continue
			}
			w.mu.Lock()
			w.mine[ev.Stream] = struct{}{}
			w.mu.Unlock()
		case timedOut:
			if len(b.children.of(ev.Stream)) == 0 {
				continue
			}
			w.mu.Lock()
			w.ended[ev.Stream] = ev.ID
			w.mu.Unlock()
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// endedBefore notes, at start, the broker tasks with a child of the
// built-in agent still running: an attempt may have timed out before a
// crash, its child left running.
func (w *agentWorker) endedBefore() {
	s, ok := w.b.tasks.(sourced)
	if !ok {
		return
	}
	for _, c := range s.TasksFrom(AgentSource) {
		if !c.IsTerminal() && c.ParentID != "" {
			w.ended[c.ParentID] = c.LastEvent
		}
	}
}

// cancelStale cancels the running children of the noted tasks that are not
// their task's current attempt: an attempt that timed out while its child
// ran. The child would finish for nothing (its outcome is ignored, the
// retry runs a new child); TASK_FAILED (reason cancelled), the operator's
// cancel, stops it. It is appended at the child's version: a child that
// moved meanwhile is looked at again at the next wake.
func (w *agentWorker) cancelStale(ctx context.Context) {
	w.mu.Lock()
	ended := w.ended
	w.ended = map[string]ulid.ULID{}
	w.mu.Unlock()
	b := w.b
	for id, cause := range ended {
		if !b.owns(id) {
			continue // its owner's worker cancels them
		}
		current := ""
		if t, err := b.tasks.Task(id); err == nil && waitsForAgent(&t) {
			current = agentChildID(&t).String()
		}
		for _, cid := range b.children.of(id) {
			c, err := b.tasks.Task(cid)
			if err != nil || cid == current || c.Context.Source != AgentSource || c.IsTerminal() || !c.CanTransition(fsm.TaskFailed) {
				continue
			}
			if err := b.cancelChild(ctx, &c, id, cause); err != nil {
				b.opts.Logger.Debug("built-in worker: a stale child not cancelled", "task", id, "child", cid, "err", err)
				w.mu.Lock()
				w.ended[id] = cause // look again at the next wake
				w.mu.Unlock()
			}
		}
	}
}

// cancelChild fails child c of broker task parent, caused by cause.
func (b *Broker) cancelChild(ctx context.Context, c *fsm.Task, parent string, cause ulid.ULID) error {
	data, err := fsm.Encode(&fsm.TaskFailedBody{Reason: "cancelled",
		Error: fmt.Sprintf("cancelled: the attempt of broker task %s it ran for ended (timed out)", parent)})
	if err != nil {
		return err
	}
	corr, _ := ulid.ParseStrict(parent)
	res, err := b.app.Append(ctx, c.ID, eventlog.Exactly(c.Version), eventlog.Event{Type: string(fsm.TaskFailed),
		Time: b.opts.Now(), Causation: cause, Correlation: corr, Schema: fsm.SchemaVersion, Body: data})
	if err != nil {
		return err
	}
	b.opts.Logger.Debug("built-in worker: stale child cancelled", "task", parent, "child", c.ID)
	return b.tasks.WaitFor(ctx, res.LastSeq)
}

// step does what is due for the broker tasks assigned to the built-in
// agent: those it noted, or with all every live task (at start, and at
// each tick, should a note have been missed). A task whose machine no
// longer says it waits for the agent is forgotten.
func (w *agentWorker) step(ctx context.Context, all bool) {
	b := w.b
	var tasks []fsm.Task
	if all {
		tasks = b.AgentTasks(AgentWorkerID) // the index knows whom each live task waits for
	} else {
		for _, id := range w.noted() {
			if t, err := b.tasks.Task(id); err == nil {
				tasks = append(tasks, t)
			}
		}
	}
	for _, t := range tasks {
		if !waitsForAgent(&t) || !b.owns(t.ID) {
			continue // (another daemon's built-in worker runs a task it does not own)
		}
		w.mu.Lock()
		w.mine[t.ID] = struct{}{}
		w.mu.Unlock()
		if err := b.agentAdvance(ctx, &t, fsm.Next(&t)); err != nil && ctx.Err() == nil {
			b.opts.Logger.Warn("built-in worker: not advanced; tried again at its next event", "task", t.ID, "err", err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.mine {
		if t, err := b.tasks.Task(id); err != nil || !waitsForAgent(&t) {
			delete(w.mine, id)
		}
	}
}

// noted returns the tasks noted as assigned to the agent.
func (w *agentWorker) noted() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.mine))
	for id := range w.mine {
		out = append(out, id)
	}
	return out
}

// waitsForAgent reports whether t's machine says it waits for the
// built-in agent's report.
func waitsForAgent(t *fsm.Task) bool {
	act := fsm.Next(t)
	return act.Kind == fsm.ActWaitWorker && act.Task == AgentWorkerID
}

// agentAdvance moves one attempt of broker task t, assigned to the
// built-in agent, as far as it can now: report the start, create the
// child, and once the child ended, report its outcome.
func (b *Broker) agentAdvance(ctx context.Context, t *fsm.Task, act fsm.Action) error {
	child := agentChildID(t)
	if !act.Started {
		nt, _, err := b.Report(ctx, t.ID, AgentWorkerID, fsm.DispatchProgress,
			fsm.DispatchReportBody{Message: "running as pegasus.task " + child.String()})
		if errors.Is(err, ErrNotAssigned) {
			return nil // the task moved meanwhile (a timeout): nothing is due
		}
		if err != nil {
			return err
		}
		t = &nt
	}
	if err := b.createAgentChild(ctx, t, child); err != nil {
		return err
	}
	c, err := b.tasks.Task(child.String())
	if err != nil || !c.IsTerminal() || fsm.Next(&c).Kind == fsm.ActCompile {
		return nil // not folded yet, or running: its events wake the loop
	}
	kind, rep := fsm.DispatchCompleted, fsm.DispatchReportBody{}
	if c.Context.ResultRecorded {
		res, err := json.Marshal(map[string]string{"pegasus_task_id": c.ID, "result": c.Context.FinalResult})
		if err != nil {
			return err
		}
		rep.Result = string(res)
	} else {
		retry := true
		kind, rep.Error, rep.RetryEligible = fsm.DispatchFailed, fmt.Sprintf("pegasus.task %s failed: %s", c.ID, c.Context.Error), &retry
	}
	if _, _, err := b.Report(ctx, t.ID, AgentWorkerID, kind, rep); err != nil && !errors.Is(err, ErrNotAssigned) {
		return err
	}
	return nil
}

// createAgentChild appends the input of t's child for this attempt unless
// the log holds it: its id is fixed by the attempt, so this runs once
// however often it is asked (a crash between the start report and the
// child, or a restart, asks again).
func (b *Broker) createAgentChild(ctx context.Context, t *fsm.Task, child ulid.ULID) error {
	_, err := b.log.Get(child)
	if err == nil {
		b.children.add(t.ID, child.String())
		return nil
	}
	if !errors.Is(err, eventlog.ErrNotFound) {
		return err
	}
	d := t.Dispatch
	text := d.Title
	if d.Description != "" {
		text += "\n\n" + d.Description
	}
	data, err := fsm.Encode(&fsm.Input{Kind: fsm.MessageReceived, Text: text, Source: AgentSource, TaskType: b.agentTaskType(d.RequiredCapabilities),
		Priority: -t.Priority, Metadata: t.Metadata, ParentTaskID: t.ID, ConcurrencyKey: t.ConcurrencyKey})
	if err != nil {
		return err
	}
	var corr ulid.ULID // the broker task's root: its DISPATCH_CREATED, whose id is the task's
	if id, err := ulid.ParseStrict(t.ID); err == nil {
		corr = id
	}
	// Indexed first, so that the follower wakes the loop on the child's
	// events from its very first.
	b.children.add(t.ID, child.String())
	res, err := b.app.Append(ctx, child.String(), eventlog.NoStream, eventlog.Event{ID: child, Type: string(fsm.MessageReceived),
		Time: b.opts.Now(), Causation: t.LastEvent, Correlation: corr, Schema: fsm.SchemaVersion, Body: data})
	if err != nil {
		return err
	}
	b.opts.Logger.Debug("built-in worker: child created", "task", t.ID, "child", child)
	return b.tasks.WaitFor(ctx, res.LastSeq)
}

// agentChildID is the id of the pegasus.task child of t's current
// attempt: a ULID stamped with the attempt's assignment time whose random
// part is a hash of the task and the attempt (requeues, retry_count: every
// attempt differs in one of them). The same attempt always names the same
// child; the log stores an id once.
func agentChildID(t *fsm.Task) ulid.ULID {
	d := t.Dispatch
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(d.AssignedAt.Truncate(time.Millisecond)))
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d", t.ID, d.Requeues, d.RetryCount))
	copy(id[6:], sum[:10])
	return id
}

// agentTaskType is the child's task type: the first required capability
// that names one of the agent's (in any case), else general.
func (b *Broker) agentTaskType(caps []string) string {
	for _, c := range caps {
		for _, t := range b.opts.AgentTaskTypes {
			if strings.EqualFold(c, t) {
				return t
			}
		}
	}
	return "general"
}
