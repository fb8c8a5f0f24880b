package replay

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/watermark"
	"github.com/pegasus-engine/pegasus/projection"
)

// View is the folded state of a log: every read model of package
// projection, safe for concurrent use. It changes only through Fold (and
// Follow, which is Fold over a live source); everything else reads.
//
// A View made by Open is backed by the log's aux key space: it loads the
// persisted projections at start, checkpoints as it folds, evicts terminal
// tasks from memory once persisted and serves them from there. A View made
// by NewView lives in memory only (a file, a what-if, a verify run).
type View struct {
	opts *Options

	mu     sync.RWMutex
	set    *projection.Set
	st     *store // nil: memory only
	write  bool   // checkpoints are written (st != nil and not read-only)
	since  int    // events folded since the last checkpoint began
	issues []Issue
	nIssue int
	// folded is the position WaitFor waits on: set.Seq(), moved forward
	// after every fold and once the recovery fold is done.
	folded watermark.Mark

	// Checkpoints (see checkpoint). ckSem holds one token: one checkpoint
	// at a time. The fields below are guarded by mu.
	ckSem     chan struct{}
	ckBusy    bool          // a background checkpoint is running
	ckDone    chan struct{} // closed when it ends
	ckErr     error         // its error, returned by the next step
	persisted uint64        // seq of the last checkpoint written
	overWarn  bool          // the over-budget warning was logged
	// ckLast is the Pending of the last checkpoint, emptied, whose
	// arrays the next one reuses (guarded by ckSem).
	ckLast projection.Pending

	folding atomic.Bool
	// hand holds the bodies handed over by Expect.
	hand handover
	// reload, in a View without a store, puts back a task the caller
	// evicted (verify); nil otherwise.
	reload func(set *projection.Set, id string) error
}

// Issue is an event the fold refused: an illegal transition, a malformed
// or undecodable body, an unknown event type on a task stream. The event
// stays in the log and changes nothing; verify reports it.
type Issue struct {
	Seq    uint64    `json:"seq"`
	ID     ulid.ULID `json:"id"`
	Stream string    `json:"stream"`
	Type   string    `json:"type"`
	Error  string    `json:"error"`
}

// NewView returns an empty View that folds in memory only.
func NewView(opts *Options) (*View, error) {
	o := opts.copy().EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &View{opts: o, set: projection.NewSet(o.setOptions(false)), ckSem: make(chan struct{}, 1)}, nil
}

// viewFrom wraps a Set restored for a per-task fold.
func viewFrom(o *Options, set *projection.Set) *View {
	v := &View{opts: o, set: set, ckSem: make(chan struct{}, 1)}
	v.folded.Advance(set.Seq())
	return v
}

// Seq returns the global sequence of the last event folded, 0 for none.
func (v *View) Seq() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.set.Seq()
}

// step folds one event into ch: decode, load an evicted task if the event
// needs it, apply through the Set, start a checkpoint if one is due. It is
// the body of Fold's loop and nothing else calls it. It writes the change
// in place (a Change is over a kilobyte: two tasks).
func (v *View) step(ctx context.Context, ev eventlog.Event, ch *Change, shared bool, bodies *fsm.Bodies) error {
	var fe fsm.Event
	var derr error
	if b := v.hand.take(&ev); b != nil {
		fe = envelope(&ev)
		fe.Body = b
	} else {
		fe, derr = decode(ev, shared, bodies)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.ckErr; err != nil {
		v.ckErr = nil
		return err
	}
	if v.set.NeedsTask(ev.Stream, ev.Version) {
		restore := v.reload // verify's fold, which evicts without a store
		if v.st != nil {
			restore = v.st.restoreTask
		}
		if restore != nil {
			if err := restore(v.set, ev.Stream); err != nil {
				return err
			}
		}
	}
	ch.Raw = ev
	if derr != nil {
		ch.Change = v.set.Refuse(fe, derr)
	} else {
		v.set.ApplyTo(&ch.Change, fe)
	}
	if ch.Err != nil {
		v.nIssue++
		if len(v.issues) < v.opts.MaxIssues {
			v.issues = append(v.issues, Issue{Seq: ev.Seq, ID: ev.ID, Stream: ev.Stream, Type: ev.Type, Error: ch.Err.Error()})
		}
	}
	v.since++
	v.folded.Advance(v.set.Seq())
	if v.write {
		return v.budgetLocked(ctx)
	}
	return nil
}

// budgetLocked starts a background checkpoint when one is due: every
// Options.CheckpointEvery events, or once the changes not yet persisted
// reach a sixteenth of Options.MemoryBudget. The fold goes on while it is
// written. Only when the View holds more than the whole budget while a
// checkpoint is running does the fold wait for it: that is the
// back-pressure that bounds memory when the disk is slower than the
// appends. Called with v.mu held; it may release it while waiting.
func (v *View) budgetLocked(ctx context.Context) error {
	budget := v.opts.MemoryBudget
	for {
		use := v.set.Bytes()
		if !v.ckBusy && (v.since >= v.opts.CheckpointEvery || use.Pending() >= v.opts.pendingCheckpoint()) {
			v.ckBusy, v.ckDone = true, make(chan struct{})
			go v.background()
		}
		if use.Total() <= budget {
			v.overWarn = false
			return nil
		}
		if v.coolLocked() > 0 {
			continue
		}
		if !v.ckBusy {
			if !v.overWarn {
				v.overWarn = true
				v.opts.Logger.Warn("memory budget exceeded by changes not yet written and long-term memory",
					"budget_bytes", budget, "tasks_bytes", use.Tasks, "memory_bytes", use.Memory,
					"active_tasks", v.set.Tasks().ActiveCount())
			}
			return nil
		}
		done := v.ckDone
		v.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		v.mu.Lock()
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := v.ckErr; err != nil {
			v.ckErr = nil
			return err
		}
	}
}

// coolLocked drops persisted tasks that are not finished from memory
// (projection.Set.Cool) when the View is over its budget, down to three
// quarters of it, and returns how many left. It does no I/O: they are read
// back from the store when one of their events is folded or they are
// queried.
func (v *View) coolLocked() int {
	use := v.set.Bytes()
	if use.Total() <= v.opts.MemoryBudget || use.Tasks-use.Dirty < v.opts.MemoryBudget/64 {
		return 0 // within budget, or too little could leave to be worth a scan per event
	}
	target := max(0, v.opts.MemoryBudget*3/4-use.Snapshots-use.Memory)
	ids := v.set.Cool(target)
	if len(ids) > 0 {
		v.opts.Logger.Debug("tasks left memory to stay within the budget", "tasks", len(ids),
			"bytes_held", v.set.Bytes().Total(), "budget_bytes", v.opts.MemoryBudget)
	}
	return len(ids)
}

// background runs one checkpoint started by the fold and records its end.
func (v *View) background() {
	err := v.checkpoint(context.Background())
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		v.ckErr = err
		v.opts.Logger.Error("background checkpoint failed", "err", err)
	}
	v.ckBusy = false
	close(v.ckDone)
}

// Checkpoint persists what changed since the last checkpoint, with the
// sequence it reflects, atomically and durably (see store.write), and
// evicts terminal tasks from memory. It waits for a checkpoint already
// running, and gives up when ctx ends: what it did not write is folded
// again at the next Open.
// It does nothing for a View that does not persist. The daemon calls it at
// stop, with the stop deadline; folds start one in the background every
// Options.CheckpointEvery events or as Options.MemoryBudget requires.
func (v *View) Checkpoint(ctx context.Context) error {
	return v.checkpoint(ctx)
}

// checkpoint writes one checkpoint. It holds v.mu only to take what
// changed (projection.Set.Pending: task values the fold never changes in
// place, and the encoded stats) and, once the write is durable, to tell the
// Set what was persisted (Flushed forgets the changes up to that sequence,
// keeps those folded meanwhile, and evicts terminal tasks). Encoding and
// the durable write run without it, so the fold, WaitFor and every reader
// go on meanwhile. The write holds the state at one sequence and is
// atomic, so a crash at any point leaves the previous checkpoint or this
// one.
func (v *View) checkpoint(ctx context.Context) error {
	select {
	case v.ckSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("replay: checkpoint: %w", ctx.Err())
	}
	defer func() { <-v.ckSem }()
	v.mu.Lock()
	if !v.write || (v.set.Seq() == v.persisted && v.set.Bytes().Pending() == 0) {
		v.mu.Unlock()
		return nil
	}
	p := &v.ckLast
	err := v.set.PendingReusing(p)
	v.since = 0
	identity := v.identity()
	v.mu.Unlock()
	if err == nil {
		err = v.st.write(ctx, p, identity)
	}
	seq, tasks, snapshots := p.Seq, len(p.Tasks), len(p.Snapshots)
	p.Reset() // written or not, none of it is needed any more
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		if errors.Is(err, eventlog.ErrReadOnly) {
			v.write = false
			return nil
		}
		return fmt.Errorf("replay: checkpoint at seq %d: %w", seq, err)
	}
	v.persisted = seq
	evicted := v.set.Flushed(seq)
	v.coolLocked()
	v.opts.Logger.Debug("projections checkpointed", "seq", seq, "tasks", tasks,
		"snapshots", snapshots, "evicted", len(evicted), "bytes_held", v.set.Bytes().Total())
	return nil
}

// MemoryUse returns the estimated memory the View holds (see
// projection.Set.Bytes): what Options.MemoryBudget bounds.
func (v *View) MemoryUse() projection.MemoryUse {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.set.Bytes()
}

func (v *View) identity() string { return projection.Identity(v.opts.setOptions(true)) }

// WaitFor blocks until the View has folded seq (read-your-writes after an
// append) or ctx ends.
func (v *View) WaitFor(ctx context.Context, seq uint64) error {
	return v.folded.Wait(ctx, seq)
}

// Follow folds the live log into v from v.Seq()+1 until ctx ends, calling
// hook after each event with the raw event and the task before and after
// it (hook may be nil). It is Fold over Live(l): the agent's tasks change
// only here. Follow returns ctx's error when cancelled, or the first error
// of the log, a checkpoint or hook. It does not checkpoint on return; the
// daemon calls Checkpoint at stop.
func (v *View) Follow(ctx context.Context, l *eventlog.Log, hook func(*Change) error) error {
	_, err := Fold(ctx, v, Live(l), FoldOptions{OnChange: hook})
	return err
}

// Issues returns the first Options.MaxIssues refused events and how many
// there were in all.
func (v *View) Issues() ([]Issue, int) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return append([]Issue(nil), v.issues...), v.nIssue
}

// Task returns a task by id: from memory, or from the persisted read model
// for a terminal task that left memory. It wraps
// projection.ErrTaskNotFound for an unknown id. The task shares memory
// with the View: read it, or Clone it to change it.
func (v *View) Task(id string) (fsm.Task, error) {
	v.mu.RLock()
	t, err := v.set.Tasks().Get(id)
	st := v.st
	v.mu.RUnlock()
	if err == nil || st == nil {
		return t, err
	}
	t, _, err = st.loadTask(id, false)
	return t, err
}

// Progress returns a task's progress view, from memory or the persisted
// read model.
func (v *View) Progress(id string) (projection.Progress, error) {
	v.mu.RLock()
	p, ok := v.set.Progress(id)
	st := v.st
	v.mu.RUnlock()
	if ok {
		return p, nil
	}
	if st == nil {
		return projection.Progress{}, fmt.Errorf("%w: %s", projection.ErrTaskNotFound, id)
	}
	_, pp, err := st.loadTask(id, true)
	if err != nil {
		return projection.Progress{}, err
	}
	if pp == nil {
		return projection.Progress{}, fmt.Errorf("%w: %s has no progress record", projection.ErrTaskNotFound, id)
	}
	return *pp, nil
}

// unfinishedStates are the states of the tasks Active lists: the agent's
// task machine's that are not terminal.
var unfinishedStates = []fsm.State{fsm.StateIdle, fsm.StateReasoning, fsm.StateActing, fsm.StateSuspended}

// Active returns the non-terminal tasks (idle, reasoning, acting,
// suspended) ordered by id, i.e. by creation.
func (v *View) Active() []fsm.Task {
	ts := v.InState(unfinishedStates...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID < ts[j].ID })
	return ts
}

// InState returns the tasks in any of the given non-terminal states,
// ordered by priority (lower first) then id (older first): the order in
// which the agent admits or resumes them. Terminal states are not held in
// memory; list them with Tasks.
//
// Tasks that left memory to stay within the budget are read back from the
// store, without the lock; one that cannot be read (an I/O error) is
// returned as its stub (id, state, priority, version, machine, creation
// time) and logged.
func (v *View) InState(states ...fsm.State) []fsm.Task {
	v.mu.RLock()
	ts := v.set.Tasks().ListState(states...)
	cold := v.set.Tasks().Cold(states...)
	st := v.st
	v.mu.RUnlock()
	for _, stub := range cold {
		t, err := stub, errors.New("no store")
		if st != nil {
			t, _, err = st.loadTask(stub.ID, false)
		}
		if err != nil {
			v.opts.Logger.Warn("reading a task that left memory", "task", stub.ID, "err", err)
			t = stub
		}
		ts = append(ts, t)
	}
	sortByPriority(ts)
	return ts
}

// EachInState calls fn for every task in any of the given non-terminal
// states, under the View's read lock, without copying the tasks or reading
// back those that left memory: for one of those, fn gets its stub, whose
// id, state, priority, version, machine and creation time are right and
// nothing else. fn must be quick, must not keep or change t, and must not
// call the View or anything that waits on it. It is what a count by state
// and machine costs: InState copies every task and reads the cold ones
// back from the store.
func (v *View) EachInState(fn func(t *fsm.Task), states ...fsm.State) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	v.set.Tasks().EachInState(fn, states...)
}

func sortByPriority(ts []fsm.Task) {
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].Priority != ts[j].Priority {
			return ts[i].Priority < ts[j].Priority
		}
		return ts[i].ID < ts[j].ID
	})
}

// ActiveCount returns the number of non-terminal tasks, and Count the
// number of tasks in one non-terminal state.
func (v *View) ActiveCount() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.set.Tasks().ActiveCount()
}

// Count returns how many tasks are in state s now (terminal states too:
// from the stats, which count every task).
func (v *View) Count(s fsm.State) int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if !s.IsTerminal() {
		return v.set.Tasks().Count(s)
	}
	return int(v.set.Stats().Report().ByState[s])
}

// Stats returns the stats projection.
func (v *View) Stats() projection.StatsReport {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.set.Stats().Report()
}

// Fact returns the long-term memory fact at path.
func (v *View) Fact(path string) (projection.Fact, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.set.Memory().Fact(path)
}

// Facts returns the memory facts whose path starts with prefix ("" for
// all), sorted by path.
func (v *View) Facts(prefix string) []projection.Fact {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.set.Memory().Facts(prefix)
}

// Episodes returns the episodic memory in the order recorded.
func (v *View) Episodes() []projection.Episode {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.set.Memory().Episodes()
}

// Recovery is what Open found and did: where it started, what it folded,
// and the tasks the agent must act on.
type Recovery struct {
	// Checkpoint is the sequence of the persisted projections loaded; 0
	// when they were rebuilt from zero.
	Checkpoint uint64
	// Rebuilt is set when the projections were folded from zero, and
	// Reason says why (none persisted, another code version, unreadable).
	Rebuilt bool
	Reason  string
	// Head is the sequence folded to; Folded the events folded to get
	// there; Refused how many of them the fold refused (View.Issues).
	Head    uint64
	Folded  int
	Refused int
	// InFlight are the tasks that were in an active state (reasoning or
	// acting; perceiving ... reflecting for version 0): the agent
	// resumes them. Suspended wait for a message or a resume; Idle (if the
	// agent uses it) wait for admission. Each is ordered by priority then
	// age.
	InFlight  []fsm.Task
	Suspended []fsm.Task
	Idle      []fsm.Task
	Duration  time.Duration
}

// Open is recovery: it loads the projections persisted in l (rebuilding
// them from zero if there are none, or they were written by another code
// version or options, or they are unreadable), folds the tail of the log
// up to its head, writes a checkpoint, and returns the View with the tasks
// to resume. The daemon then calls Follow; the CLI queries the View.
//
// With Options.ReadOnly (or a log opened read-only) nothing is written:
// usable persisted projections are read, otherwise everything is folded in
// memory.
func Open(ctx context.Context, l *eventlog.Log, opts *Options) (*View, *Recovery, error) {
	start := time.Now()
	o := opts.copy().EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	v := &View{opts: o, st: &store{log: l, ingest: o.ingestBytes, keep: o.pendingCheckpoint()}, write: !o.ReadOnly, ckSem: make(chan struct{}, 1)}
	rec := &Recovery{}
	set, reason, err := v.st.load(o.setOptions(true), v.identity(), l.Head(), o.MemoryBudget)
	if err != nil {
		return nil, nil, err
	}
	if set != nil {
		v.set = set
		rec.Checkpoint = set.Seq()
		v.persisted = set.Seq()
	} else {
		rec.Rebuilt, rec.Reason = true, reason
		v.set = projection.NewSet(o.setOptions(v.write))
		if v.write {
			if err := v.st.clear(ctx); errors.Is(err, eventlog.ErrReadOnly) {
				v.write = false
			} else if err != nil {
				return nil, nil, fmt.Errorf("replay: clearing stale projections: %w", err)
			}
		}
		if !v.write {
			// Stale persisted records must not be read back lazily.
			v.st = nil
			v.set = projection.NewSet(o.setOptions(false))
		}
		o.Logger.Info("rebuilding projections from zero", "reason", reason)
	}
	res, err := Fold(ctx, v, FromLog(l), FoldOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("replay: recovery fold from seq %d: %w", rec.Checkpoint+1, err)
	}
	v.folded.Advance(v.set.Seq()) // a checkpoint at the head folds nothing
	if err := v.Checkpoint(ctx); err != nil {
		return nil, nil, err
	}
	if v.st != nil {
		v.mu.Lock()
		v.coolLocked()
		v.mu.Unlock()
	}
	rec.Head, rec.Folded, rec.Refused = v.Seq(), res.Events, res.Refused
	rec.InFlight = v.InState(fsm.ActiveStates...)
	rec.Suspended = v.InState(fsm.StateSuspended)
	rec.Idle = v.InState(fsm.StateIdle)
	rec.Duration = time.Since(start)
	o.Logger.Info("projections recovered", "checkpoint", rec.Checkpoint, "head", rec.Head,
		"folded", rec.Folded, "refused", rec.Refused, "in_flight", len(rec.InFlight),
		"suspended", len(rec.Suspended), "duration", rec.Duration)
	return v, rec, nil
}
