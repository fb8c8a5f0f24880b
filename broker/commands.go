package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/usererr"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// Seen records that agent made a request now (liveness). A worker that
// was not alive (never seen since the start, or not within WorkerTTL)
// wakes the loop: it may take queued tasks now, and nothing else would
// tell the loop so. A registered worker's first request, and then one
// every WorkerTTL/4, is given to Options.Share.
func (b *Broker) Seen(agent string) {
	if agent == "" {
		return
	}
	now := b.opts.Now()
	b.mu.Lock()
	worker, revived := b.seeLocked(agent, now, now)
	share := worker && b.opts.Share != nil && agent != AgentWorkerID && now.Sub(b.shared[agent]) >= b.opts.WorkerTTL/4
	if share {
		b.shared[agent] = now
	}
	b.mu.Unlock()
	if share {
		b.opts.Share(agent, now)
	}
	if revived {
		b.wake()
	}
}

// SeenElsewhere records that worker made a request to another broker at
// time at (Options.Share's other end). An older sighting than the one
// known changes nothing; one that makes a registered worker alive again
// wakes the loop, as Seen does.
func (b *Broker) SeenElsewhere(worker string, at time.Time) {
	if worker == "" || worker == AgentWorkerID {
		return // each daemon's built-in worker is its own
	}
	now := b.opts.Now()
	b.mu.Lock()
	_, revived := b.seeLocked(worker, at, now)
	b.mu.Unlock()
	if revived {
		b.wake()
	}
}

// seeLocked records a request of agent at time at, unless a later one is
// known, and reports whether agent is a registered worker and whether
// the request makes it alive again (not seen within WorkerTTL before):
// the loop must then wake, as nothing else would tell it that the worker
// may take queued tasks now.
func (b *Broker) seeLocked(agent string, at, now time.Time) (worker, revived bool) {
	_, worker = b.workers[agent]
	last, known := b.seen[agent]
	if known && !at.After(last) {
		return worker, false
	}
	b.seen[agent] = at
	return worker, worker && (!known || now.Sub(last) > b.opts.WorkerTTL) && now.Sub(at) <= b.opts.WorkerTTL
}

func (b *Broker) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Task returns the dispatch task id as folded.
func (b *Broker) Task(id string) (fsm.Task, error) {
	t, err := b.tasks.Task(id)
	if err != nil || t.Dispatch == nil {
		return fsm.Task{}, usererr.Errorf(ErrNotFound, "no such task %q", id)
	}
	return t, nil
}

// Live returns the dispatch tasks that are not finished (queued,
// assigned, in progress, failed or timed out and not dead-lettered),
// oldest first, as last folded: cheaper than Tasks.
func (b *Broker) Live() []fsm.Task { return b.liveTasks() }

// AgentTasks returns the tasks assigned to worker agent and not finished
// (assigned or in progress), oldest first: a worker's long poll, which
// costs the worker's own tasks, not the queue.
func (b *Broker) AgentTasks(agent string) []fsm.Task {
	b.mu.Lock()
	ids := sortedIDs(b.byWorker[agent])
	b.mu.Unlock()
	return b.viewTasks(ids, func(t *fsm.Task) bool {
		a := fsm.Next(t)
		return a.Kind == fsm.ActWaitWorker && a.Task == agent
	})
}

// WaitAgent is Wait for worker agent's long poll: cond is checked at once
// and again only when a task is assigned to agent, changes or leaves it.
func (b *Broker) WaitAgent(ctx context.Context, agent string, cond func() bool) error {
	return b.waitOn(ctx, cond, func() chan struct{} {
		ch, ok := b.workerCh[agent]
		if !ok {
			ch = make(chan struct{})
			b.workerCh[agent] = ch
		}
		return ch
	})
}

// Tasks returns every dispatch task as folded, oldest first.
func (b *Broker) Tasks() []fsm.Task {
	all := b.tasks.DispatchTasks()
	out := all[:0]
	for _, t := range all {
		if t.Dispatch != nil {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(x, y fsm.Task) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// Report is a worker's report on a task: progress (rep.Message only),
// complete (rep.Result, JSON text, compacted here; empty: null) or fail
// (rep.Error, required; rep.RetryEligible, when set, replaces the task's
// flag); rep.Kind and rep.AgentID are set from kind and agent. Only the
// assigned worker may report (ErrNotAssigned otherwise, and nothing is
// recorded); a report that is not one of the three, or whose body does
// not fit its kind, is an error wrapping ErrInvalid. A report the task
// already reflects (the same completion or failure from the same worker,
// sent again), or that repeats the worker's last report on an attempt
// that is over (sent again after a retry, see repeatedEarlier), is
// answered like the first: the task, with replayed true. A completion or
// failure of a task not started yet records DISPATCH_STARTED first, in
// the same atomic append.
func (b *Broker) Report(ctx context.Context, id, agent string, kind fsm.EventType, rep fsm.DispatchReportBody) (t fsm.Task, replayed bool, err error) {
	if err := checkReport(agent, kind, &rep); err != nil {
		return fsm.Task{}, false, err
	}
	b.Seen(agent)
	rep.AgentID = agent
	for attempt := 0; attempt < 3; attempt++ {
		if t, err = b.Task(id); err != nil {
			return t, false, err
		}
		d := t.Dispatch
		if repeated(&t, kind, &rep) || b.repeatedEarlier(&t, kind, &rep) {
			return t, true, nil
		}
		act := fsm.Next(&t)
		if act.Kind != fsm.ActWaitWorker || d.AssignedAgent != agent {
			return t, false, &ReportError{TaskID: id, Agent: agent, State: string(t.State), Assigned: d.AssignedAgent}
		}
		var evs []typedBody
		started := !d.StartedAt.IsZero()
		switch {
		case kind == fsm.DispatchProgress && !started:
			r := rep
			r.Kind = fsm.DispatchStarted
			evs = append(evs, eventOf(fsm.DispatchStarted, &r))
		case !started:
			evs = append(evs, eventOf(fsm.DispatchStarted, &fsm.DispatchReportBody{Kind: fsm.DispatchStarted, AgentID: agent}))
			fallthrough
		default:
			r := rep
			r.Kind = kind
			evs = append(evs, eventOf(kind, &r))
		}
		var res eventlog.AppendResult
		if res, err = b.append(ctx, &t, b.opts.Now(), evs...); errors.Is(err, eventlog.ErrConflict) {
			continue // the task moved (a timeout?): look again
		}
		if err != nil {
			return t, false, err
		}
		t, err = b.taskAt(ctx, id, res)
		return t, false, err
	}
	return t, false, err
}

// testAnswering, if set (tests), is called by taskAt between a command's
// append and the read of its answer.
var testAnswering func(id string)

// taskAt returns task id as the append res left it: the answer to the
// command that appended. The view may already hold a later event of the
// task (the loop dead-letters a failure that may not be retried as soon as
// it follows it, and assigns a requeued task to a worker with room), which
// the answer must not show: it is the command's outcome, not the task's
// next one. Then the task's stream is folded up to the append's last
// event.
func (b *Broker) taskAt(ctx context.Context, id string, res eventlog.AppendResult) (fsm.Task, error) {
	if testAnswering != nil {
		testAnswering(id)
	}
	t, err := b.Task(id)
	if err != nil || t.Version <= res.Version {
		return t, err
	}
	return replay.StateAt(ctx, replay.FromLog(b.log), id, replay.AtSeq(res.LastSeq))
}

// checkReport checks a report's body against its kind, before the task is
// looked at, and compacts a completion's result.
func checkReport(agent string, kind fsm.EventType, rep *fsm.DispatchReportBody) error {
	if agent == "" {
		return usererr.Errorf(ErrInvalid, "a report names its worker")
	}
	switch kind {
	case fsm.DispatchCompleted:
		if rep.Error != "" || rep.RetryEligible != nil {
			return usererr.Errorf(ErrInvalid, "a completion takes a result and a message, not an error")
		}
		if rep.Result != "" {
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(rep.Result)); err != nil {
				return usererr.Errorf(ErrInvalid, "result: %v", err)
			}
			rep.Result = compact.String()
		}
	case fsm.DispatchFailed:
		if strings.TrimSpace(rep.Error) == "" {
			return usererr.Errorf(ErrInvalid, "error is required")
		}
		if rep.Result != "" {
			return usererr.Errorf(ErrInvalid, "a failure takes an error, not a result")
		}
	case fsm.DispatchProgress:
		if rep.Result != "" || rep.Error != "" || rep.RetryEligible != nil {
			return usererr.Errorf(ErrInvalid, "progress takes a message only")
		}
	default:
		return usererr.Errorf(ErrInvalid, "%s is not a report (progress, complete or fail)", kind)
	}
	return nil
}

// repeated reports whether rep, of type kind, is already what t records
// as its last outcome (a retried HTTP request).
func repeated(t *fsm.Task, kind fsm.EventType, rep *fsm.DispatchReportBody) bool {
	d := t.Dispatch
	if d.LastAgent != rep.AgentID || len(t.History) == 0 || t.History[len(t.History)-1].Event != kind {
		return false
	}
	switch kind {
	case fsm.DispatchCompleted:
		return d.Result == rep.Result
	case fsm.DispatchFailed:
		return d.Error == rep.Error || d.DeadLettered
	}
	return false
}

// Update merges metadata into a task, recording who did it: any JSON
// value per key, given back as given (TaskMetadata); null or "" deletes
// the key, as in a JSON merge patch.
func (b *Broker) Update(ctx context.Context, id, by string, metadata map[string]json.RawMessage) (fsm.Task, error) {
	if by == "" || len(metadata) == 0 {
		return fsm.Task{}, usererr.Errorf(ErrInvalid, "an update needs an agent and metadata")
	}
	meta, metaJSON, err := splitMetadata(metadata, true)
	if err != nil {
		return fsm.Task{}, err
	}
	for attempt := 0; ; attempt++ {
		t, err := b.Task(id)
		if err != nil {
			return t, err
		}
		res, err := b.append(ctx, &t, b.opts.Now(), eventOf(fsm.DispatchUpdated, &fsm.DispatchUpdatedBody{AgentID: by, Metadata: meta, MetadataJSON: metaJSON}))
		if errors.Is(err, eventlog.ErrConflict) && attempt < 3 {
			continue
		}
		if err != nil {
			return t, err
		}
		return b.taskAt(ctx, id, res)
	}
}

// Requeue sends the dead letter id back to pending with its retries reset,
// recording who did it.
func (b *Broker) Requeue(ctx context.Context, id, by, reason string) (fsm.Task, error) {
	res, err := b.requeue(ctx, by, reason, func(t *fsm.Task) bool { return t.ID == id }, id)
	if err != nil {
		return fsm.Task{}, err
	}
	if len(res) == 0 {
		if _, err := b.Task(id); err != nil {
			return fsm.Task{}, err
		}
		return fsm.Task{}, usererr.Errorf(ErrNotDeadLetter, "task %q is not a dead letter", id)
	}
	return b.taskAt(ctx, id, res[0])
}

// RequeueMatching requeues every dead letter f selects, in one atomic
// append, and returns how many.
func (b *Broker) RequeueMatching(ctx context.Context, by, reason string, f projection.DLQFilter) (int, error) {
	res, err := b.requeue(ctx, by, reason, f.Match, "")
	return len(res), err
}

// requeue requeues the dead letters match selects (only: the task of that
// id alone) in one atomic append, and returns its results, one per task.
func (b *Broker) requeue(ctx context.Context, by, reason string, match func(*fsm.Task) bool, only string) ([]eventlog.AppendResult, error) {
	if by == "" {
		return nil, usererr.Errorf(ErrInvalid, "a requeue records who did it")
	}
	data, err := fsm.Encode(&fsm.DispatchRequeuedBody{AgentID: by, Reason: reason})
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		var candidates []fsm.Task
		if only != "" {
			if t, err := b.Task(only); err == nil {
				candidates = []fsm.Task{t}
			}
		} else {
			candidates = b.DLQ()
		}
		now := b.opts.Now()
		var appends []eventlog.StreamAppend
		for i := range candidates {
			t := &candidates[i]
			if !t.IsDeadLetter() || !match(t) {
				continue
			}
			appends = append(appends, eventlog.StreamAppend{Stream: t.ID, Expected: eventlog.Exactly(t.Version),
				Events: []eventlog.Event{{Type: string(fsm.DispatchRequeued), Time: now, Schema: fsm.SchemaVersion, Body: data, Causation: t.LastEvent}}})
		}
		if len(appends) == 0 {
			return nil, nil
		}
		res, err := b.app.AppendMulti(ctx, appends...)
		if errors.Is(err, eventlog.ErrConflict) && attempt < 3 {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := b.WaitFor(ctx, res[len(res)-1].LastSeq); err != nil {
			return nil, err
		}
		return res, nil
	}
}

// DLQ returns the dead letters, oldest dead-lettered first.
func (b *Broker) DLQ() []fsm.Task {
	var out []fsm.Task
	for _, t := range b.Tasks() {
		if t.IsDeadLetter() {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(x, y fsm.Task) int { return x.Dispatch.DeadLetteredAt.Compare(y.Dispatch.DeadLetteredAt) })
	return out
}

// Stats returns the broker's stats now.
func (b *Broker) Stats() projection.BrokerStats {
	return projection.ComputeBrokerStats(b.Tasks(), b.opts.Now())
}

// WorkerInfo is a worker as GET /api/v1/agents shows it.
type WorkerInfo struct {
	projection.Worker
	ActiveTasks []string  `json:"active_tasks"`
	LastSeen    time.Time `json:"last_seen,omitzero"`
	Alive       bool      `json:"alive"`
}

// Register registers or updates worker id (a WORKER_REGISTERED event; it
// also ends a drain). maxTasks 0 means 1.
func (b *Broker) Register(ctx context.Context, id string, caps []string, maxTasks int) (WorkerInfo, error) {
	if id == "" || maxTasks < 0 {
		return WorkerInfo{}, usererr.Errorf(ErrInvalid, "a worker needs an id and max_tasks >= 0")
	}
	for _, c := range caps {
		if strings.TrimSpace(c) == "" {
			return WorkerInfo{}, usererr.Errorf(ErrInvalid, "an empty capability")
		}
	}
	// The answer lists the tasks the worker held when it registered. The
	// loop may assign it a queued task as soon as the registration is
	// folded (it follows the log itself), before this request reads the
	// worker back: that task comes with the worker's next poll, so that
	// the answer never depends on which of the two ran first.
	b.mu.Lock()
	held := sortedIDs(b.byWorker[id])
	b.mu.Unlock()
	if err := b.workerEvent(ctx, projection.WorkerRegistered, &projection.WorkerBody{Worker: id, Capabilities: caps, MaxTasks: max(maxTasks, 1), By: id}); err != nil {
		return WorkerInfo{}, err
	}
	b.Seen(id) // registered now: shared, and alive at once
	w, err := b.Worker(id)
	if err != nil {
		return WorkerInfo{}, err
	}
	w.ActiveTasks = slices.DeleteFunc(w.ActiveTasks, func(t string) bool { return !slices.Contains(held, t) })
	return w, nil
}

// Drain stops new assignments to worker id (its running tasks finish),
// recording who did it.
func (b *Broker) Drain(ctx context.Context, id, by string) (WorkerInfo, error) {
	b.mu.Lock()
	_, ok := b.workers[id]
	b.mu.Unlock()
	if !ok {
		return WorkerInfo{}, usererr.Errorf(ErrNotFound, "no such worker %q", id)
	}
	if err := b.workerEvent(ctx, projection.WorkerDrained, &projection.WorkerBody{Worker: id, By: by}); err != nil {
		return WorkerInfo{}, err
	}
	return b.Worker(id)
}

// workerEvent appends a worker event and folds it into the registry.
func (b *Broker) workerEvent(ctx context.Context, et fsm.EventType, body *projection.WorkerBody) error {
	data, err := projection.EncodeWorker(body)
	if err != nil {
		return err
	}
	now := b.opts.Now()
	if _, err := b.app.Append(ctx, projection.WorkersStream, eventlog.Any,
		eventlog.Event{Type: string(et), Time: now, Schema: projection.WorkerSchemaVersion, Body: data}); err != nil {
		return err
	}
	// The registry folds the stream in its order, with any other
	// daemon's worker events appended before this one.
	err = b.loadWorkers()
	b.notify()
	return err
}

// Worker returns one worker's state.
func (b *Broker) Worker(id string) (WorkerInfo, error) {
	for _, w := range b.Workers() {
		if w.ID == id {
			return w, nil
		}
	}
	return WorkerInfo{}, usererr.Errorf(ErrNotFound, "no such worker %q", id)
}

// Workers lists the registered workers with their active tasks and
// liveness, by id.
func (b *Broker) Workers() []WorkerInfo {
	now := b.opts.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]WorkerInfo, 0, len(b.workers))
	for id, w := range b.workers {
		seen, ok := b.seen[id]
		var ts []string
		for tid := range b.byWorker[id] {
			ts = append(ts, tid)
		}
		slices.Sort(ts)
		out = append(out, WorkerInfo{Worker: *w, ActiveTasks: ts, LastSeen: seen, Alive: ok && now.Sub(seen) <= b.opts.WorkerTTL})
	}
	slices.SortFunc(out, func(x, y WorkerInfo) int { return strings.Compare(x.ID, y.ID) })
	return out
}
