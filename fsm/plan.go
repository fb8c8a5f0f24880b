package fsm

// CurrentStep returns the first step that is not completed, or nil when
// every step is done (or the plan is nil). It points into p.Steps: treat it
// as read-only, the fold owns the plan.
func (p *Plan) CurrentStep() *PlanStep {
	if p == nil {
		return nil
	}
	for i := range p.Steps {
		if !p.Steps[i].Completed {
			return &p.Steps[i]
		}
	}
	return nil
}

// HasMoreSteps reports whether some step is not completed yet.
func (p *Plan) HasMoreSteps() bool { return p.CurrentStep() != nil }

// HasToolCall reports whether any step of the plan is a tool call. When all
// steps are done it decides where the task goes: a plan with a tool call
// returns to reasoning (the model must see the results), a plan without one
// completes the task.
func (p *Plan) HasToolCall() bool {
	if p == nil {
		return false
	}
	for i := range p.Steps {
		if p.Steps[i].ActionType == ActionToolCall {
			return true
		}
	}
	return false
}

// Tool is the tool a tool_call step invokes (its "tool" action parameter).
func (s *PlanStep) Tool() string { return s.ActionParams["tool"] }

// Valid reports whether a is a step kind of some machine.
func (a ActionType) Valid() bool {
	switch a {
	case ActionToolCall, ActionRespond, ActionGenerate, ActionSubTask:
		return true
	}
	return false
}
