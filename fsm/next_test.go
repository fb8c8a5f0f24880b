package fsm

import (
	"fmt"
	"testing"
)

// TestNextIsLegalAndCurrent: in every state and plan shape of both
// machines, the work Next says is due is answered only by events legal
// there (never by a command), names the current step, and only the waits
// have no answer.
func TestNextIsLegalAndCurrent(t *testing.T) {
	for _, m := range Machines() {
		if m.Ref() == DispatchMachine {
			continue // its tasks carry no plan: TestDispatchNextIsLegal
		}
		for _, v := range variants(m) {
			task := v.build()
			act := Next(&task)
			checkAnswers(t, v.String(), m, &task, act)
			cur := task.Context.Plan.CurrentStep()
			switch act.Kind {
			case ActRunStep, ActWaitTask:
				if cur == nil || cur.Index != act.Step || task.State != StateActing {
					t.Errorf("%s: %s is not the current step", v, act)
				}
			case ActNone:
				if !task.State.IsTerminal() && task.State != StateNone && task.State != StateActing {
					t.Errorf("%s: nothing due in %s", v, task.State)
				}
			}
			if v.workerCall && task.State == StateActing && (act.Kind.NeedsSlot() || act.Kind != ActWaitTask || act.Task != "worker-1") {
				t.Errorf("%s: %s, want a wait for the worker task without a slot", v, act)
			}
			if act.Done != "" && !act.Answered(act.Done) {
				t.Errorf("%s: %s is not answered by its own Done", v, act)
			}
			if act.Kind == ActRunStep && act.StepType != ActionToolCall && act.StepType != ActionSubTask && StepDone(act, "", false) == nil {
				t.Errorf("%s: %s has no body for its end", v, act)
			}
		}
	}
}

// TestDispatchNextIsLegal: in every state, retry budget, eligibility and
// dead-letter flag of dispatch.task, the work Next says is due is answered
// only by events legal there (never by a command), something is due in
// every state that is not final, and only the waits have no answer.
func TestDispatchNextIsLegal(t *testing.T) {
	m := dispatchMachine{}
	for _, s := range DispatchStates {
		for _, budget := range [][2]int{{0, 3}, {2, 3}, {3, 3}, {0, 0}} {
			for _, el := range []bool{true, false} {
				for _, dl := range []bool{false, true} {
					v := dispatchVariant{state: s, retries: budget[0], max: budget[1], eligible: el, deadLettered: dl}
					task := v.build()
					act := Next(&task)
					checkAnswers(t, fmt.Sprintf("%+v", v), m, &task, act)
					if act.Kind == ActNone && !task.IsTerminal() {
						t.Errorf("%+v: nothing due in %s", v, task.State)
					}
				}
			}
		}
	}
}

// checkAnswers checks that act, the work Next says is due for task under m,
// is answered only by events legal in task's state, never by a command, and
// that it has no answer exactly when it is a wait. name says which case.
func checkAnswers(t *testing.T, name string, m Machine, task *Task, act Action) {
	t.Helper()
	for _, et := range act.Answers() {
		if !m.CanTransition(task.State, et) {
			t.Errorf("%s: %s is answered by %s, not legal in %s", name, act, et, task.State)
		}
		if IsCommand(et) {
			t.Errorf("%s: %s is answered by the command %s", name, act, et)
		}
	}
	waits := act.Kind == ActNone || act.Kind == ActWaitInput || act.Kind == ActWaitUntil
	if waits != (len(act.Answers()) == 0) {
		t.Errorf("%s: %s answered by %v", name, act, act.Answers())
	}
}
