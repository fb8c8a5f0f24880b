package fsm

// taskMachineV1 is pegasus.task version 1, the six-state machine of the
// Pegasus task spec. Its legal edges:
//
//	idle      -(TASK_CREATED)->        reasoning
//	reasoning -(REASON_DONE)->         acting
//	reasoning -(NEED_MORE_INFO)->      suspended
//	reasoning -(TASK_SUSPENDED)->      suspended
//	reasoning -(TASK_FAILED)->         failed
//	acting    -(TOOL_CALL_COMPLETED)-> acting | reasoning          (tool_call step; see route)
//	acting    -(TOOL_CALL_FAILED)->    acting | reasoning          (tool_call step; see route)
//	acting    -(STEP_COMPLETED)->      acting | reasoning | completed (respond/generate step; see route)
//	acting    -(TASK_SUSPENDED)->      suspended
//	acting    -(TASK_FAILED)->         failed
//	suspended -(MESSAGE_RECEIVED)->    reasoning
//	suspended -(TASK_RESUMED)->        Context.SuspendedState (reasoning | acting)
//	suspended -(TASK_FAILED)->         failed
//
// Facts, which never move the state nor add to History:
//
//	acting:    TOOL_CALL_STARTED (current tool_call step), TASK_NOTIFY
//	reasoning: MODEL_CALLED, TASK_NOTIFY
//	completed: MODEL_CALLED, TASK_COMPLETED (once), REFLECTION_COMPLETE (once)
//	failed:    nothing
type taskMachineV1 struct{}

// The legal event types of each state, transitions first, then facts.
// Never modified.
var (
	legalNone      = []EventType{TaskCreated, MessageReceived, WebhookTriggered, ScheduleFired}
	legalIdle      = []EventType{TaskCreated, TaskFailed}
	legalReasoning = []EventType{ReasonDone, NeedMoreInfo, TaskSuspended, TaskFailed, ModelCalled, TaskNotify}
	legalActing    = []EventType{ToolCallCompleted, ToolCallFailed, StepCompleted, TaskSuspended, TaskFailed, ToolCallStarted, TaskNotify}
	legalSuspended = []EventType{MessageReceived, TaskResumed, TaskFailed}
	legalCompleted = []EventType{ModelCalled, TaskCompleted, ReflectionComplete}
)

func (taskMachineV1) Ref() MachineRef { return MachineRef{Name: MachineName, Version: 1} }

func legalV1(s State) []EventType {
	switch s {
	case StateNone:
		return legalNone
	case StateIdle:
		return legalIdle
	case StateReasoning:
		return legalReasoning
	case StateActing:
		return legalActing
	case StateSuspended:
		return legalSuspended
	case StateCompleted:
		return legalCompleted
	}
	return nil // failed, and anything that is not a state
}

func (taskMachineV1) Legal(s State) []EventType { return cloneSlice(legalV1(s)) }

func (taskMachineV1) CanTransition(s State, et EventType) bool {
	for _, l := range legalV1(s) {
		if l == et {
			return true
		}
	}
	return false
}

// Apply implements Machine.
func (m taskMachineV1) Apply(t Task, ev Event) (Task, error) {
	n := t
	if err := m.apply(&n, &ev); err != nil {
		return t, err
	}
	return n, nil
}

// apply folds ev into n in place. It checks, in order: the transition (else
// a *TransitionError), the envelope (version, stream), the body type, then
// what the body says; only then does it write to n. So on error n is
// unchanged, and a caller that passed a copy still holds the original.
func (m taskMachineV1) apply(n *Task, ev *Event) error {
	from := n.State
	if !m.CanTransition(from, ev.Type) {
		return &TransitionError{From: from, Event: ev.Type}
	}
	if ev.Version != n.Version+1 {
		return eventErr(from, ev.Type, "out of order: version %d, want %d", ev.Version, n.Version+1)
	}
	var err error
	switch {
	case from == StateNone && ev.Type == TaskCreated:
		err = m.create(n, ev)
	case from == StateNone:
		err = m.createIdle(n, ev)
	case ev.Stream != n.ID:
		err = eventErr(from, ev.Type, "stream %q is not task %q", ev.Stream, n.ID)
	case ev.Type == TaskCreated:
		err = m.start(n, ev)
	default:
		err = m.step(n, from, ev)
	}
	if err != nil {
		return err
	}
	n.UpdatedAt = ev.Time.UTC()
	n.Version = ev.Version
	n.Seq = ev.Seq
	n.LastEvent = ev.ID
	return nil
}

// createdBody returns ev's TASK_CREATED body after checking that it names
// this machine (or none) and that the stream names the task.
func (m taskMachineV1) createdBody(from State, ev *Event) (*TaskCreatedBody, error) {
	b, err := bodyAs[TaskCreatedBody](from, ev)
	if err != nil {
		return nil, err
	}
	if b.Machine != (MachineRef{}) && b.Machine != m.Ref() {
		e := eventErr(from, ev.Type, "machine %q version %d is not known", b.Machine.Name, b.Machine.Version)
		e.Err = ErrUnknownMachine
		return nil, e
	}
	if ev.Stream == "" {
		return nil, eventErr(from, ev.Type, "empty stream: the stream name is the task id")
	}
	return b, nil
}

// createIdle applies an external input to the zero task: the task exists,
// in idle, waiting for admission. This is not a transition and adds no
// History; TASK_CREATED starts the machine later.
func (m taskMachineV1) createIdle(n *Task, ev *Event) error {
	b, err := bodyAs[Input](StateNone, ev)
	if err != nil {
		return err
	}
	if ev.Stream == "" {
		return eventErr(StateNone, ev.Type, "empty stream: the stream name is the task id")
	}
	*n = Task{
		ID:        ev.Stream,
		Machine:   m.Ref(),
		Type:      b.TaskType,
		State:     StateIdle,
		CreatedAt: ev.Time.UTC(),
		Priority:  b.Priority,
		Context: Context{
			InputText:     b.Text,
			InputMetadata: b.Metadata,
			Source:        b.Source,
		},
	}
	return nil
}

// start applies TASK_CREATED to a task waiting in idle: idle -> reasoning.
// The body is authoritative for the task's input, type, priority and
// metadata (the agent copies them from the input); the creation time stays
// the input's.
func (m taskMachineV1) start(n *Task, ev *Event) error {
	b, err := m.createdBody(StateIdle, ev)
	if err != nil {
		return err
	}
	n.Type = b.TaskType
	n.Priority = b.Priority
	n.Metadata = b.Metadata
	n.Context.InputText = b.InputText
	n.Context.InputMetadata = b.InputMetadata
	n.Context.Source = b.Source
	n.Context.Iteration = 1
	moveTo(n, StateIdle, StateReasoning, ev)
	return nil
}

// create applies TASK_CREATED to the zero task: it creates the task and
// starts it, idle -> reasoning, in one event.
func (m taskMachineV1) create(n *Task, ev *Event) error {
	b, err := m.createdBody(StateNone, ev)
	if err != nil {
		return err
	}
	*n = Task{
		ID:        ev.Stream,
		Machine:   m.Ref(),
		Type:      b.TaskType,
		State:     StateReasoning,
		CreatedAt: ev.Time.UTC(),
		Priority:  b.Priority,
		Metadata:  b.Metadata,
		Context: Context{
			InputText:     b.InputText,
			InputMetadata: b.InputMetadata,
			Source:        b.Source,
			Iteration:     1,
		},
		History: []Transition{transition(StateIdle, StateReasoning, ev)},
	}
	return nil
}

// step applies every event but TASK_CREATED to n, whose state is from; the
// event type is legal in it. Each case checks the body fully before it
// writes to n: on error n is unchanged.
func (m taskMachineV1) step(n *Task, from State, ev *Event) error {
	switch ev.Type {
	case ReasonDone:
		b, err := bodyAs[ReasonDoneBody](from, ev)
		if err != nil {
			return err
		}
		if reason := checkPlan(&b.Plan); reason != "" {
			return eventErr(from, ev.Type, "%s", reason)
		}
		p := b.Plan
		p.Steps = append([]PlanStep(nil), p.Steps...) // the fold marks steps done, never in the event's body
		n.Context.Reasoning = &b.Reasoning
		n.Context.Plan = &p
		n.Context.PendingCall = nil
		n.Context.Messages = append(n.Context.Messages, b.NewMessages...)
		moveTo(n, from, StateActing, ev)
		return nil

	case NeedMoreInfo:
		b, err := bodyAs[NeedMoreInfoBody](from, ev)
		if err != nil {
			return err
		}
		n.Context.Reasoning = &b.Reasoning
		n.Context.Messages = append(n.Context.Messages, b.NewMessages...)
		n.Context.SuspendedState = StateReasoning
		n.Context.SuspendReason = b.Reasoning.Question
		if n.Context.SuspendReason == "" {
			n.Context.SuspendReason = b.Reasoning.Text
		}
		moveTo(n, from, StateSuspended, ev)
		return nil

	case MessageReceived:
		b, err := bodyAs[Input](from, ev)
		if err != nil {
			return err
		}
		n.Context.Messages = append(n.Context.Messages, Message{Role: "user", Content: b.Text})
		n.Context.SuspendedState = ""
		n.Context.SuspendReason = ""
		n.Context.PendingCall = nil // an unfinished plan is superseded by the next REASON_DONE
		n.Context.Iteration++
		moveTo(n, from, StateReasoning, ev)
		return nil

	case ToolCallCompleted, ToolCallFailed:
		b, err := bodyAs[ToolCallResultBody](from, ev)
		if err != nil {
			return err
		}
		step, err := currentStep(n, from, ev.Type, b.StepIndex, ActionToolCall)
		if err != nil {
			return err
		}
		tool := step.Tool()
		if b.Tool != "" && b.Tool != tool {
			return eventErr(from, ev.Type, "tool %q is not step %d's tool %q", b.Tool, step.Index, tool)
		}
		n.Context.ActionsDone = append(n.Context.ActionsDone, ActionResult{
			StepIndex:  step.Index,
			ActionType: ActionToolCall,
			Tool:       tool,
			Success:    ev.Type == ToolCallCompleted,
			Result:     b.Result,
			Error:      b.Error,
			DurationMS: b.DurationMS,
			EventID:    ev.ID,
		})
		n.Context.Messages = append(n.Context.Messages, b.NewMessages...)
		n.Context.PendingCall = nil
		m.finishStep(n, from, ev)
		return nil

	case StepCompleted:
		b, err := bodyAs[StepCompletedBody](from, ev)
		if err != nil {
			return err
		}
		step, err := currentStep(n, from, ev.Type, b.StepIndex, "")
		if err != nil {
			return err
		}
		n.Context.ActionsDone = append(n.Context.ActionsDone, ActionResult{
			StepIndex:  step.Index,
			ActionType: step.ActionType,
			Success:    true,
			Result:     b.Result,
			EventID:    ev.ID,
		})
		n.Context.Messages = append(n.Context.Messages, b.NewMessages...)
		m.finishStep(n, from, ev)
		return nil

	case TaskSuspended:
		b, err := bodyAs[TaskSuspendedBody](from, ev)
		if err != nil {
			return err
		}
		n.Context.SuspendedState = from
		n.Context.SuspendReason = b.Reason
		moveTo(n, from, StateSuspended, ev)
		return nil

	case TaskResumed:
		if _, err := bodyAs[TaskResumedBody](from, ev); err != nil {
			return err
		}
		to := n.Context.SuspendedState
		if !to.IsActive() {
			return eventErr(from, ev.Type, "no state to resume: suspended state is %q", to)
		}
		n.Context.SuspendedState = ""
		n.Context.SuspendReason = ""
		moveTo(n, from, to, ev)
		return nil

	case TaskFailed:
		b, err := bodyAs[TaskFailedBody](from, ev)
		if err != nil {
			return err
		}
		n.Context.Error = b.Error
		if n.Context.Error == "" {
			n.Context.Error = b.Reason
		}
		n.Context.SuspendedState = ""
		n.Context.SuspendReason = ""
		moveTo(n, from, StateFailed, ev)
		return nil

	// Facts.
	case ToolCallStarted:
		b, err := bodyAs[ToolCallStartedBody](from, ev)
		if err != nil {
			return err
		}
		step, err := currentStep(n, from, ev.Type, b.StepIndex, ActionToolCall)
		if err != nil {
			return err
		}
		if b.Tool != "" && b.Tool != step.Tool() {
			return eventErr(from, ev.Type, "tool %q is not step %d's tool %q", b.Tool, step.Index, step.Tool())
		}
		n.Context.PendingCall = b
		return nil

	case ModelCalled:
		if _, err := bodyAs[ModelCalledBody](from, ev); err != nil {
			return err
		}
		return nil

	case TaskNotify:
		if _, err := bodyAs[TaskNotifyBody](from, ev); err != nil {
			return err
		}
		return nil

	case TaskCompleted:
		b, err := bodyAs[TaskCompletedBody](from, ev)
		if err != nil {
			return err
		}
		if n.Context.ResultRecorded {
			return eventErr(from, ev.Type, "final result already recorded")
		}
		n.Context.FinalResult = b.Result
		n.Context.ResultRecorded = true
		return nil

	case ReflectionComplete:
		b, err := bodyAs[ReflectionCompleteBody](from, ev)
		if err != nil {
			return err
		}
		if n.Context.PostReflection != nil {
			return eventErr(from, ev.Type, "post-task reflection already recorded")
		}
		n.Context.PostReflection = &b.Reflection
		return nil
	}
	// Unreachable while legalV1 and this switch agree; a test checks they do.
	return eventErr(from, ev.Type, "no rule for this event")
}

// finishStep marks the current step of n's plan completed and routes:
//
//	more steps             -> acting (a self-transition, recorded in History)
//	all done, any tool_call -> reasoning (next iteration: the model sees the results)
//	all done, no tool_call  -> completed (respond and generate steps only)
//
// The plan is copied before the step is marked, so the task the caller
// passed to Apply keeps its own plan.
func (taskMachineV1) finishStep(n *Task, from State, ev *Event) {
	p := *n.Context.Plan
	p.Steps = append([]PlanStep(nil), p.Steps...)
	p.CurrentStep().Completed = true
	n.Context.Plan = &p
	switch {
	case p.HasMoreSteps():
		moveTo(n, from, StateActing, ev)
	case p.HasToolCall():
		n.Context.Iteration++
		moveTo(n, from, StateReasoning, ev)
	default:
		moveTo(n, from, StateCompleted, ev)
	}
}

// currentStep returns the current step of t's plan if it has index idx and,
// when kind is set, that action type; an empty kind means a respond or
// generate step.
func currentStep(t *Task, from State, et EventType, idx int, kind ActionType) (*PlanStep, error) {
	step := t.Context.Plan.CurrentStep()
	if step == nil {
		return nil, eventErr(from, et, "no current step: the plan is missing or done")
	}
	if idx != step.Index {
		return nil, eventErr(from, et, "step %d is not the current step %d", idx, step.Index)
	}
	switch {
	case kind == ActionToolCall && step.ActionType != ActionToolCall:
		return nil, eventErr(from, et, "step %d is a %s step, not a tool_call step", idx, step.ActionType)
	case kind == "" && step.ActionType != ActionRespond && step.ActionType != ActionGenerate:
		return nil, eventErr(from, et, "step %d is a %s step: only respond and generate steps complete with STEP_COMPLETED", idx, step.ActionType)
	}
	return step, nil
}

// checkPlan says what is wrong with a plan carried by REASON_DONE, or "".
func checkPlan(p *Plan) string {
	if len(p.Steps) == 0 {
		return "empty plan: a plan has at least one step"
	}
	for i, s := range p.Steps {
		switch {
		case s.Index != i:
			return sprintf("step %d has index %d: indices are 0..n-1 in order", i, s.Index)
		case s.Completed:
			return sprintf("step %d is already completed in a new plan", i)
		case !s.ActionType.Valid():
			return sprintf("step %d has unknown action type %q", i, s.ActionType)
		case s.ActionType == ActionToolCall && s.ActionParams["tool"] == "":
			return sprintf("tool_call step %d has no \"tool\" parameter", i)
		}
	}
	return ""
}

// moveTo records the transition from -> to and sets the state.
func moveTo(n *Task, from, to State, ev *Event) {
	n.State = to
	n.History = append(n.History, transition(from, to, ev))
}

func transition(from, to State, ev *Event) Transition {
	return Transition{From: from, To: to, Event: ev.Type, EventID: ev.ID, Timestamp: ev.Time.UTC()}
}

// bodyAs returns ev's body as a *T, refusing a missing body, a body of
// another type, and a body whose own event type disagrees with the envelope
// (a tool call result with an error under TOOL_CALL_COMPLETED, an input of
// another kind).
func bodyAs[T any, P interface {
	*T
	Body
}](from State, ev *Event) (P, error) {
	if ev.Body == nil {
		return nil, eventErr(from, ev.Type, "missing body")
	}
	b, ok := ev.Body.(P)
	if !ok {
		return nil, eventErr(from, ev.Type, "body is %T, want %T", ev.Body, P(nil))
	}
	if b == nil {
		return nil, eventErr(from, ev.Type, "missing body (nil %T)", b)
	}
	if bt := b.EventType(); bt != ev.Type {
		return nil, eventErr(from, ev.Type, "body is for %s", bt)
	}
	return b, nil
}
