package replay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Decision is one broker decision or worker report on a dispatch task,
// worded: what happened and why, from the events and the task as folded
// before and after them.
type Decision struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Type string    `json:"type"`
	// Text says it in words: "timed out because no progress since T;
	// retried (2 of 3); dead-lettered because retry_eligible=false".
	Text string `json:"text"`
}

// DispatchDecisions folds the stream of dispatch task id from r and words
// each event (see Decision). It returns nil for a task of another
// machine. An event the machine refuses ends the story with a line that
// says so (verify reports it).
func DispatchDecisions(ctx context.Context, r Reader, id string) ([]Decision, error) {
	it := r.Stream(ctx, id, 1)
	defer it.Close()
	var out []Decision
	var t fsm.Task
	for it.Next() {
		ev := it.Event()
		if ev.Version == 1 && ev.Type != string(fsm.DispatchCreated) {
			return nil, nil
		}
		fe, err := Decode(ev)
		d := Decision{Seq: ev.Seq, Time: ev.Time, Type: ev.Type}
		var after fsm.Task
		if err == nil {
			after, err = fsm.Apply(t, fe)
		}
		if err != nil {
			d.Text = "refused by the machine: " + err.Error()
			return append(out, d), nil
		}
		d.Text = wordDispatch(&t, &after, &fe)
		out = append(out, d)
		t = after
	}
	return out, it.Err()
}

// wordDispatch says what ev did to a dispatch task, before -> after.
func wordDispatch(before, after *fsm.Task, ev *fsm.Event) string {
	d, at := after.Dispatch, stampOf(ev.Time)
	switch b := ev.Body.(type) {
	case *fsm.DispatchCreatedBody:
		s := fmt.Sprintf("created by %s at %s: priority %d", b.AgentID, at, b.Priority)
		if len(b.RequiredCapabilities) > 0 {
			s += ", needs " + strings.Join(b.RequiredCapabilities, ", ")
		}
		s += fmt.Sprintf("; timeout %ds, up to %d retries, retry_eligible=%t", b.TimeoutSeconds, b.MaxRetries, b.RetryEligible)
		if b.HeartbeatSeconds > 0 {
			s += fmt.Sprintf(", heartbeat %ds", b.HeartbeatSeconds)
		}
		if !b.RunAt.IsZero() {
			s += "; not before " + stampOf(b.RunAt)
		}
		if b.ParentTaskID != "" {
			s += "; sub-task of " + b.ParentTaskID
		}
		return s
	case *fsm.DispatchAssignedBody:
		deadline, _ := fsm.DispatchDeadline(after)
		attempt := fmt.Sprintf("attempt %d", d.RetryCount+1)
		if d.Requeues > 0 {
			attempt += fmt.Sprintf(" since requeue %d", d.Requeues)
		}
		return fmt.Sprintf("assigned to %s at %s (score %.2f), %s; times out at %s without an outcome",
			b.Worker, at, b.Score, attempt, stampOf(deadline))
	case *fsm.DispatchReportBody:
		switch b.EventType() {
		case fsm.DispatchStarted:
			return withMessage(fmt.Sprintf("started by %s at %s", b.AgentID, at), b.Message)
		case fsm.DispatchProgress:
			return withMessage(fmt.Sprintf("progress from %s at %s", b.AgentID, at), b.Message)
		case fsm.DispatchCompleted:
			return fmt.Sprintf("completed by %s at %s", b.AgentID, at)
		case fsm.DispatchFailed:
			return fmt.Sprintf("failed by %s at %s: %q, retry_eligible=%t", b.AgentID, at, b.Error, d.RetryEligible)
		}
	case *fsm.DispatchTimedOutBody:
		return wordTimeout(before, d.TimeoutReason, at)
	case *fsm.DispatchRetriedBody:
		s := fmt.Sprintf("retried (%d of %d) at %s", d.RetryCount, d.MaxRetries, at)
		if !d.NotBefore.IsZero() {
			s += "; not assigned before " + stampOf(d.NotBefore)
		}
		return s
	case *fsm.DispatchDeadLetteredBody:
		switch b.Reason {
		case fsm.DeadLetterNotEligible:
			return fmt.Sprintf("dead-lettered at %s because retry_eligible=false", at)
		case fsm.DeadLetterExhausted:
			return fmt.Sprintf("dead-lettered at %s because its retries are exhausted (%d of %d)", at, d.RetryCount, d.MaxRetries)
		}
		return fmt.Sprintf("dead-lettered at %s (%s)", at, b.Reason)
	case *fsm.DispatchRequeuedBody:
		return withMessage(fmt.Sprintf("requeued from the dead-letter queue by %s at %s, retries reset", b.AgentID, at), b.Reason)
	case *fsm.DispatchUpdatedBody:
		return fmt.Sprintf("metadata updated by %s at %s", b.AgentID, at)
	}
	return fmt.Sprintf("%s at %s", ev.Type, at)
}

// wordTimeout says why the attempt of before timed out: its deadline
// (timeout_seconds after the start or the assignment) or its heartbeat (no
// report for heartbeat_seconds), with the last sign of life.
func wordTimeout(before *fsm.Task, why, at string) string {
	d := before.Dispatch
	last := d.AssignedAt
	if d.LastProgressAt.After(last) {
		last = d.LastProgressAt
	}
	deadline, _ := fsm.DispatchDeadline(before)
	if why == fsm.TimeoutHeartbeat {
		return fmt.Sprintf("timed out at %s because no progress since %s (heartbeat_seconds=%d, due %s)",
			at, stampOf(last), d.HeartbeatSeconds, stampOf(deadline))
	}
	from, what := d.AssignedAt, "assigned"
	if !d.StartedAt.IsZero() {
		from, what = d.StartedAt, "started"
	}
	return fmt.Sprintf("timed out at %s because no outcome %ds after it was %s at %s (last sign of life %s)",
		at, d.TimeoutSeconds, what, stampOf(from), stampOf(last))
}

func withMessage(s, msg string) string {
	if msg == "" {
		return s
	}
	return fmt.Sprintf("%s: %q", s, msg)
}

func stampOf(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
