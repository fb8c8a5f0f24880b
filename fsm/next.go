package fsm

import (
	"fmt"
	"strings"
	"time"
)

// ActionKind says what kind of work is due for a task: what the loop that
// drives it (the agent, the broker) must do next. The loop switches on it
// and never on a machine's state names, so a new machine needs no new loop
// (etcd raft's Ready: the pure core hands out the work, the loop does it and
// appends the outcome).
//
// Not persisted: verify and the scripts print its name (String).
type ActionKind uint8

// The kinds of work a machine can say is due.
const (
	// ActNone: nothing is due, the task is finished (or not created).
	ActNone ActionKind = iota
	// ActStart: admit the task waiting in idle (append TASK_CREATED).
	ActStart
	// ActCallModel: call the model for Action.Stage and record the outcome.
	ActCallModel
	// ActRunStep: run plan step Action.Step (Action.StepType) and record its
	// outcome; a respond or generate step completes with an Action.Done
	// event, a sub_task step creates its child (then ActWaitTask).
	ActRunStep
	// ActCompile: compile the task's final result (append TASK_COMPLETED).
	ActCompile
	// ActReflect: post-task reflection may run, for learning only. It never
	// changes the task's outcome; the loop may skip it (and does not resume
	// it after a crash: its memory writes must not run twice).
	ActReflect
	// ActWaitInput: wait for an event from outside (a message, a resume).
	ActWaitInput
	// ActWaitTask: wait for the child task Action.Task to end, then record
	// its outcome as the end of step Action.Step: ACT_DONE for a sub_task
	// step (version 0), TOOL_CALL_COMPLETED or TOOL_CALL_FAILED for a
	// tool_call step whose call runs as a broker task (a worker tool,
	// Action.StepType is tool_call).
	ActWaitTask
	// ActWaitUntil: nothing to do before Action.At (a deadline, a retry's
	// not-before time); then the loop records Action.Done (see StepDone).
	// The machine says when; the loop's clock only wakes the task then.
	ActWaitUntil
	// ActAssign: hand the task to an eligible worker (the broker), not
	// before Action.At when it is set (a delayed task, a retry's backoff).
	ActAssign
	// ActWaitWorker: the worker Action.Task runs the task; its reports
	// answer. When the clock passes Action.At (the deadline) the broker
	// records Action.Done (a timeout).
	ActWaitWorker
	// ActRetry: the broker sends the failed or timed-out task back to the
	// queue (the machine decided that a retry is due).
	ActRetry
	// ActDeadLetter: the broker moves the task to the dead-letter queue (no
	// retry is left).
	ActDeadLetter
)

var actionNames = [...]string{
	ActNone: "none", ActStart: "start", ActCallModel: "call_model", ActRunStep: "run_step",
	ActCompile: "compile", ActReflect: "reflect", ActWaitInput: "wait_input", ActWaitTask: "wait_task",
	ActWaitUntil: "wait_until", ActAssign: "assign", ActWaitWorker: "wait_worker", ActRetry: "retry",
	ActDeadLetter: "dead_letter",
}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// NeedsSlot reports whether the work of k runs a stage for the task (it
// takes an admission slot): start, call the model, run a step, compile.
func (k ActionKind) NeedsSlot() bool {
	switch k {
	case ActStart, ActCallModel, ActRunStep, ActCompile:
		return true
	}
	return false
}

// Stage names the model call an ActCallModel is for. The agent builds the
// request and reads the reply by stage; the machine decides which is due.
type Stage string

// The model-call stages of the task machines.
const (
	StageReason   Stage = "reason"   // version 1: understand, think, choose tools; REASON_DONE or NEED_MORE_INFO
	StagePerceive Stage = "perceive" // version 0: read the input; PERCEIVE_DONE
	StageThink    Stage = "think"    // version 0: reason about it; THINK_DONE or NEED_MORE_INFO
	StagePlan     Stage = "plan"     // version 0: choose the steps; PLAN_DONE
	StageReflect  Stage = "reflect"  // version 0: judge the result; REFLECT_DONE with a verdict
)

// Action is the work due for a task, as data: what Next returns. It is a
// comparable value; two equal actions mean the same work is due.
type Action struct {
	Kind ActionKind
	// Stage is the model call due (ActCallModel).
	Stage Stage
	// Step is the plan step index (ActRunStep, ActWaitTask).
	Step int
	// StepType is the kind of that step (ActRunStep).
	StepType ActionType
	// Done is the event type that records the step's end (ActRunStep of a
	// respond or generate step; ActWaitTask): STEP_COMPLETED or ACT_DONE;
	// for ActWaitUntil, the event due at At. Build its body with StepDone.
	Done EventType
	// Task is the child task waited for (ActWaitTask).
	Task string
	// At is the time to wait for (ActWaitUntil), the deadline
	// (ActWaitWorker) or the not-before time (ActAssign).
	At time.Time
	// Started says the worker has reported its start (ActWaitWorker): its
	// reports are progress and the end; before, the start.
	Started bool
}

// Next returns the work due for t under the machine t was created with
// (ActNone for the zero task or an unknown machine). It is pure and cheap:
// the agent calls it after every folded event and verify for every event.
func Next(t *Task) Action {
	if t.State == StateNone {
		return Action{}
	}
	if t.Machine == (taskMachineV1{}).Ref() {
		// The common case, called directly: t does not escape through an
		// interface call, so a caller's task can stay on its stack.
		return taskMachineV1{}.Next(t)
	}
	m, err := MachineFor(t.Machine)
	if err != nil {
		return Action{}
	}
	c := *t // (the other machines get a copy: the same reason)
	return m.Next(&c)
}

// String renders a as one stable line: the kind, then what it names.
func (a Action) String() string {
	var b strings.Builder
	b.WriteString(a.Kind.String())
	switch a.Kind {
	case ActCallModel:
		fmt.Fprintf(&b, " stage=%s", a.Stage)
	case ActRunStep:
		fmt.Fprintf(&b, " step=%d type=%s", a.Step, a.StepType)
		if a.Done != "" {
			fmt.Fprintf(&b, " done=%s", a.Done)
		}
	case ActWaitTask:
		fmt.Fprintf(&b, " step=%d task=%s", a.Step, orDash(a.Task))
		if a.StepType != "" {
			fmt.Fprintf(&b, " type=%s", a.StepType)
		}
	case ActWaitUntil:
		fmt.Fprintf(&b, " at=%s", stamp(a.At))
	case ActAssign:
		if !a.At.IsZero() {
			fmt.Fprintf(&b, " at=%s", stamp(a.At))
		}
	case ActWaitWorker:
		fmt.Fprintf(&b, " worker=%s at=%s done=%s", orDash(a.Task), stamp(a.At), a.Done)
	}
	if ans := a.Answers(); len(ans) > 0 {
		s := make([]string, len(ans))
		for i, et := range ans {
			s[i] = string(et)
		}
		fmt.Fprintf(&b, " answers=%s", strings.Join(s, ","))
	}
	return b.String()
}

// The event types that answer each kind of work. A working stage may send
// interim messages (TASK_NOTIFY). Never modified.
var (
	answersStart    = []EventType{TaskCreated}
	answersReason   = []EventType{ModelCalled, ReasonDone, NeedMoreInfo, TaskNotify, BudgetExceeded}
	answersPerceive = []EventType{ModelCalled, PerceiveDone, TaskNotify, BudgetExceeded}
	answersThink    = []EventType{ModelCalled, ThinkDone, NeedMoreInfo, TaskNotify, BudgetExceeded}
	answersPlan     = []EventType{ModelCalled, PlanDone, TaskNotify, BudgetExceeded}
	answersReflect  = []EventType{ModelCalled, ReflectDone, TaskNotify, BudgetExceeded}
	answersTool     = []EventType{ToolCallStarted, TaskNotify, ToolCallCompleted, ToolCallFailed}
	answersStep     = []EventType{StepCompleted, TaskNotify}
	answersActDone  = []EventType{ActDone, TaskNotify}
	answersToolTask = []EventType{ToolCallCompleted, ToolCallFailed, TaskNotify}
	answersSubTask  = []EventType{SubTaskCreated, TaskNotify}
	answersCompile  = []EventType{TaskCompleted}
	answersPostRefl = []EventType{ModelCalled, ReflectionComplete}
	answersAssign   = []EventType{DispatchAssigned}
	answersAssigned = []EventType{DispatchStarted, DispatchTimedOut}
	answersWorker   = []EventType{DispatchProgress, DispatchCompleted, DispatchFailed, DispatchTimedOut}
	answersRetry    = []EventType{DispatchRetried}
	answersDLQ      = []EventType{DispatchDeadLettered}
)

// Answers lists the event types the loop appends to record the outcome of
// a, facts included (MODEL_CALLED, TOOL_CALL_STARTED, ...). Events a user
// or the outside world appends (inputs, MESSAGE_RECEIVED, TASK_SUSPENDED,
// TASK_RESUMED, TASK_FAILED) answer no action: see IsCommand. The slice is
// shared: do not modify it.
func (a Action) Answers() []EventType {
	switch a.Kind {
	case ActStart:
		return answersStart
	case ActCallModel:
		switch a.Stage {
		case StageReason:
			return answersReason
		case StagePerceive:
			return answersPerceive
		case StageThink:
			return answersThink
		case StagePlan:
			return answersPlan
		case StageReflect:
			return answersReflect
		}
	case ActRunStep:
		switch {
		case a.StepType == ActionToolCall:
			return answersTool
		case a.StepType == ActionSubTask:
			return answersSubTask
		case a.Done == ActDone:
			return answersActDone
		default:
			return answersStep
		}
	case ActWaitTask:
		if a.StepType == ActionToolCall {
			return answersToolTask
		}
		return answersActDone
	case ActCompile:
		return answersCompile
	case ActReflect:
		return answersPostRefl
	case ActAssign:
		return answersAssign
	case ActWaitWorker:
		if !a.Started {
			return answersAssigned
		}
		return answersWorker
	case ActRetry:
		return answersRetry
	case ActDeadLetter:
		return answersDLQ
	}
	return nil
}

// Answered reports whether an event of type et records the outcome of a.
func (a Action) Answered(et EventType) bool {
	for _, x := range a.Answers() {
		if x == et {
			return true
		}
	}
	return false
}

// IsCommand reports whether events of type et come from outside the loop
// (an input, a user's message, suspend, resume or cancel) rather than
// answering a due action. TASK_FAILED is one: a user may cancel any
// unfinished task, and the loop fails a task whatever was due.
func IsCommand(et EventType) bool {
	switch et {
	case MessageReceived, WebhookTriggered, ScheduleFired, TaskSuspended, TaskResumed, TaskFailed,
		DispatchRequeued, DispatchUpdated, DispatchCancelled:
		return true
	}
	return false
}

// StepDone returns the body of type a.Done that records the end of the
// work a is due for: a respond or generate step with its result text, a
// sub_task step with its child's outcome (failed: the child failed, and
// result is its error), a tool_call step waiting for its broker task with
// that task's outcome (TOOL_CALL_FAILED when failed; the caller adds the
// call's tool, key and source), or the event a machine names for the time an
// ActWaitUntil waits for (an empty body: the envelope's time says when).
// It returns nil when a names no event this package knows.
func StepDone(a Action, result string, failed bool) Body {
	switch a.Done {
	case ActDone:
		b := &ActDoneBody{StepIndex: a.Step, Result: result, SubTask: a.Task}
		if failed {
			b.Result, b.Error = "", result
		}
		return b
	case StepCompleted:
		return &StepCompletedBody{StepIndex: a.Step, Result: result}
	case ToolCallCompleted:
		b := &ToolCallResultBody{StepIndex: a.Step, Result: result, Task: a.Task}
		if failed {
			b.Result, b.Error = "", result
		}
		return b
	}
	b, _ := newBody(a.Done)
	return b
}
