package broker

import (
	"context"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/projection"
)

// afterAppender writes into a log, then calls after with the stream it
// wrote (on the writer's goroutine, before the write returns).
type afterAppender struct {
	*eventlog.Log
	after func(stream string)
}

func (a *afterAppender) Append(ctx context.Context, stream string, exp eventlog.ExpectedVersion, evs ...eventlog.Event) (eventlog.AppendResult, error) {
	res, err := a.Log.Append(ctx, stream, exp, evs...)
	if err == nil && a.after != nil {
		a.after(stream)
	}
	return res, err
}

// TestRegisterAnswersTheTasksItHeld: the loop follows the log and may
// assign a queued task to a worker as soon as its registration is folded,
// before the registering request reads the worker back. The answer lists
// the tasks the worker held when it registered, whichever ran first; the
// task assigned on registration comes with the worker's next poll.
func TestRegisterAnswersTheTasksItHeld(t *testing.T) {
	var app *afterAppender
	h := newHarnessWith(t, true, func(l *eventlog.Log) eventlog.Appender {
		app = &afterAppender{Log: l}
		return app
	})
	queued := h.create("queued", 1)
	h.settle() // no worker: it waits in pending
	polled := func() bool { return len(h.b.AgentTasks("w1")) == 1 }
	app.after = func(stream string) {
		if stream != projection.WorkersStream {
			return
		}
		// The loop assigns the task before Register goes on.
		ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
		defer cancel()
		if err := h.b.WaitAgent(ctx, "w1", polled); err != nil {
			t.Errorf("the loop never assigned the queued task: %v", err)
		}
	}
	h.b.Seen("w1") // the request's own sighting, as the API records it first
	w, err := h.b.Register(h.ctx, "w1", nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.ActiveTasks) != 0 {
		t.Errorf("registration answered active tasks %v; want the none it held", w.ActiveTasks)
	}
	if got := h.b.AgentTasks("w1"); len(got) != 1 || got[0].ID != queued.ID {
		t.Errorf("the next poll has %d tasks; want %s", len(got), queued.ID)
	}
}
