package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// countingAppender writes into a log and counts the events it wrote.
type countingAppender struct {
	l *eventlog.Log
	n atomic.Int64
}

func (c *countingAppender) Append(ctx context.Context, stream string, exp eventlog.ExpectedVersion, evs ...eventlog.Event) (eventlog.AppendResult, error) {
	res, err := c.l.Append(ctx, stream, exp, evs...)
	if err == nil {
		c.n.Add(int64(len(res.Events)))
	}
	return res, err
}

func (c *countingAppender) AppendMulti(ctx context.Context, appends ...eventlog.StreamAppend) ([]eventlog.AppendResult, error) {
	res, err := c.l.AppendMulti(ctx, appends...)
	for _, r := range res {
		c.n.Add(int64(len(r.Events)))
	}
	return res, err
}

// runAll submits inputs to a and waits until every task completed.
func runAll(ctx context.Context, t *testing.T, a *Agent, inputs ...string) {
	t.Helper()
	var ids []string
	for _, in := range inputs {
		id, err := a.Submit(ctx, in, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		if task, err := a.WaitForTask(ctx, id); err != nil || task.State != fsm.StateCompleted {
			t.Fatalf("task %s: %v %v", id, task.State, err)
		}
	}
}

// TestAppenderReceivesEveryWrite runs tasks (with tools, memory and
// reflection) through an agent given an Options.Appender: every event in
// the log, the system events included, came through it (what pegasusd
// --cluster relies on: a write past it would break the node's copy).
func TestAppenderReceivesEveryWrite(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs)
	app := &countingAppender{l: l}
	// One active task, so that tasks queue and a finishing stage hands
	// its slot over in its own commit (handoff.go).
	a, err := New(l, Options{Appender: app, MaxActiveTasks: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	runAll(ctx, t, a, "remember that the sky is blue", "what time is it?", "hello", "what time is it now?", "hi again")
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs)
	defer l.Close()
	if got, head := app.n.Load(), l.Head(); got != int64(head) || head < 10 {
		t.Fatalf("the appender wrote %d events, the log holds %d", got, head)
	}
}

// TestOwnsAndResumeOwned: a task the agent does not own (Options.Owns) is
// folded but not run, while an owned one submitted after it completes;
// once owned, ResumeOwned starts it as recovery would.
func TestOwnsAndResumeOwned(t *testing.T) {
	var all atomic.Bool
	var mine atomic.Value
	mine.Store("")
	h := newHarness(t, Options{Owns: func(id string) bool { return all.Load() || id == mine.Load().(string) }})
	ctx := testCtx(t)
	other := h.submit("hello")
	in := ulid.Make()
	mine.Store(in.String())
	id, err := h.a.SubmitInput(ctx, Input{Text: "what time is it?", Source: "test", ID: in})
	if err != nil {
		t.Fatal(err)
	}
	if task := h.wait(id); task.State != fsm.StateCompleted {
		t.Fatalf("the owned task is %s", task.State)
	}
	if task, err := h.a.Task(other); err != nil || task.State != fsm.StateIdle {
		t.Fatalf("the task not owned is %s (%v), want idle: it ran", task.State, err)
	}
	all.Store(true)
	if err := h.a.ResumeOwned(ctx, func(id string) bool { return id == other }); err != nil {
		t.Fatal(err)
	}
	if task := h.wait(other); task.State != fsm.StateCompleted {
		t.Fatalf("the resumed task is %s", task.State)
	}
}

// TestDisown: a task whose stage runs and one waiting for a slot stop
// being run once disowned: Disown returns when the running stage's step
// is done (its outcome recorded), no slot is held, nothing waits, and
// neither task moves on until it is owned and resumed again.
func TestDisown(t *testing.T) {
	m := &blockingModel{calls: make(chan struct{}, 8), release: make(chan struct{})}
	var owned atomic.Bool
	owned.Store(true)
	h := newHarness(t, Options{Model: m, MaxActiveTasks: 1, DisableReflection: true, Owns: func(string) bool { return owned.Load() }})
	ctx := testCtx(t)
	running := h.submit("first")
	<-m.calls
	waiting := h.submit("second")
	if !h.a.sched.queued(waiting) {
		t.Fatal("the second task does not wait for the slot")
	}
	owned.Store(false)
	done := make(chan error, 1)
	go func() { done <- h.a.Disown(ctx, func(string) bool { return true }) }()
	for h.a.sched.queued(waiting) { // Disown drops it at once
		if ctx.Err() != nil {
			t.Fatal("the waiting task was never dropped")
		}
		runtime.Gosched()
	}
	close(m.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if active, queued := h.a.sched.counts(); active != 0 || queued != 0 {
		t.Fatalf("after Disown %d slots are held and %d tasks wait", active, queued)
	}
	if w, _ := h.a.Task(waiting); w.State != fsm.StateIdle || len(m.calls) != 0 {
		t.Fatalf("the disowned waiting task moved on: %s, %d model calls", w.State, len(m.calls))
	}
	owned.Store(true)
	if err := h.a.ResumeOwned(ctx, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running, waiting} {
		if task := h.wait(id); task.State != fsm.StateCompleted {
			t.Fatalf("task %s is %s once owned again", id, task.State)
		}
	}
}

// flakyAppender fails the first appends at an expected version (the
// stages' outcomes) as a clustered log can: odd ones are written but
// their acknowledgement is lost, even ones are not written (no stream
// leader).
type flakyAppender struct {
	countingAppender
	mu      sync.Mutex
	fail    int
	written []ulid.ULID // the events whose acknowledgement was lost
}

var errNoLeader = errors.New("no stream leader (test)")

func (f *flakyAppender) Append(ctx context.Context, stream string, exp eventlog.ExpectedVersion, evs ...eventlog.Event) (eventlog.AppendResult, error) {
	f.mu.Lock()
	failing := exp != eventlog.Any && exp != eventlog.NoStream && f.fail > 0
	n := f.fail
	if failing {
		f.fail--
	}
	f.mu.Unlock()
	if !failing {
		return f.countingAppender.Append(ctx, stream, exp, evs...)
	}
	if n%2 == 0 {
		return eventlog.AppendResult{}, errNoLeader
	}
	res, err := f.countingAppender.Append(ctx, stream, exp, evs...)
	if err != nil {
		return res, err
	}
	f.mu.Lock()
	for _, ev := range res.Events {
		f.written = append(f.written, ev.ID)
	}
	f.mu.Unlock()
	return eventlog.AppendResult{}, fmt.Errorf("%w: acknowledgement lost (test)", context.DeadlineExceeded)
}

// TestStageOutcomeRetried: a stage's outcome whose append failed for a
// passing reason (not stored: no leader; or stored, its acknowledgement
// lost) is sent again with the same event ids until it is recorded, once:
// every task completes without a restart, and no event is in the log
// twice. Before, the outcome was dropped and the task waited, holding its
// slot, for the next start.
func TestStageOutcomeRetried(t *testing.T) {
	fs := vfs.NewMem()
	l := openLog(t, fs)
	app := &flakyAppender{countingAppender: countingAppender{l: l}, fail: 6}
	a, err := New(l, Options{Appender: app, MaxActiveTasks: 1, DisableReflection: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	runAll(ctx, t, a, "what time is it?", "hello", "remember that the door code is 42")
	app.mu.Lock()
	left, written := app.fail, app.written
	app.mu.Unlock()
	if left != 0 || len(written) == 0 {
		t.Fatalf("%d failures left, %d events written with a lost acknowledgement: the test failed nothing", left, len(written))
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs)
	defer l.Close()
	seen := map[string]int{}
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		seen[fmt.Sprintf("%s/%s/%x", ev.Stream, ev.Type, ev.Body)]++
	}
	for _, id := range written {
		ev, err := l.Get(id)
		if err != nil {
			t.Fatalf("an event written before its acknowledgement was lost is not in the log: %v", err)
		}
		if n := seen[fmt.Sprintf("%s/%s/%x", ev.Stream, ev.Type, ev.Body)]; n != 1 {
			t.Errorf("%s %s is in the log %d times", ev.Stream, ev.Type, n)
		}
	}
}
