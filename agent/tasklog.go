package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

// logLifecycle writes the lines an operator follows: at the default level
// one info line when a task ends, completed (with its duration) or failed
// (with its reason); at debug also one when it is submitted and one when
// it is admitted (TASK_CREATED). The hook calls it for every live event,
// so a task submitted through the API, a webhook or a schedule is logged
// alike, and recovery logs nothing twice. Durations come from the events'
// times, not from the clock.
//
// The hook runs on the fold's goroutine, which every stage waits for, so
// the lines are formatted and written on a goroutine of their own
// (lifecycleLines). Three lines per task written on the fold's goroutine
// took 7% of the daemon's CPU and half of the fold's time in
// pegasus-bench -tasks; one line at info, written beside it, leaves the
// fold alone.
func (a *Agent) logLifecycle(ch *replay.Change) {
	ev, before, after := &ch.Event, &ch.Before, &ch.After
	log := a.lines
	switch {
	case before.Version == 0 && (ev.Type == fsm.MessageReceived || ev.Type == fsm.WebhookTriggered || ev.Type == fsm.ScheduleFired):
		if r, ok := log.record(slog.LevelDebug, "task submitted"); ok {
			r.AddAttrs(taskIDAttr(ev.Stream), eventIDAttr(ch.Raw.ID), slog.String("kind", string(ev.Type)))
			log.send(r)
		}
	case ev.Type == fsm.TaskCreated:
		if r, ok := log.record(slog.LevelDebug, "task admitted"); ok {
			r.AddAttrs(taskIDAttr(after.ID), machineAttr(after), eventIDAttr(ch.Raw.ID),
				slog.String("type", after.Type), slog.String("source", after.Context.Source), slog.Int("priority", after.Priority))
			log.send(r)
		}
	case before.IsTerminal() || !after.IsTerminal():
		// Not the end of the task. (Loops never name a machine's states:
		// the end is the move into a terminal state, failed by TASK_FAILED.)
	case ev.Type != fsm.TaskFailed:
		if r, ok := log.record(slog.LevelInfo, "task completed"); ok {
			r.AddAttrs(taskIDAttr(after.ID), machineAttr(after), eventIDAttr(ch.Raw.ID),
				slog.Duration("duration", ev.Time.Sub(after.CreatedAt)), slog.Int("iterations", after.Context.Iteration))
			log.send(r)
		}
	default:
		reason := ""
		if b, ok := ev.Body.(*fsm.TaskFailedBody); ok {
			reason = b.Reason
		}
		if r, ok := log.record(slog.LevelInfo, "task failed"); ok {
			r.AddAttrs(taskIDAttr(after.ID), machineAttr(after), eventIDAttr(ch.Raw.ID),
				slog.String("reason", reason), slog.String("error", after.Context.Error), slog.Duration("duration", ev.Time.Sub(after.CreatedAt)))
			log.send(r)
		}
	}
}

// lifecycleLines hands log records to a goroutine that formats and writes
// them, in order. A full buffer makes the caller wait: no line is lost.
type lifecycleLines struct {
	h    slog.Handler
	ch   chan slog.Record
	done chan struct{}
}

func startLifecycleLines(h slog.Handler) *lifecycleLines {
	l := &lifecycleLines{h: h, ch: make(chan slog.Record, 4096), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for r := range l.ch {
			_ = l.h.Handle(context.Background(), r)
		}
	}()
	return l
}

// record returns a record of level with msg, and false when the level is
// not enabled: the caller adds its attributes (only then built) and sends
// it.
func (l *lifecycleLines) record(level slog.Level, msg string) (slog.Record, bool) {
	if !l.h.Enabled(context.Background(), level) {
		return slog.Record{}, false
	}
	return slog.NewRecord(time.Now(), level, msg, 0), true
}

// send hands r to the goroutine that writes it.
func (l *lifecycleLines) send(r slog.Record) { l.ch <- r }

// stop writes what is left and ends the goroutine. Nothing may log after.
func (l *lifecycleLines) stop() {
	close(l.ch)
	<-l.done
}

// logAttempt warns about one failed model call attempt, saying whether
// another follows.
func (a *Agent) logAttempt(t taskRef, purpose string, att llm.Attempt) {
	if att.Err == nil {
		return
	}
	a.opts.Logger.Warn("model call attempt failed", taskIDAttr(t.id), machineRefAttr(t.machine),
		slog.String("purpose", purpose), slog.Int("attempt", att.Number), slog.Int("status", att.Status),
		slog.Bool("will_retry", att.WillRetry), slog.String("err", att.Err.Error()))
}
