package projection

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Progress is one task's progress view: what a dashboard or the agent's
// prompt context shows about a multi-step task. It replaces the string
// matching of the old task-state-manager proposal with facts from the log:
// steps are completed when a step event says so, a tool is awaited when a
// TOOL_CALL_STARTED has no result yet.
type Progress struct {
	TaskID      string    `msgpack:"task_id" json:"task_id"`
	State       fsm.State `msgpack:"state" json:"state"`
	Description string    `msgpack:"description" json:"description"` // the task's input text
	// CompletedSteps describes every plan step done so far, across
	// iterations, in order (a failed tool call is a done step too).
	CompletedSteps []string `msgpack:"completed_steps" json:"completed_steps"`
	// NextSteps describes the steps of the current plan still to do; empty
	// while the task is reasoning about its next plan.
	NextSteps []string `msgpack:"next_steps" json:"next_steps"`
	// ToolsUsed lists the tools called so far, each once, in first-use order.
	ToolsUsed []string `msgpack:"tools_used" json:"tools_used"`
	// StepCount is len(CompletedSteps); FailedSteps counts the failed tool
	// calls among them.
	StepCount   int `msgpack:"step_count" json:"step_count"`
	FailedSteps int `msgpack:"failed_steps" json:"failed_steps"`
	Iteration   int `msgpack:"iteration" json:"iteration"`
	// AwaitingTool is set while a tool call has started and its outcome is
	// not recorded: the task is waiting on a tool right now.
	AwaitingTool *PendingTool `msgpack:"awaiting_tool" json:"awaiting_tool"`
	Complete     bool         `msgpack:"complete" json:"complete"` // the task completed
	UpdatedAt    time.Time    `msgpack:"updated_at" json:"updated_at"`
}

// MarshalJSON writes the step and tool lists as [] when they are empty,
// never null, so that dashboards can iterate them without a check, and
// adds is_multi_step (IsMultiStep), which follows from the state and so is
// not stored. The fold itself keeps nil, which the canonical msgpack
// encoding needs.
func (p Progress) MarshalJSON() ([]byte, error) {
	type plain Progress // no methods: no recursion
	q := plain(p)
	for _, l := range []*[]string{&q.CompletedSteps, &q.NextSteps, &q.ToolsUsed} {
		if *l == nil {
			*l = []string{}
		}
	}
	return json.Marshal(struct {
		plain
		IsMultiStep bool `json:"is_multi_step"`
	}{q, p.IsMultiStep()})
}

// PendingTool is a tool call that started and has no outcome yet.
type PendingTool struct {
	Tool           string    `msgpack:"tool" json:"tool"`
	StepIndex      int       `msgpack:"step_index" json:"step_index"`
	ToolCallID     string    `msgpack:"tool_call_id" json:"tool_call_id,omitempty"`
	IdempotencyKey string    `msgpack:"idempotency_key" json:"idempotency_key"`
	Since          time.Time `msgpack:"since" json:"since"`
	EventID        ulid.ULID `msgpack:"event_id" json:"event_id"` // the TOOL_CALL_STARTED
}

// IsMultiStep is the isMultiStep of the old proposal, its isTaskActive():
// whether the task has started and not ended, with or without a plan in
// hand. A task is reasoning, acting or waiting for the user (suspended,
// as the proposal's task stays in progress while the user is asked to
// continue), or, for a broker task, assigned or in progress. A task
// waiting to start (idle, pending) or ended is not.
func (p *Progress) IsMultiStep() bool {
	switch p.State {
	case fsm.StateSuspended, fsm.StateAssigned, fsm.StateInProgress:
		return true
	}
	return p.State.IsActive()
}

// applyProgress folds one applied task event into n (fresh for a new
// task's first event). before and after are the task around the event.
// Slices are never written in place (appends copy), so a Progress handed
// out earlier as a value stays valid.
func applyProgress(n *Progress, fresh bool, ev fsm.Event, before, after *fsm.Task) {
	if fresh {
		*n = Progress{TaskID: after.ID, Description: after.Context.InputText}
	}
	switch ev.Type {
	case fsm.ReasonDone, fsm.PlanDone:
		n.NextSteps = remainingSteps(n.NextSteps, after.Context.Plan)
	case fsm.MessageReceived:
		// The answer starts a new reasoning round; the old plan is superseded.
		n.NextSteps = nil
	case fsm.ToolCallStarted:
		// The start of a later step of the same turn (parallel calls) leaves
		// the current step's call pending: it is still the one awaited.
		if pc := after.Context.PendingCall; pc != nil && startedStep(ev) == pc.StepIndex {
			n.AwaitingTool = &PendingTool{
				Tool: pc.Tool, StepIndex: pc.StepIndex, ToolCallID: pc.ToolCallID,
				IdempotencyKey: pc.IdempotencyKey, Since: ev.Time.UTC(), EventID: ev.ID,
			}
			if n.AwaitingTool.Tool == "" {
				n.AwaitingTool.Tool = stepTool(before.Context.Plan, pc.StepIndex)
			}
		}
	case fsm.ToolCallCompleted, fsm.ToolCallFailed, fsm.StepCompleted, fsm.ActDone:
		idx, failed := -1, ev.Type == fsm.ToolCallFailed
		switch b := ev.Body.(type) {
		case *fsm.ToolCallResultBody:
			idx = b.StepIndex
		case *fsm.StepCompletedBody:
			idx = b.StepIndex
		case *fsm.ActDoneBody: // version 0: a generate or sub_task step
			idx, failed = b.StepIndex, b.Error != ""
		}
		n.CompletedSteps = appendList(n.CompletedSteps, stepDescription(before.Context.Plan, idx))
		n.StepCount = len(n.CompletedSteps)
		if failed {
			n.FailedSteps++
		}
		if ev.Type != fsm.StepCompleted && ev.Type != fsm.ActDone {
			if tool := stepTool(before.Context.Plan, idx); tool != "" && !contains(n.ToolsUsed, tool) {
				n.ToolsUsed = appendList(n.ToolsUsed, tool)
			}
		}
		n.NextSteps = remainingSteps(n.NextSteps, after.Context.Plan)
	}
	if after.Context.PendingCall == nil {
		n.AwaitingTool = nil
	}
	switch after.State {
	case fsm.StateReasoning, fsm.StateThinking, fsm.StatePlanning, fsm.StateCompleted, fsm.StateFailed:
		// Reasoning (thinking or planning in version 0) means the plan is
		// done or superseded; a terminal task has nothing left to do.
		n.NextSteps = nil
	}
	n.State = after.State
	n.Iteration = after.Context.Iteration
	n.Complete = after.State == fsm.StateCompleted
	n.UpdatedAt = ev.Time.UTC()
}

// remainingSteps describes p's steps still to do, nil when none is. When
// they are the last ones of prev, the list before (steps done in order),
// it returns that tail of prev instead of a new list: NextSteps is only
// ever replaced whole, never appended to, so sharing its array is safe.
func remainingSteps(prev []string, p *fsm.Plan) []string {
	if p == nil {
		return nil
	}
	n := 0
	for i := range p.Steps {
		if !p.Steps[i].Completed {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if n <= len(prev) {
		tail, j := prev[len(prev)-n:], 0
		for i := range p.Steps {
			if s := &p.Steps[i]; !s.Completed {
				if s.Description == "" || s.Description != tail[j] {
					break
				}
				j++
			}
		}
		if j == n {
			return tail
		}
	}
	out := make([]string, 0, n)
	for i := range p.Steps {
		if !p.Steps[i].Completed {
			out = append(out, describeStep(&p.Steps[i]))
		}
	}
	return out
}

func stepDescription(p *fsm.Plan, idx int) string {
	if p == nil || idx < 0 || idx >= len(p.Steps) {
		return "step"
	}
	return describeStep(&p.Steps[idx])
}

func stepTool(p *fsm.Plan, idx int) string {
	if p == nil || idx < 0 || idx >= len(p.Steps) {
		return ""
	}
	return p.Steps[idx].Tool()
}

// describeStep is a step's description, or its kind and tool when the
// planner gave none.
func describeStep(s *fsm.PlanStep) string {
	if s.Description != "" {
		return s.Description
	}
	if tool := s.Tool(); tool != "" {
		return string(s.ActionType) + " " + tool
	}
	return string(s.ActionType)
}

// appendList appends v to s, a list of a Progress that the fold only ever
// appends to (CompletedSteps, ToolsUsed; a fresh Progress starts new
// ones). An earlier Progress that shares the array (a checkpoint's copy,
// a reader's) is shorter than the fold's and never reads the spare
// capacity the fold writes into, so the list grows with room for a few
// more steps instead of a new array per step.
func appendList(s []string, v string) []string {
	if len(s) == cap(s) {
		out := make([]string, len(s), max(4, 2*len(s)))
		copy(out, s)
		s = out
	}
	return append(s, v)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Encode returns the canonical encoding of p.
func (p *Progress) Encode() ([]byte, error) { return appendProgress(nil, p), nil }

// The first byte of EncodeStored's encoding: where the description is.
const (
	storedDescInput byte = 'i' // the task's input text, left out
	storedDescOwn   byte = 'd' // in the encoding, as Encode writes it
)

// EncodeStored returns the encoding of p persisted beside its task t, the
// task at the same sequence: one byte, then Encode's encoding of p. The
// description is left out when it is t's input text, as it is but for a
// task whose TASK_CREATED changed the input its first message gave: an
// input can be large, and the task's record already holds it.
// DecodeStored with the same task returns p.
func (p *Progress) EncodeStored(t *fsm.Task) ([]byte, error) {
	return p.AppendStored(make([]byte, 0, 128+len(p.Description)), t)
}

// AppendStored appends EncodeStored's encoding of p to dst.
func (p *Progress) AppendStored(dst []byte, t *fsm.Task) ([]byte, error) {
	if p.Description == "" || p.Description != t.Context.InputText {
		return appendProgress(append(dst, storedDescOwn), p), nil
	}
	q := *p
	q.Description = ""
	return appendProgress(append(dst, storedDescInput), &q), nil
}

// DecodeStored decodes an encoding written by EncodeStored for the task t.
func DecodeStored(data []byte, t *fsm.Task) (Progress, error) {
	if len(data) == 0 || (data[0] != storedDescInput && data[0] != storedDescOwn) {
		return Progress{}, fmt.Errorf("%w: stored progress without its description marker", ErrMalformed)
	}
	p, err := DecodeProgress(data[1:])
	if err != nil {
		return Progress{}, err
	}
	if data[0] == storedDescInput {
		if p.Description != "" {
			return Progress{}, fmt.Errorf("%w: stored progress has a description and says it is the input's", ErrMalformed)
		}
		p.Description = t.Context.InputText
	}
	return p, nil
}

// DecodeProgress decodes an encoding written by Progress.Encode.
func DecodeProgress(data []byte) (Progress, error) {
	var p Progress
	if err := unmarshal(data, &p); err != nil {
		return Progress{}, err
	}
	p.UpdatedAt = p.UpdatedAt.UTC()
	if p.AwaitingTool != nil {
		p.AwaitingTool.Since = p.AwaitingTool.Since.UTC()
	}
	return p, nil
}

// startedStep is the step index of a TOOL_CALL_STARTED, -1 if its body
// does not say.
func startedStep(ev fsm.Event) int {
	if b, ok := ev.Body.(*fsm.ToolCallStartedBody); ok {
		return b.StepIndex
	}
	return -1
}
