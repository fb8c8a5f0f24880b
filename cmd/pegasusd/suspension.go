package main

import (
	"encoding/json"
	"errors"
	"fmt"

	papi "github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

// A suspended task waits for one of two things, which the client must
// not confuse: an answer to the model's question (pegasusd reply), or an
// operator's resume after a suspend (pegasusd resume).
const (
	waitsForAnswer = "answer"
	waitsForResume = "resume"
)

// suspension says what the suspended task t waits for, from what its
// JSON carries: the event of the transition into suspended in its history
// (NEED_MORE_INFO: the model asked; TASK_SUSPENDED: an operator, whose
// reason is in question too), else the context's reasoning (a pending
// clarification question, or none). Without either, the task is taken as
// asking, as before: a reply then says what the daemon thinks.
func suspension(t *papi.Task) string {
	for i := len(t.History) - 1; i >= 0; i-- {
		if h := t.History[i]; h.To == string(fsm.StateSuspended) {
			switch fsm.EventType(h.Event) {
			case fsm.TaskSuspended:
				return waitsForResume
			case fsm.NeedMoreInfo:
				return waitsForAnswer
			}
			break
		}
	}
	var c struct {
		Reasoning *struct {
			NeedsClarification bool `json:"needs_clarification"`
		} `json:"reasoning"`
	}
	if len(t.Context) > 0 && json.Unmarshal(t.Context, &c) == nil && (c.Reasoning == nil || !c.Reasoning.NeedsClarification) {
		return waitsForResume
	}
	return waitsForAnswer
}

// suspendedError is what submit ends with on a task suspended by an
// operator: nobody can answer it, only resume it (exit 7).
func suspendedError(t *papi.Task) error {
	return cliconv.Kind(cliconv.ErrSuspended, errors.New(suspendedNote(t)))
}

// suspendedNote is the line task --follow prints on a task suspended by
// an operator; following goes on, as someone may resume it.
func suspendedNote(t *papi.Task) string {
	return fmt.Sprintf("task %s was suspended by an operator (reason: %s); resume it with: pegasusd resume %s", t.TaskID, orNone(t.Question), t.TaskID)
}

func orNone(s string) string {
	if s == "" {
		return "none given"
	}
	return s
}
