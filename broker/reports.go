package broker

import (
	"github.com/pegasus-engine/pegasus/fsm"
)

// repeatedEarlier reports whether rep, of type kind, repeats the last
// report agent made on t, in an earlier attempt that is over: the same
// completion or failure sent again (a worker's HTTP retry) after the
// broker retried the task and while it waits in the queue, runs on
// another worker, or has ended. It is answered as the first was, not
// refused.
//
// A task waiting for this very agent's report is not asked: the agent was
// handed the task again and reports on the new attempt, and a worker that
// fails every attempt with the same error is common (without an attempt
// number in the request, the two cannot be told apart). A first attempt
// has nothing earlier to repeat, so the common path reads nothing;
// otherwise the task's stream is read (a broker task has few events).
func (b *Broker) repeatedEarlier(t *fsm.Task, kind fsm.EventType, rep *fsm.DispatchReportBody) bool {
	d := t.Dispatch
	if (kind != fsm.DispatchCompleted && kind != fsm.DispatchFailed) || d.RetryCount+d.Requeues == 0 {
		return false
	}
	if act := fsm.Next(t); act.Kind == fsm.ActWaitWorker && act.Task == rep.AgentID {
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
