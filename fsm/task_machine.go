package fsm

import (
	"slices"
	"strings"
)

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
//	reasoning: MODEL_CALLED, TASK_NOTIFY, BUDGET_EXCEEDED
//	completed: MODEL_CALLED, TASK_COMPLETED (once), REFLECTION_COMPLETE (once)
//	failed:    nothing
type taskMachineV1 struct{}

// The legal event types of each state, transitions first, then facts.
// Never modified.
var (
	legalNone      = []EventType{TaskCreated, MessageReceived, WebhookTriggered, ScheduleFired}
	legalIdle      = []EventType{TaskCreated, TaskFailed}
	legalReasoning = []EventType{ReasonDone, NeedMoreInfo, TaskSuspended, TaskFailed, ModelCalled, TaskNotify, BudgetExceeded}
	legalActing    = []EventType{ToolCallCompleted, ToolCallFailed, StepCompleted, TaskSuspended, TaskFailed, ToolCallStarted, TaskNotify}
	legalSuspended = []EventType{MessageReceived, TaskResumed, TaskFailed}
	legalCompleted = []EventType{ModelCalled, TaskCompleted, ReflectionComplete}
)

func (taskMachineV1) Ref() MachineRef { return machineRef(1) }

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

func (taskMachineV1) States() []State { return cloneSlice(States) }

// Next implements Machine:
//
//	idle:      start
//	reasoning: call the model (reason)
//	acting:    run the current step (respond and generate steps end with STEP_COMPLETED);
//	           a tool_call step whose call runs as a broker task waits for that task
//	suspended: wait for input
//	completed: compile the result until TASK_COMPLETED, then reflect until REFLECTION_COMPLETE
//	failed:    nothing
func (taskMachineV1) Next(t *Task) Action {
	switch t.State {
	case StateIdle:
		return Action{Kind: ActStart}
	case StateReasoning:
		return Action{Kind: ActCallModel, Stage: StageReason}
	case StateActing:
		if a, ok := waitToolTask(t); ok {
			return a
		}
		return runStep(t, StepCompleted)
	case StateSuspended:
		return Action{Kind: ActWaitInput}
	case StateCompleted:
		switch {
		case !t.Context.ResultRecorded:
			return Action{Kind: ActCompile}
		case t.Context.PostReflection == nil:
			return Action{Kind: ActReflect}
		}
	}
	return Action{}
}

func (taskMachineV1) CanTransition(s State, et EventType) bool {
	return slices.Contains(legalV1(s), et)
}

// Apply implements Machine.
func (taskMachineV1) Apply(t Task, ev Event) (Task, error) { return applyCopy(1, t, ev) }

// applyCopy folds ev into a copy of t under machine version v: t is
// returned unchanged on error.
func applyCopy(v int, t Task, ev Event) (Task, error) {
	n := t
	if err := applyEvent(v, &n, &ev); err != nil {
		return t, err
	}
	return n, nil
}

// waitToolTask is the work due in acting while the current tool_call
// step's call runs as a broker task (a worker tool: its TOOL_CALL_STARTED
// names the task): wait for that task, then record its outcome as the
// step's TOOL_CALL_COMPLETED or TOOL_CALL_FAILED. The wait holds no
// admission slot (ActWaitTask does not NeedsSlot).
func waitToolTask(t *Task) (Action, bool) {
	s, pc := t.Context.Plan.CurrentStep(), t.Context.PendingCall
	if s == nil || pc == nil || pc.Task == "" || pc.StepIndex != s.Index || s.ActionType != ActionToolCall {
		return Action{}, false
	}
	return Action{Kind: ActWaitTask, Step: s.Index, StepType: ActionToolCall, Task: pc.Task, Done: ToolCallCompleted}, true
}

// runStep is the work due in acting: the current step, a respond or
// generate step ending with done (a tool call ends with its result, a
// sub_task step with its child: ActWaitTask); nothing if the plan is done
// (unreachable: the last step's end leaves acting).
func runStep(t *Task, done EventType) Action {
	s := t.Context.Plan.CurrentStep()
	if s == nil {
		return Action{}
	}
	a := Action{Kind: ActRunStep, Step: s.Index, StepType: s.ActionType}
	if s.ActionType == ActionRespond || s.ActionType == ActionGenerate {
		a.Done = done
	}
	return a
}

// The version-specific parts of the rules every version shares. They
// switch on the version instead of calling through an interface: Apply is
// the hot path of every fold, and an interface call would move the task
// and the event to the heap.

// machineRef names pegasus.task version v.
func machineRef(v int) MachineRef { return MachineRef{Name: MachineName, Version: v} }

// firstState is where TASK_CREATED takes a task of version v.
func firstState(v int) State {
	if v == 0 {
		return StatePerceiving
	}
	return StateReasoning
}

func canTransition(v int, s State, et EventType) bool {
	if v == 0 {
		return slices.Contains(legalV0(s), et)
	}
	return slices.Contains(legalV1(s), et)
}

// step applies every event but the creating ones under version v; its
// type is legal in from. On error n is unchanged.
func step(v int, n *Task, from State, ev *Event) error {
	if v == 0 {
		return taskMachineV0{}.step(n, from, ev)
	}
	return taskMachineV1{}.step(n, from, ev)
}

// applyEvent folds ev into n in place. It checks, in order: the transition
// (else a *TransitionError), the envelope (version, stream), the body type,
// then what the body says; only then does it write to n. So on error n is
// unchanged, and a caller that passed a copy still holds the original.
func applyEvent(v int, n *Task, ev *Event) error {
	from := n.State
	if !canTransition(v, from, ev.Type) {
		return &TransitionError{From: from, Event: ev.Type}
	}
	if ev.Version != n.Version+1 {
		return eventErr(from, ev.Type, "out of order: version %d, want %d", ev.Version, n.Version+1)
	}
	var err error
	switch {
	case from == StateNone && ev.Type == TaskCreated:
		err = create(v, n, ev)
	case from == StateNone:
		err = createIdle(v, n, ev)
	case ev.Stream != n.ID:
		err = eventErr(from, ev.Type, "stream %q is not task %q", ev.Stream, n.ID)
	case ev.Type == TaskCreated:
		err = start(v, n, ev)
	default:
		err = step(v, n, from, ev)
	}
	if err != nil {
		return err
	}
	applied(n, ev)
	return nil
}

// applied records in n the envelope of ev, which every machine just
// applied to it.
func applied(n *Task, ev *Event) {
	n.UpdatedAt = ev.Time.UTC()
	n.Version = ev.Version
	n.Seq = ev.Seq
	n.LastEvent = ev.ID
}

// createdBody returns ev's TASK_CREATED body after checking that it names
// m and that the stream names the task. No machine means the current one
// for a new task, and the task's own for one waiting in idle (its input
// chose it).
func createdBody(v int, from State, ev *Event) (*TaskCreatedBody, error) {
	b, err := bodyAs[TaskCreatedBody](from, ev)
	if err != nil {
		return nil, err
	}
	ref := b.Machine
	if ref == (MachineRef{}) && from == StateIdle {
		ref = machineRef(v)
	}
	if err := checkMachine(v, from, ev, ref); err != nil {
		return nil, err
	}
	if ev.Stream == "" {
		return nil, eventErr(from, ev.Type, "empty stream: the stream name is the task id")
	}
	return b, nil
}

// checkMachine refuses a creating event that names a machine other than m
// (the empty ref means CurrentMachine).
func checkMachine(v int, from State, ev *Event, ref MachineRef) error {
	if ref == (MachineRef{}) {
		ref = CurrentMachine
	}
	if ref != machineRef(v) {
		if _, err := MachineFor(ref); err == nil {
			return eventErr(from, ev.Type, "machine %s is not the task's machine %s: a task keeps its machine for life", ref, machineRef(v))
		}
		e := eventErr(from, ev.Type, "machine %q version %d is not known", ref.Name, ref.Version)
		e.Err = ErrUnknownMachine
		return e
	}
	return nil
}

// createIdle applies an external input to the zero task: the task exists,
// in idle, waiting for admission. This is not a transition and adds no
// History; TASK_CREATED starts the machine later.
func createIdle(v int, n *Task, ev *Event) error {
	b, err := bodyAs[Input](StateNone, ev)
	if err != nil {
		return err
	}
	var ref MachineRef
	if b.Machine != nil {
		ref = *b.Machine
	}
	if err := checkMachine(v, StateNone, ev, ref); err != nil {
		return err
	}
	if ev.Stream == "" {
		return eventErr(StateNone, ev.Type, "empty stream: the stream name is the task id")
	}
	*n = Task{
		ID:        ev.Stream,
		Machine:   machineRef(v),
		Type:      b.TaskType,
		State:     StateIdle,
		CreatedAt: ev.Time.UTC(),
		Priority:  b.Priority,
		ParentID:  b.ParentTaskID,
		// The key of a task is its input's: admission reads it while the
		// task waits in idle.
		ConcurrencyKey: b.ConcurrencyKey,
		Context: Context{
			InputText:     b.Text,
			InputMetadata: b.Metadata,
			Source:        b.Source,
		},
	}
	return nil
}

// start applies TASK_CREATED to a task waiting in idle: idle -> the
// machine's first state. The body is authoritative for the task's input,
// type, priority, metadata and parent (the agent copies them from the
// input); the creation time stays the input's.
func start(v int, n *Task, ev *Event) error {
	b, err := createdBody(v, StateIdle, ev)
	if err != nil {
		return err
	}
	n.Type = b.TaskType
	n.Priority = b.Priority
	n.Metadata = b.Metadata
	n.ParentID = b.ParentTaskID
	n.ConcurrencyKey = b.ConcurrencyKey
	n.Context.InputText = b.InputText
	n.Context.InputMetadata = b.InputMetadata
	n.Context.Source = b.Source
	n.Context.Iteration = 1
	if n.History == nil {
		n.History = make([]Transition, 0, historyCap) // as create does
	}
	moveTo(n, StateIdle, firstState(v), ev)
	return nil
}

// create applies TASK_CREATED to the zero task: it creates the task and
// starts it, idle -> the machine's first state, in one event.
func create(v int, n *Task, ev *Event) error {
	b, err := createdBody(v, StateNone, ev)
	if err != nil {
		return err
	}
	first := firstState(v)
	*n = Task{
		ID:             ev.Stream,
		Machine:        machineRef(v),
		Type:           b.TaskType,
		State:          first,
		CreatedAt:      ev.Time.UTC(),
		Priority:       b.Priority,
		Metadata:       b.Metadata,
		ParentID:       b.ParentTaskID,
		ConcurrencyKey: b.ConcurrencyKey,
		Context: Context{
			InputText:     b.InputText,
			InputMetadata: b.InputMetadata,
			Source:        b.Source,
			Iteration:     1,
		},
		// Room for a typical task's transitions up front: a fold grows
		// every task's History one event at a time.
		History: append(make([]Transition, 0, historyCap), transition(StateIdle, first, ev)),
	}
	return nil
}

// historyCap is the History capacity of a new task: room for a task whose
// model asks for tools in one or two turns, then answers (5 to 7
// transitions); a longer one grows it.
const historyCap = 8

// step applies every event but TASK_CREATED to n, whose state is from; the
// event type is legal in it. Each case checks the body fully before it
// writes to n: on error n is unchanged.
func (taskMachineV1) step(n *Task, from State, ev *Event) error {
	switch ev.Type {
	case ReasonDone:
		b, err := bodyAs[ReasonDoneBody](from, ev)
		if err != nil {
			return err
		}
		if reason := checkPlan(&b.Plan, stepKindsV1); reason != "" {
			return eventErr(from, ev.Type, "%s", reason)
		}
		setPlan(n, &b.Plan)
		n.Context.Reasoning = &b.Reasoning
		appendMessages(n, b.NewMessages, messagesDue(&b.Plan))
		moveTo(n, from, StateActing, ev)
		return nil

	case StepCompleted:
		b, err := bodyAs[StepCompletedBody](from, ev)
		if err != nil {
			return err
		}
		step, err := currentStep(n, from, ev.Type, b.StepIndex, ActionRespond, ActionGenerate)
		if err != nil {
			return err
		}
		recordResult(n, ActionResult{
			StepIndex:  step.Index,
			ActionType: step.ActionType,
			Success:    true,
			Result:     b.Result,
			EventID:    ev.ID,
		}, b.NewMessages)
		finishStep(1, n, from, ev)
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
	return sharedStep(1, n, from, ev)
}

// setPlan installs a new plan, and no call or child pending. The task
// shares the plan with the event's body: markStepDone marks a step on a
// copy, so the body is never changed.
func setPlan(n *Task, p *Plan) {
	n.Context.Plan = p
	n.Context.PendingCall = nil
	n.Context.PendingSubTask = nil
}

// sharedStep applies, under version v, the events whose rules every
// version shares: NEED_MORE_INFO (suspends, to come back to from),
// MESSAGE_RECEIVED (to reasoning in v1, thinking in v0), the tool call
// results (recorded, then routed by the version's rule), suspend, resume,
// fail and the facts TOOL_CALL_STARTED, MODEL_CALLED, TASK_NOTIFY and
// TASK_COMPLETED.
func sharedStep(v int, n *Task, from State, ev *Event) error {
	switch ev.Type {
	case NeedMoreInfo:
		b, err := bodyAs[NeedMoreInfoBody](from, ev)
		if err != nil {
			return err
		}
		n.Context.Reasoning = &b.Reasoning
		n.Context.Messages = append(n.Context.Messages, b.NewMessages...)
		n.Context.SuspendedState = from
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
		n.Context.PendingCall = nil // an unfinished plan is superseded by the next one
		n.Context.PendingSubTask = nil
		n.Context.Iteration++
		to := StateReasoning
		if v == 0 {
			to = StateThinking
		}
		moveTo(n, from, to, ev)
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
		recordResult(n, ActionResult{
			StepIndex:  step.Index,
			ActionType: ActionToolCall,
			Tool:       tool,
			Success:    ev.Type == ToolCallCompleted,
			Result:     b.Result,
			Error:      b.Error,
			DurationMS: b.DurationMS,
			EventID:    ev.ID,
		}, b.NewMessages)
		n.Context.PendingCall = nil
		finishStep(v, n, from, ev)
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
		if step, ok := laterToolStep(n, b.StepIndex); ok {
			// A call the model asked for in the same turn, started ahead of
			// its turn to run beside the current step's: a fact that moves
			// nothing; the step's result still comes in plan order.
			if b.Tool != "" && b.Tool != step.Tool() {
				return eventErr(from, ev.Type, "tool %q is not step %d's tool %q", b.Tool, step.Index, step.Tool())
			}
			return nil
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
		_, err := bodyAs[ModelCalledBody](from, ev)
		return err

	case BudgetExceeded:
		b, err := bodyAs[BudgetExceededBody](from, ev)
		if err != nil {
			return err
		}
		if b.Policy != BudgetSuspend && b.Policy != BudgetFail {
			return eventErr(from, ev.Type, "policy %q: want suspend or fail", b.Policy)
		}
		return nil

	case TaskNotify:
		_, err := bodyAs[TaskNotifyBody](from, ev)
		return err

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
	}
	// Unreachable while each machine's legal lists and its step agree; a
	// test checks they do.
	return eventErr(from, ev.Type, "no rule for this event")
}

// finishStep marks the current step of n's plan completed (a tool_call
// step under either version, any step under v1) and routes:
//
//	more steps                  -> acting (a self-transition, recorded in History)
//	all done, v0                -> reflecting
//	all done, v1, any tool_call -> reasoning (next iteration: the model sees the results)
//	all done, v1, no tool_call  -> completed (respond and generate steps only)
//
// The plan is copied before the step is marked, so the task the caller
// passed to Apply keeps its own plan.
func finishStep(v int, n *Task, from State, ev *Event) {
	markStepDone(n)
	p := n.Context.Plan
	switch {
	case p.HasMoreSteps():
		moveTo(n, from, StateActing, ev)
	case v == 0:
		moveTo(n, from, StateReflecting, ev)
	case p.HasToolCall():
		n.Context.Iteration++
		moveTo(n, from, StateReasoning, ev)
	default:
		moveTo(n, from, StateCompleted, ev)
	}
}

// appendMessages appends msgs to n's messages. When that takes a new
// array, the array has room for more messages too: a plan's steps bring a
// message each with their results, which a fold would otherwise append by
// growing the array again and again.
//
// more is messagesDue's count for the new plan.
func appendMessages(n *Task, msgs []Message, more int) {
	m := n.Context.Messages
	if len(m)+len(msgs) > cap(m) {
		m = slices.Grow(m, len(msgs)+more)
	}
	n.Context.Messages = append(m, msgs...)
}

// messagesDue is how many messages a task is expected to gain after the
// plan p is installed, before it completes or asks the model again: one
// per step (each result brings one), and the model's next reply when p
// has a tool call (the task goes back to reasoning once the calls end).
func messagesDue(p *Plan) int {
	if p.HasToolCall() {
		return len(p.Steps) + 1
	}
	return len(p.Steps)
}

// recordResult records the outcome of the current step and the messages
// it brought.
func recordResult(n *Task, r ActionResult, msgs []Message) {
	if n.Context.ActionsDone == nil {
		n.Context.ActionsDone = make([]ActionResult, 0, 4) // most plans have a few steps
	}
	n.Context.ActionsDone = append(n.Context.ActionsDone, r)
	n.Context.Messages = append(n.Context.Messages, msgs...)
}

// laterToolStep returns step idx of t's plan when it is a tool_call step
// after the current one, with only tool_call steps between them: a call
// of the same model turn that may start while the current step's runs.
func laterToolStep(t *Task, idx int) (*PlanStep, bool) {
	cur := t.Context.Plan.CurrentStep()
	if cur == nil || idx <= cur.Index || idx >= len(t.Context.Plan.Steps) {
		return nil, false
	}
	for i := cur.Index; i <= idx; i++ {
		if s := &t.Context.Plan.Steps[i]; s.ActionType != ActionToolCall || s.Completed {
			return nil, false
		}
	}
	return &t.Context.Plan.Steps[idx], true
}

// currentStep returns the current step of t's plan if it has index idx and
// one of the given action types.
func currentStep(t *Task, from State, et EventType, idx int, kinds ...ActionType) (*PlanStep, error) {
	step := t.Context.Plan.CurrentStep()
	if step == nil {
		return nil, eventErr(from, et, "no current step: the plan is missing or done")
	}
	if idx != step.Index {
		return nil, eventErr(from, et, "step %d is not the current step %d", idx, step.Index)
	}
	for _, k := range kinds {
		if step.ActionType == k {
			return step, nil
		}
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return nil, eventErr(from, et, "step %d is a %s step: %s completes only %s steps", idx, step.ActionType, et, strings.Join(names, " and "))
}

// The kinds of step a plan of each version may have. Never modified.
var (
	stepKindsV0 = []ActionType{ActionToolCall, ActionGenerate, ActionSubTask}
	stepKindsV1 = []ActionType{ActionToolCall, ActionRespond, ActionGenerate}
)

// checkPlan says what is wrong with a new plan (REASON_DONE, PLAN_DONE)
// whose steps may be of the given kinds, or "".
func checkPlan(p *Plan, kinds []ActionType) string {
	if len(p.Steps) == 0 {
		return "empty plan: a plan has at least one step"
	}
	for i, s := range p.Steps {
		switch {
		case s.Index != i:
			return sprintf("step %d has index %d: indices are 0..n-1 in order", i, s.Index)
		case s.Completed:
			return sprintf("step %d is already completed in a new plan", i)
		case !slices.Contains(kinds, s.ActionType):
			return sprintf("step %d has action type %q: this machine's steps are %v", i, s.ActionType, kinds)
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
