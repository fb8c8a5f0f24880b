package server

import (
	"fmt"

	"github.com/pegasus-engine/pegasus/fsm"
)

// conflictMessage says why a command was refused in the operator's terms:
// what the task is and what cannot be done to it, never the event type or
// the machine's vocabulary ("the task is already completed: it can no
// longer be cancelled").
func conflictMessage(te *fsm.TransitionError) string {
	action := "changed that way"
	switch te.Event {
	case fsm.TaskFailed:
		action = "cancelled"
	case fsm.TaskSuspended:
		action = "suspended"
	case fsm.TaskResumed:
		action = "resumed (only a suspended task resumes)"
	case fsm.MessageReceived:
		action = "answered (only a task that asked a question takes a reply)"
	}
	if te.From.IsTerminal() {
		return fmt.Sprintf("the task is already %s: it can no longer be %s", te.From, action)
	}
	return fmt.Sprintf("the task is %s: it cannot be %s now", te.From, action)
}
