package broker

import (
	"github.com/pegasus-engine/pegasus/fsm"
)

// repeatedEarlier reports whether rep, of type kind, repeats the last
// report agent made on t in an earlier attempt: the same completion or
// failure sent again after the broker retried the task (a worker's HTTP
// retry that arrives after the retry, or after the task was handed to it
// again). It is answered as the first was, not recorded as the outcome of
// the new attempt, nor refused.
//
// Only the agent's latest report counts: a worker that reported anything
// on the new attempt (its start, progress) is reporting on that attempt.
// A first attempt has nothing earlier to repeat, so the common path reads
// nothing; otherwise the task's stream is read (a broker task has few
// events).
func (b *Broker) repeatedEarlier(t *fsm.Task, kind fsm.EventType, rep *fsm.DispatchReportBody) bool {
	d := t.Dispatch
	if (kind != fsm.DispatchCompleted && kind != fsm.DispatchFailed) || d.RetryCount+d.Requeues == 0 {
		return false
	}
	if act := fsm.Next(t); act.Kind == fsm.ActWaitWorker && act.Task == rep.AgentID && act.Started {
		return false
	}
	var last *fsm.DispatchReportBody
	it := b.log.ReadStream(t.ID, 1)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		switch fsm.EventType(ev.Type) {
		case fsm.DispatchStarted, fsm.DispatchProgress, fsm.DispatchCompleted, fsm.DispatchFailed:
		default:
			continue
		}
		body, err := fsm.Decode(fsm.EventType(ev.Type), ev.Schema, ev.Body)
		if r, ok := body.(*fsm.DispatchReportBody); err == nil && ok && r.AgentID == rep.AgentID {
			last = r
		}
	}
	if it.Err() != nil || last == nil || last.EventType() != kind {
		return false
	}
	if kind == fsm.DispatchCompleted {
		return last.Result == rep.Result
	}
	sameFlag := (last.RetryEligible == nil) == (rep.RetryEligible == nil) &&
		(last.RetryEligible == nil || *last.RetryEligible == *rep.RetryEligible)
	return last.Error == rep.Error && sameFlag
}
