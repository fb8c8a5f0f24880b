package broker

import "fmt"

// ReportError is a worker's report that the task cannot take: it is
// assigned to another worker or to none, or it is over. It unwraps to
// ErrNotAssigned; its fields say why, and UserMessage words them.
type ReportError struct {
	TaskID   string
	Agent    string // who reported
	State    string // the task's state, as the API shows it
	Assigned string // the worker the task is assigned to; "" for none
}

func (e *ReportError) Error() string { return ErrNotAssigned.Error() + ": " + e.UserMessage() }
func (e *ReportError) Unwrap() error { return ErrNotAssigned }

// UserMessage says, for the worker that reported, what stands in the way.
func (e *ReportError) UserMessage() string {
	switch e.Assigned {
	case e.Agent:
		return fmt.Sprintf("task %q is already %s: it takes no more reports", e.TaskID, e.State)
	case "":
		return fmt.Sprintf("task %q is %s and assigned to no worker: only the assigned worker reports", e.TaskID, e.State)
	}
	return fmt.Sprintf("task %q is assigned to %q, not to %q: only the assigned worker reports", e.TaskID, e.Assigned, e.Agent)
}
