package fsm

// taskMachineV0 is pegasus.task version 0, the legacy nine-state machine
// (docs: pegasus-task-fsm-v1.zh.md): perceive, think, plan, act, reflect,
// with the reflection's verdict choosing what comes next. Logs written
// under it fold with it for ever; new tasks may still choose it. Its edges:
//
//	idle       -(TASK_CREATED)->        perceiving
//	perceiving -(PERCEIVE_DONE)->       thinking
//	thinking   -(THINK_DONE)->          planning
//	thinking   -(NEED_MORE_INFO)->      suspended
//	planning   -(PLAN_DONE)->           acting
//	acting     -(ACT_DONE)->            reflecting                    (generate or sub_task step)
//	acting     -(TOOL_CALL_COMPLETED)-> acting | reflecting           (more steps | none left)
//	acting     -(TOOL_CALL_FAILED)->    acting | reflecting           (more steps | none left)
//	reflecting -(REFLECT_DONE)->        completed | thinking | planning (verdict complete | continue | replan)
//	suspended  -(MESSAGE_RECEIVED)->    thinking
//	suspended  -(TASK_RESUMED)->        Context.SuspendedState
//	perceiving | thinking | planning | acting | reflecting -(TASK_SUSPENDED)-> suspended
//	idle | perceiving | thinking | planning | acting | reflecting | suspended -(TASK_FAILED)-> failed
//
// Facts, which never move the state nor add to History:
//
//	perceiving, thinking, planning, reflecting: MODEL_CALLED, TASK_NOTIFY
//	acting:    TOOL_CALL_STARTED, SUB_TASK_CREATED (current step), TASK_NOTIFY
//	completed: TASK_COMPLETED (once)
//	failed:    nothing
//
// Context.Iteration counts think/act/reflect rounds: TASK_CREATED sets it
// to 1; a continue or replan verdict and MESSAGE_RECEIVED add one.
type taskMachineV0 struct{}

// The legal event types of each state of version 0, transitions first,
// then facts. Never modified.
var (
	legalV0Idle       = []EventType{TaskCreated, TaskFailed}
	legalV0Perceiving = []EventType{PerceiveDone, TaskSuspended, TaskFailed, ModelCalled, TaskNotify, BudgetExceeded}
	legalV0Thinking   = []EventType{ThinkDone, NeedMoreInfo, TaskSuspended, TaskFailed, ModelCalled, TaskNotify, BudgetExceeded}
	legalV0Planning   = []EventType{PlanDone, TaskSuspended, TaskFailed, ModelCalled, TaskNotify, BudgetExceeded}
	legalV0Acting     = []EventType{ActDone, ToolCallCompleted, ToolCallFailed, TaskSuspended, TaskFailed, ToolCallStarted, SubTaskCreated, TaskNotify}
	legalV0Reflecting = []EventType{ReflectDone, TaskSuspended, TaskFailed, ModelCalled, TaskNotify, BudgetExceeded}
	legalV0Suspended  = []EventType{MessageReceived, TaskResumed, TaskFailed}
	legalV0Completed  = []EventType{TaskCompleted}

	statesV0 = []State{StateIdle, StatePerceiving, StateThinking, StatePlanning, StateActing, StateReflecting,
		StateSuspended, StateCompleted, StateFailed}
)

func (taskMachineV0) Ref() MachineRef { return machineRef(0) }

func legalV0(s State) []EventType {
	switch s {
	case StateNone:
		return legalNone
	case StateIdle:
		return legalV0Idle
	case StatePerceiving:
		return legalV0Perceiving
	case StateThinking:
		return legalV0Thinking
	case StatePlanning:
		return legalV0Planning
	case StateActing:
		return legalV0Acting
	case StateReflecting:
		return legalV0Reflecting
	case StateSuspended:
		return legalV0Suspended
	case StateCompleted:
		return legalV0Completed
	}
	return nil // failed, and anything that is not a state of this machine
}

func (taskMachineV0) Legal(s State) []EventType { return cloneSlice(legalV0(s)) }

func (taskMachineV0) States() []State { return cloneSlice(statesV0) }

func (taskMachineV0) CanTransition(s State, et EventType) bool { return canTransition(0, s, et) }

// Apply implements Machine.
func (taskMachineV0) Apply(t Task, ev Event) (Task, error) { return applyCopy(0, t, ev) }

// Next implements Machine:
//
//	idle:       start
//	perceiving: call the model (perceive); thinking: (think); planning: (plan); reflecting: (reflect)
//	acting:     run the current step (generate and sub_task steps end with ACT_DONE);
//	            a sub_task step whose child exists waits for that task, a tool_call
//	            step whose call runs as a broker task waits for that task
//	suspended:  wait for input
//	completed:  compile the result until TASK_COMPLETED
//	failed:     nothing
func (taskMachineV0) Next(t *Task) Action {
	switch t.State {
	case StateIdle:
		return Action{Kind: ActStart}
	case StatePerceiving:
		return Action{Kind: ActCallModel, Stage: StagePerceive}
	case StateThinking:
		return Action{Kind: ActCallModel, Stage: StageThink}
	case StatePlanning:
		return Action{Kind: ActCallModel, Stage: StagePlan}
	case StateReflecting:
		return Action{Kind: ActCallModel, Stage: StageReflect}
	case StateActing:
		if s, pc := t.Context.Plan.CurrentStep(), t.Context.PendingSubTask; s != nil && pc != nil && pc.StepIndex == s.Index {
			return Action{Kind: ActWaitTask, Step: s.Index, Task: pc.TaskID, Done: ActDone}
		}
		if a, ok := waitToolTask(t); ok {
			return a
		}
		return runStep(t, ActDone)
	case StateSuspended:
		return Action{Kind: ActWaitInput}
	case StateCompleted:
		if !t.Context.ResultRecorded {
			return Action{Kind: ActCompile}
		}
	}
	return Action{}
}

// step applies every event but TASK_CREATED to n, whose state is from; the
// event type is legal in it. Each case checks the body fully before it
// writes to n: on error n is unchanged.
func (taskMachineV0) step(n *Task, from State, ev *Event) error {
	switch ev.Type {
	case PerceiveDone:
		b, err := bodyAs[PerceiveDoneBody](from, ev)
		if err != nil {
			return err
		}
		n.Context.Perception = &b.Perception
		n.Context.Messages = append(n.Context.Messages, b.NewMessages...)
		moveTo(n, from, StateThinking, ev)
		return nil

	case ThinkDone:
		b, err := bodyAs[ThinkDoneBody](from, ev)
		if err != nil {
			return err
		}
		n.Context.Reasoning = &b.Reasoning
		n.Context.Messages = append(n.Context.Messages, b.NewMessages...)
		moveTo(n, from, StatePlanning, ev)
		return nil

	case PlanDone:
		b, err := bodyAs[PlanDoneBody](from, ev)
		if err != nil {
			return err
		}
		if reason := checkPlan(&b.Plan, stepKindsV0); reason != "" {
			return eventErr(from, ev.Type, "%s", reason)
		}
		setPlan(n, &b.Plan)
		n.Context.Messages = append(n.Context.Messages, b.NewMessages...)
		moveTo(n, from, StateActing, ev)
		return nil

	case ActDone:
		b, err := bodyAs[ActDoneBody](from, ev)
		if err != nil {
			return err
		}
		step, err := currentStep(n, from, ev.Type, b.StepIndex, ActionGenerate, ActionSubTask)
		if err != nil {
			return err
		}
		if step.ActionType == ActionSubTask {
			pc := n.Context.PendingSubTask
			switch {
			case pc == nil || pc.StepIndex != step.Index:
				return eventErr(from, ev.Type, "sub_task step %d has no child task yet (SUB_TASK_CREATED)", step.Index)
			case b.SubTask != pc.TaskID:
				return eventErr(from, ev.Type, "sub task %q is not step %d's child %q", b.SubTask, step.Index, pc.TaskID)
			}
		} else if b.SubTask != "" || b.Error != "" {
			return eventErr(from, ev.Type, "generate step %d has no child task and cannot fail", step.Index)
		}
		recordResult(n, ActionResult{
			StepIndex:  step.Index,
			ActionType: step.ActionType,
			Success:    b.Error == "",
			Result:     b.Result,
			Error:      b.Error,
			EventID:    ev.ID,
		}, b.NewMessages)
		n.Context.PendingSubTask = nil
		markStepDone(n)
		moveTo(n, from, StateReflecting, ev)
		return nil

	case ReflectDone:
		b, err := bodyAs[ReflectDoneBody](from, ev)
		if err != nil {
			return err
		}
		var to State
		switch b.Reflection.Verdict {
		case VerdictComplete:
			to = StateCompleted
		case VerdictContinue:
			to = StateThinking
		case VerdictReplan:
			to = StatePlanning
		default:
			return eventErr(from, ev.Type, "verdict %q: want complete, continue or replan", b.Reflection.Verdict)
		}
		n.Context.Reflections = append(n.Context.Reflections, b.Reflection)
		n.Context.Messages = append(n.Context.Messages, b.NewMessages...)
		if to != StateCompleted {
			n.Context.Iteration++
		}
		moveTo(n, from, to, ev)
		return nil

	case SubTaskCreated:
		b, err := bodyAs[SubTaskCreatedBody](from, ev)
		if err != nil {
			return err
		}
		step, err := currentStep(n, from, ev.Type, b.StepIndex, ActionSubTask)
		if err != nil {
			return err
		}
		switch {
		case b.TaskID == "":
			return eventErr(from, ev.Type, "empty child task id")
		case n.Context.PendingSubTask != nil:
			return eventErr(from, ev.Type, "step %d already created child %q", step.Index, n.Context.PendingSubTask.TaskID)
		}
		n.Context.PendingSubTask = b
		return nil
	}
	return sharedStep(0, n, from, ev)
}

// markStepDone marks the current step of n's plan completed, on a copy of
// the plan, so the task the caller passed to Apply keeps its own.
func markStepDone(n *Task) {
	p := copyPlan(n.Context.Plan)
	p.CurrentStep().Completed = true
	n.Context.Plan = p
}

// copyPlan copies p and its steps (sharing their parameter maps), in one
// allocation for a plan of up to eight steps: a fold copies the plan at
// every step it finishes.
func copyPlan(p *Plan) *Plan {
	var c *Plan
	var steps []PlanStep
	switch n := len(p.Steps); {
	case n <= 2:
		b := new(struct {
			p Plan
			s [2]PlanStep
		})
		c, steps = &b.p, b.s[:0]
	case n <= 4:
		b := new(struct {
			p Plan
			s [4]PlanStep
		})
		c, steps = &b.p, b.s[:0]
	case n <= 8:
		b := new(struct {
			p Plan
			s [8]PlanStep
		})
		c, steps = &b.p, b.s[:0]
	default:
		c, steps = new(Plan), make([]PlanStep, 0, n)
	}
	*c = *p
	c.Steps = append(steps, p.Steps...)
	return c
}
