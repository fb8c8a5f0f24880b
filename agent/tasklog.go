package agent

import (
	"context"
	"log/slog"

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
// times, not from the clock. The hook runs on the fold's goroutine, which
// every stage waits for: at info a task costs one line, not three (three
// lines took 7% of the daemon's CPU and most of the fold's time in
// pegasus-bench -tasks).
func (a *Agent) logLifecycle(ch *replay.Change) {
	ev, before, after := &ch.Event, &ch.Before, &ch.After
	log := a.opts.Logger
	switch {
	case before.Version == 0 && (ev.Type == fsm.MessageReceived || ev.Type == fsm.WebhookTriggered || ev.Type == fsm.ScheduleFired):
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug("task submitted", taskIDAttr(ev.Stream), eventIDAttr(ch.Raw.ID), "kind", string(ev.Type))
		}
	case ev.Type == fsm.TaskCreated:
		if !log.Enabled(context.Background(), slog.LevelDebug) {
			return
		}
		log.Debug("task admitted", taskIDAttr(after.ID), machineAttr(after), eventIDAttr(ch.Raw.ID),
			"type", after.Type, "source", after.Context.Source, "priority", after.Priority)
	case before.IsTerminal() || !after.IsTerminal():
		// Not the end of the task. (Loops never name a machine's states:
		// the end is the move into a terminal state, failed by TASK_FAILED.)
	case ev.Type != fsm.TaskFailed:
		log.Info("task completed", taskIDAttr(after.ID), machineAttr(after), eventIDAttr(ch.Raw.ID),
			"duration", ev.Time.Sub(after.CreatedAt), "iterations", after.Context.Iteration)
	default:
		reason := ""
		if b, ok := ev.Body.(*fsm.TaskFailedBody); ok {
			reason = b.Reason
		}
		log.Info("task failed", taskIDAttr(after.ID), machineAttr(after), eventIDAttr(ch.Raw.ID),
			"reason", reason, "error", after.Context.Error, "duration", ev.Time.Sub(after.CreatedAt))
	}
}

// logAttempt warns about one failed model call attempt, saying whether
// another follows.
func (a *Agent) logAttempt(t *fsm.Task, purpose string, att llm.Attempt) {
	if att.Err == nil {
		return
	}
	a.opts.Logger.Warn("model call attempt failed", taskIDAttr(t.ID), machineAttr(t),
		slog.String("purpose", purpose), slog.Int("attempt", att.Number), slog.Int("status", att.Status),
		slog.Bool("will_retry", att.WillRetry), slog.String("err", att.Err.Error()))
}
