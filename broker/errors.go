package broker

import (
	"fmt"

	"github.com/pegasus-engine/pegasus/fsm"
)

// ReportError is a worker's report that the task cannot take: it is
// assigned to another worker or to none, or it is over. It unwraps to
// ErrNotAssigned; its fields say why, and UserMessage words them.
type ReportError struct {
	TaskID   string
	Agent    string        // who reported
	Kind     fsm.EventType // DISPATCH_PROGRESS, DISPATCH_COMPLETED or DISPATCH_FAILED
	State    fsm.State     // the task's state when the report came
	Assigned string        // the worker the task is assigned to; "" for none
}

func (e *ReportError) Error() string { return ErrNotAssigned.Error() + ": " + e.UserMessage() }
func (e *ReportError) Unwrap() error { return ErrNotAssigned }

// UserMessage says, for the worker that reported, what stands in the way.
func (e *ReportError) UserMessage() string {
	switch {
	case e.Assigned == e.Agent && e.State == fsm.StateCompleted && e.Kind == fsm.DispatchCompleted:
		return fmt.Sprintf("task %q is already completed with another result: a completion cannot change it", e.TaskID)
	case e.Assigned == e.Agent:
		return fmt.Sprintf("task %q is already %s: it takes no more reports", e.TaskID, e.State)
	case e.Assigned == "":
		return fmt.Sprintf("task %q is %s and assigned to no worker: only the assigned worker reports", e.TaskID, e.State)
	}
	return fmt.Sprintf("task %q is assigned to %q, not to %q: only the assigned worker reports", e.TaskID, e.Assigned, e.Agent)
}
