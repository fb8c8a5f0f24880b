package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// recordingAppender writes into a log and keeps the ids it wrote.
type recordingAppender struct {
	l   *eventlog.Log
	mu  sync.Mutex
	ids map[ulid.ULID]bool
}

func (r *recordingAppender) note(res ...eventlog.AppendResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range res {
		for _, ev := range x.Events {
			r.ids[ev.ID] = true
		}
	}
}

func (r *recordingAppender) Append(ctx context.Context, stream string, exp eventlog.ExpectedVersion, evs ...eventlog.Event) (eventlog.AppendResult, error) {
	res, err := r.l.Append(ctx, stream, exp, evs...)
	r.note(res)
	return res, err
}

func (r *recordingAppender) AppendMulti(ctx context.Context, appends ...eventlog.StreamAppend) ([]eventlog.AppendResult, error) {
	res, err := r.l.AppendMulti(ctx, appends...)
	r.note(res...)
	return res, err
}

// TestAppenderReceivesEveryWrite: with Options.Appender, every event the
// broker writes (registration, creation, the loop's assignment, the
// reports, a timeout and its retry) goes through it (what pegasusd
// --cluster relies on).
func TestAppenderReceivesEveryWrite(t *testing.T) {
	var app *recordingAppender
	h := newHarnessWith(t, true, func(l *eventlog.Log) eventlog.Appender {
		app = &recordingAppender{l: l, ids: map[ulid.ULID]bool{}}
		return app
	})
	b, ctx, clk, l := h.b, h.ctx, h.clk, h.log
	h.register("w1", 2)
	done := h.create("done", 1)
	late := h.createBody(fsm.DispatchDefaults(fsm.DispatchCreatedBody{AgentID: "alice", Title: "late", TimeoutSeconds: 5,
		MaxRetries: fsm.DefaultMaxRetries, RetryEligible: true}))
	h.waitTask(done.ID, "assigned", assignedTo("w1"))
	h.waitTask(late.ID, "assigned", assignedTo("w1"))
	if _, _, err := b.Report(ctx, done.ID, "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{}`}); err != nil {
		t.Fatal(err)
	}
	h.settle()
	clk.Advance(10 * time.Second)
	h.waitTask(late.ID, "retried", func(t *fsm.Task) bool { return t.Dispatch.RetryCount > 0 })
	h.settle()
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	n := 0
	for it.Next() {
		n++
		if !app.ids[it.Event().ID] {
			t.Errorf("event %d (%s) was written past the appender", it.Event().Seq, it.Event().Type)
		}
	}
	if err := it.Err(); err != nil || n < 7 {
		t.Fatalf("%d events: %v", n, err)
	}
}

// failingAppender refuses every broker assignment while failing, as a
// clustered log can (no stream leader: nothing stored), and writes
// everything else into the log.
type failingAppender struct {
	l       *eventlog.Log
	failing atomic.Bool
}

var errUnavailable = errors.New("the stream cannot take the append now (test)")

func (f *failingAppender) fail(evs ...eventlog.Event) bool {
	return f.failing.Load() && evs[0].Type == string(fsm.DispatchAssigned)
}

func (f *failingAppender) Append(ctx context.Context, stream string, exp eventlog.ExpectedVersion, evs ...eventlog.Event) (eventlog.AppendResult, error) {
	if f.fail(evs...) {
		return eventlog.AppendResult{}, errUnavailable
	}
	return f.l.Append(ctx, stream, exp, evs...)
}

func (f *failingAppender) AppendMulti(ctx context.Context, appends ...eventlog.StreamAppend) ([]eventlog.AppendResult, error) {
	if f.fail(appends[0].Events...) {
		return nil, errUnavailable
	}
	return f.l.AppendMulti(ctx, appends...)
}

// TestDecisionRetriedSoon: a decision the log could not record (not a
// conflict: no event of the task will wake the loop) is taken again a
// second later, not at CheckInterval.
func TestDecisionRetriedSoon(t *testing.T) {
	app := &failingAppender{}
	app.failing.Store(true)
	h := newHarnessWith(t, true, func(l *eventlog.Log) eventlog.Appender { app.l = l; return app })
	h.register("w1", 1)
	task := h.create("job", 0)
	h.settle()
	if got, _ := h.b.Task(task.ID); got.State != fsm.StatePending {
		t.Fatalf("the refused assignment was recorded: %s", got.State)
	}
	app.failing.Store(false) // the stream is back; nothing else happens
	h.advance(decisionRetry)
	h.waitTask(task.ID, "assigned a second later", assignedTo("w1"))
}
