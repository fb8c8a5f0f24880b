package agent

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// TestInputCarriesItsAdmission: with an admission slot free, a task's
// input and its TASK_CREATED are one commit, and that TASK_CREATED is the
// one admission writes for a task that waited (the same body, caused by
// and correlated to the input); with every slot taken, the input is
// committed alone and the task waits in idle for admission.
func TestInputCarriesItsAdmission(t *testing.T) {
	m := &blockingModel{calls: make(chan struct{}, 4), release: make(chan struct{})}
	h := newHarness(t, Options{Model: m, MaxActiveTasks: 1, DisableReflection: true})

	before := h.log.Stats().Commits
	first := h.submit("same input")
	if n := h.log.Stats().Commits - before; n != 1 {
		t.Fatalf("%d commits for the first input, want 1 (its admission with it)", n)
	}
	if got := types(h.events(first)); got != "MESSAGE_RECEIVED TASK_CREATED" {
		t.Fatalf("first task's events = %s", got)
	}
	if h.a.Queued(first) {
		t.Fatal("the first task is queued")
	}
	<-m.calls // its stage holds the slot

	before = h.log.Stats().Commits
	second := h.submit("same input")
	if n := h.log.Stats().Commits - before; n != 1 {
		t.Fatalf("%d commits for the second input, want 1", n)
	}
	if got := types(h.events(second)); got != "MESSAGE_RECEIVED" {
		t.Fatalf("second task's events = %s, want its input alone (no slot free)", got)
	}
	if task, err := h.a.Task(second); err != nil || task.State != fsm.StateIdle || !h.a.Queued(second) {
		t.Fatalf("second task: %s queued=%v (%v), want idle and queued", task.State, h.a.Queued(second), err)
	}
	close(m.release)
	h.wait(first)
	h.wait(second)

	created := func(id string) (in, tc eventlog.Event) {
		t.Helper()
		it := h.log.ReadStream(id, 0)
		defer it.Close()
		var evs []eventlog.Event
		for it.Next() && len(evs) < 2 {
			evs = append(evs, it.Event())
		}
		if len(evs) < 2 || evs[1].Type != string(fsm.TaskCreated) {
			t.Fatalf("task %s: no TASK_CREATED second", id)
		}
		return evs[0], evs[1]
	}
	in1, tc1 := created(first)
	in2, tc2 := created(second)
	if tc1.Seq != in1.Seq+1 {
		t.Fatalf("first task: TASK_CREATED at %d, input at %d", tc1.Seq, in1.Seq)
	}
	for _, p := range [][2]eventlog.Event{{in1, tc1}, {in2, tc2}} {
		if p[1].Causation != p[0].ID || p[1].Correlation != p[0].Correlation || p[0].Correlation != p[0].ID {
			t.Fatalf("TASK_CREATED %s: causation %s correlation %s, input %s", p[1].ID, p[1].Causation, p[1].Correlation, p[0].ID)
		}
	}
	if string(tc1.Body) != string(tc2.Body) || tc1.Schema != tc2.Schema {
		t.Fatalf("TASK_CREATED with the input differs from admission's:\n%q\n%q", tc1.Body, tc2.Body)
	}
	h.assertNoIssues()
	h.verify()
}

// admitFailAppender fails the first append of an input with its
// admission: refused (nothing stored), or stored with its
// acknowledgement lost (lost), as an Options.Appender may.
type admitFailAppender struct {
	countingAppender
	lost   bool
	failed atomic.Bool
}

func (f *admitFailAppender) Append(ctx context.Context, stream string, exp eventlog.ExpectedVersion, evs ...eventlog.Event) (eventlog.AppendResult, error) {
	if exp != eventlog.NoStream || len(evs) != 2 || !f.failed.CompareAndSwap(false, true) {
		return f.countingAppender.Append(ctx, stream, exp, evs...)
	}
	if f.lost {
		if _, err := f.countingAppender.Append(ctx, stream, exp, evs...); err != nil {
			return eventlog.AppendResult{}, err
		}
	}
	return eventlog.AppendResult{}, errNoLeader
}

// TestInputWithAdmissionFails: when the append of an input with its
// admission fails, the slot it took is not lost: refused, the task does
// not exist and the next one is admitted with its input; stored with its
// acknowledgement lost, the task still runs to its end, and so does the
// next. One slot, so a slot kept by mistake would leave the next task
// waiting for good.
func TestInputWithAdmissionFails(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(map[bool]string{false: "refused", true: "lost"}[lost], func(t *testing.T) {
			fs := vfs.NewMem()
			l := openLog(t, fs)
			app := &admitFailAppender{countingAppender: countingAppender{l: l}, lost: lost}
			a, err := New(l, Options{Appender: app, MaxActiveTasks: 1, DisableReflection: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx := testCtx(t)
			if err := a.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := a.Stop(ctx); err != nil {
					t.Error(err)
				}
				l.Close()
			}()
			in := ulid.Make()
			if _, err := a.SubmitInput(ctx, Input{Text: "hello", ID: in, Kind: fsm.MessageReceived}); err != nil {
				// A keyed input falls back to the input alone: an error
				// here would be the fallback failing.
				t.Fatal(err)
			}
			if !app.failed.Load() {
				t.Fatal("no append of an input with its admission was tried")
			}
			if task := mustWait(ctx, t, a, in.String()); task.State != fsm.StateCompleted {
				t.Fatalf("the keyed task is %s", task.State)
			}
			app.failed.Store(false)
			if _, err := a.Submit(ctx, "hello again", "test", ""); err == nil || !app.failed.Load() {
				t.Fatalf("the failed append was answered with %v", err)
			}
			runAll(ctx, t, a, "what time is it?")
			if lost {
				// The task whose acknowledgement was lost is in the log and runs.
				var id string
				it := l.Scan(1, eventlog.Forward)
				for it.Next() {
					if ev := it.Event(); ev.Type == string(fsm.MessageReceived) && ev.Stream != in.String() {
						if task, err := a.Task(ev.Stream); err == nil && task.Context.InputText == "hello again" {
							id = ev.Stream
						}
					}
				}
				it.Close()
				if id == "" {
					t.Fatal("the task whose acknowledgement was lost is not in the log")
				}
				if task := mustWait(ctx, t, a, id); task.State != fsm.StateCompleted {
					t.Fatalf("the task whose acknowledgement was lost is %s", task.State)
				}
			}
			if act, q := a.sched.counts(); act != 0 || q != 0 {
				t.Fatalf("%d slots held and %d waiting after every task ended", act, q)
			}
		})
	}
}

func mustWait(ctx context.Context, t *testing.T, a *Agent, id string) fsm.Task {
	t.Helper()
	task, err := a.WaitForTask(ctx, id)
	if err != nil {
		t.Fatalf("waiting for %s: %v", id, err)
	}
	return task
}

// TestBatchCarriesAdmissions: a batch's inputs take the admission slots
// free at submit, in order, each with its TASK_CREATED in the batch's one
// commit; the inputs after them wait, queued. A batch whose commit fails
// gives its slots back.
func TestBatchCarriesAdmissions(t *testing.T) {
	m := &blockingModel{calls: make(chan struct{}, 8), release: make(chan struct{})}
	fs := vfs.NewMem()
	l := openLog(t, fs)
	app := &batchFailAppender{countingAppender: countingAppender{l: l}}
	app.fail.Store(true)
	h := &harness{t: t, fs: fs, log: l, opts: Options{Model: m, MaxActiveTasks: 2, DisableReflection: true, Appender: app}}
	a, err := New(l, h.opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h.a = a
	t.Cleanup(h.stop)
	ins := []Input{{Text: "a"}, {Text: "b"}, {Text: "c"}}
	if _, err := a.SubmitInputs(ctx, ins); err == nil {
		t.Fatal("the failing commit was answered as a success")
	}
	if act, q := a.sched.counts(); act != 0 || q != 0 {
		t.Fatalf("after a failed batch: %d slots held, %d waiting", act, q)
	}
	before := l.Stats().Commits
	subs, err := a.SubmitInputs(ctx, ins)
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Stats().Commits - before; n != 1 {
		t.Fatalf("%d commits for the batch, want 1", n)
	}
	for i, want := range []string{"MESSAGE_RECEIVED TASK_CREATED", "MESSAGE_RECEIVED TASK_CREATED", "MESSAGE_RECEIVED"} {
		if got := types(h.events(subs[i].ID)); got != want {
			t.Fatalf("task %d: events %s, want %s", i, got, want)
		}
	}
	if !a.Queued(subs[2].ID) || a.Queued(subs[0].ID) {
		t.Fatal("the third task does not wait, or the first does")
	}
	close(m.release)
	for _, s := range subs {
		h.wait(s.ID)
	}
	h.assertNoIssues()
	h.verify()
}

// batchFailAppender refuses AppendMulti while fail is set, storing nothing.
type batchFailAppender struct {
	countingAppender
	fail atomic.Bool
}

func (f *batchFailAppender) AppendMulti(ctx context.Context, appends ...eventlog.StreamAppend) ([]eventlog.AppendResult, error) {
	if f.fail.CompareAndSwap(true, false) {
		return nil, errNoLeader
	}
	return f.countingAppender.AppendMulti(ctx, appends...)
}
