package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// The model-call stages of the legacy machine (pegasus.task version 0):
// perceive, think, plan and reflect, each one model call recorded like
// the current machine's reasoning (MODEL_CALLED, then the stage's event).

// Pseudo-tools of the legacy stages: the model answers through them, they
// never run.
const (
	// SubTaskTool, offered while planning, makes a sub_task step: a child
	// task with the given input.
	SubTaskTool = "sub_task"
	// VerdictTool, offered while reflecting, carries the reflection.
	VerdictTool = "verdict"
)

// Request purposes of the legacy stages (recorded in MODEL_CALLED).
// "reflect" stays the post-task reflection's.
const (
	PurposePerceive = "perceive"
	PurposeThink    = "think"
	PurposePlan     = "plan"
	PurposeVerdict  = "reflect_verdict"
)

const (
	perceivePrompt = `You are the perception stage of a task agent. In one or two sentences, say what the user wants, what is given and what is missing. Do not answer the request.`
	thinkPrompt    = `You are the thinking stage of a task agent. Reason about how to fulfil the request: what is needed, which tools or sub tasks could help. Do not call tools yet. If the request cannot be understood without the user, call ask_user with your question.`
	planPrompt     = `You are the planning stage of a task agent. Either call the tools the task needs (each call is one step, run in order), call sub_task with an "input" to delegate a part to a child task, or, if nothing needs doing, answer the user directly.`
	verdictPrompt  = `You are the reflection stage of a task agent. Judge what the steps achieved and call the verdict tool: "complete" with the final answer as assessment when the request is fulfilled, "continue" to think again, or "replan" to choose new steps. Add lessons and a next_focus when useful.`
)

var (
	subTaskSpec = llm.ToolSpec{Name: SubTaskTool, Description: "Delegate part of the work to a child task and wait for its result.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"input":{"type":"string","description":"what the child task should do"}},"required":["input"]}`)}
	verdictSpec = llm.ToolSpec{Name: VerdictTool, Description: "Record the reflection on the steps just run.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"verdict":{"type":"string","enum":["complete","continue","replan"]},"assessment":{"type":"string"},"lessons":{"type":"array","items":{"type":"string"}},"next_focus":{"type":"string"}},"required":["verdict","assessment"]}`)}
)

// legacyRequest builds the request of a version 0 stage and the function
// that turns the reply into the stage's outcome.
//
// The opening messages (memory index, input) are recorded by perceive;
// every stage sees the conversation so far, with the perception, the
// reasoning and the last reflection in its system message.
func (a *Agent) legacyRequest(ctx context.Context, t *fsm.Task, kind *taskKind, stage fsm.Stage) (llm.Request, func(llm.Response) fsm.Body, error) {
	system := func(prompt string) []fsm.Message {
		var b strings.Builder
		b.WriteString(kind.SystemPrompt + "\n\n" + prompt)
		if p := t.Context.Perception; p != nil {
			fmt.Fprintf(&b, "\n\nPerception: %s", p.Text)
		}
		if r := t.Context.Reasoning; r != nil && stage != fsm.StageThink {
			fmt.Fprintf(&b, "\n\nReasoning: %s", r.Text)
		}
		if n := len(t.Context.Reflections); n > 0 {
			r := t.Context.Reflections[n-1]
			fmt.Fprintf(&b, "\n\nLast reflection (%s): %s", r.Verdict, r.Assessment)
			if r.NextFocus != "" {
				fmt.Fprintf(&b, " Next focus: %s", r.NextFocus)
			}
		}
		msgs := append([]fsm.Message{{Role: "system", Content: b.String()}}, t.Context.Messages...)
		return answerDanglingCalls(msgs)
	}
	switch stage {
	case fsm.StagePerceive:
		opening := openingMessages(t, a.memoryIndex(ctx, t, kind))
		req := llm.Request{Messages: append(system(perceivePrompt), opening...), Purpose: PurposePerceive}
		return req, func(r llm.Response) fsm.Body {
			return &fsm.PerceiveDoneBody{Perception: fsm.Perception{Text: r.Content, Model: r.Model}, NewMessages: opening}
		}, nil

	case fsm.StageThink:
		req := llm.Request{Messages: system(thinkPrompt), Tools: []llm.ToolSpec{askUserSpec}, Purpose: PurposeThink}
		return req, func(r llm.Response) fsm.Body {
			if b, ok := decide(t, nil, r).(*fsm.NeedMoreInfoBody); ok {
				return b
			}
			return &fsm.ThinkDoneBody{Reasoning: fsm.Reasoning{Text: r.Content, Model: r.Model},
				NewMessages: []fsm.Message{{Role: "assistant", Content: r.Content}}}
		}, nil

	case fsm.StagePlan:
		var specs []llm.ToolSpec // the type's tools, without ask_user (thinking asks), and sub_task
		for _, sp := range kind.specs {
			if sp.Name != AskUserTool {
				specs = append(specs, sp)
			}
		}
		specs = append(specs, subTaskSpec)
		req := llm.Request{Messages: system(planPrompt), Tools: specs, Purpose: PurposePlan}
		return req, func(r llm.Response) fsm.Body { return legacyPlan(t.Context.InputText, r) }, nil

	case fsm.StageReflect:
		req := llm.Request{Messages: system(verdictPrompt), Tools: []llm.ToolSpec{verdictSpec}, Purpose: PurposeVerdict}
		return req, func(r llm.Response) fsm.Body { return verdictOf(r) }, nil
	}
	return llm.Request{}, nil, fmt.Errorf("agent: no model stage %q", stage)
}

// legacyPlan turns the planning reply into PLAN_DONE: each tool call a
// tool_call step, each sub_task call a sub_task step, in the model's
// order; no call, one generate step with the reply's text.
func legacyPlan(input string, r llm.Response) *fsm.PlanDoneBody {
	p := fsm.Plan{Goal: goalOf(input), Reasoning: r.Content}
	var calls []fsm.ToolCall
	for _, tc := range r.ToolCalls {
		i := len(p.Steps)
		if tc.Name == SubTaskTool {
			var args struct {
				Input string `json:"input"`
			}
			_ = json.Unmarshal([]byte(tc.Arguments), &args)
			if strings.TrimSpace(args.Input) == "" {
				args.Input = input
			}
			p.Steps = append(p.Steps, fsm.PlanStep{Index: i, Description: "sub task: " + truncate(args.Input, 120),
				ActionType: fsm.ActionSubTask, ActionParams: map[string]string{"input": args.Input}})
			continue
		}
		step := Plan(input, fsm.Reasoning{ToolCalls: []fsm.ToolCall{tc}}).Steps[0]
		step.Index = i
		p.Steps = append(p.Steps, step)
		calls = append(calls, tc)
	}
	if len(p.Steps) == 0 {
		p.Steps = []fsm.PlanStep{{Index: 0, Description: "answer the user", ActionType: fsm.ActionGenerate,
			ActionParams: map[string]string{"text": r.Content}}}
	}
	return &fsm.PlanDoneBody{Plan: p, NewMessages: []fsm.Message{{Role: "assistant", Content: r.Content, ToolCalls: calls}}}
}

// verdictOf turns the reflecting stage's reply into its outcome. A
// verdict call is the reflection, kept whole (assessment, lessons, next
// focus): REFLECT_DONE. A reply without one completes the task with the
// reply as its assessment, as the prompt's "complete with the final answer"
// would. A verdict call that does not decode, or whose verdict is not
// complete, continue or replan, is the model's error and never a
// completion: the machine refuses such a REFLECT_DONE, so the task fails
// with reason invalid_verdict, and the MODEL_CALLED recorded with it keeps
// the model's whole answer.
func verdictOf(r llm.Response) fsm.Body {
	for _, tc := range r.ToolCalls {
		if tc.Name != VerdictTool {
			continue
		}
		ref, err := decodeVerdict(tc.Arguments)
		if err != nil {
			return &fsm.TaskFailedBody{Reason: "invalid_verdict", Error: "reflecting: " + err.Error()}
		}
		return &fsm.ReflectDoneBody{Reflection: ref}
	}
	return &fsm.ReflectDoneBody{Reflection: fsm.Reflection{Verdict: fsm.VerdictComplete, Assessment: strings.TrimSpace(r.Content)}}
}

// decodeVerdict reads the verdict tool's arguments. The verdict is read
// without regard to case and surrounding space; lessons may be a list or,
// for a single lesson, a string.
func decodeVerdict(args string) (fsm.Reflection, error) {
	var v struct {
		Verdict    string          `json:"verdict"`
		Assessment string          `json:"assessment"`
		Lessons    json.RawMessage `json:"lessons"`
		NextFocus  string          `json:"next_focus"`
	}
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return fsm.Reflection{}, fmt.Errorf("the verdict call's arguments %q do not decode: %w", truncate(args, 200), err)
	}
	ref := fsm.Reflection{Verdict: strings.ToLower(strings.TrimSpace(v.Verdict)), Assessment: v.Assessment, NextFocus: v.NextFocus}
	switch ref.Verdict {
	case fsm.VerdictComplete, fsm.VerdictContinue, fsm.VerdictReplan:
	default:
		return fsm.Reflection{}, fmt.Errorf("the model's verdict %q is not complete, continue or replan", v.Verdict)
	}
	if l := strings.TrimSpace(string(v.Lessons)); l != "" && l != "null" {
		var one string
		if err := json.Unmarshal(v.Lessons, &ref.Lessons); err != nil {
			if json.Unmarshal(v.Lessons, &one) != nil {
				return fsm.Reflection{}, fmt.Errorf("the verdict call's lessons %s are neither a list of strings nor a string", truncate(l, 200))
			}
			if one != "" {
				ref.Lessons = []string{one}
			}
		}
	}
	return ref, nil
}

// startSubTask runs a sub_task step: SUB_TASK_CREATED names the child
// (recorded first, so a crash leaves the parent knowing which child to
// create or wait for), then the child's input is appended on its own
// stream. The child runs under the parent's machine and type; its end
// wakes the parent (see wakeParent).
func (a *Agent) startSubTask(ctx context.Context, t *fsm.Task, step *fsm.PlanStep) {
	b := &fsm.SubTaskCreatedBody{StepIndex: step.Index, TaskID: a.log.NewID().String(), Input: step.ActionParams["input"]}
	res, ok := a.outcome(ctx, t, t.Version, t.LastEvent, b)
	if !ok {
		return
	}
	if err := a.createChild(ctx, t, b, res.Events[0].ID); err != nil {
		a.opts.Logger.Error("creating a sub task failed; it is created at the next start", taskIDAttr(t.ID), "child", b.TaskID, "err", err)
	}
}

// createChild appends the input that creates child b of parent: with the
// child's id as its event id, so that appending it again (after a crash)
// is a no-op.
func (a *Agent) createChild(ctx context.Context, parent *fsm.Task, b *fsm.SubTaskCreatedBody, cause ulid.ULID) error {
	id, err := ulid.ParseStrict(b.TaskID)
	if err != nil {
		return fmt.Errorf("agent: sub task id %q: %w", b.TaskID, err)
	}
	m := parent.Machine
	data, err := fsm.Encode(&fsm.Input{Kind: fsm.MessageReceived, Text: b.Input, Source: "task:" + parent.ID,
		TaskType: parent.Type, Priority: parent.Priority, Machine: &m, ParentTaskID: parent.ID,
		ConcurrencyKey: parent.ConcurrencyKey})
	if err != nil {
		return err
	}
	_, err = a.app.Append(ctx, b.TaskID, eventlog.Any, eventlog.Event{ID: id, Type: string(fsm.MessageReceived),
		Causation: cause, Correlation: a.correlation(parent.ID), Schema: fsm.SchemaVersion, Body: data})
	return err
}

// releaseWaiting gives up the slot of t, which waits for child. The child
// may have ended since t's stage looked at it: its wake (wakeParent) then
// found t still holding its slot and only asked the running stage to look
// again, which the release turns into nothing. So look at the child once
// more after the release: the view has folded its end before the wake.
func (a *Agent) releaseWaiting(t *fsm.Task, child string) {
	a.sched.release(t.ID, false)
	if c, err := a.view.Task(child); err == nil && Done(&c) {
		a.sched.schedule(t.ID, t.Priority, t.ConcurrencyKey)
	}
}

// awaitChild runs for a task waiting for its child (act.Task): if the
// child has ended, it records the child's outcome as the end of the step
// (ACT_DONE); if the child does not exist yet (a crash between
// SUB_TASK_CREATED and its input), it creates it; otherwise it gives the
// slot back until the child's end wakes it.
func (a *Agent) awaitChild(ctx context.Context, t *fsm.Task, act fsm.Action) {
	if act.StepType == fsm.ActionToolCall {
		a.awaitToolTask(ctx, t, act)
		return
	}
	child, err := a.view.Task(act.Task)
	switch {
	case errors.Is(err, ErrTaskNotFound):
		if pc := t.Context.PendingSubTask; pc != nil {
			if err := a.createChild(ctx, t, pc, t.LastEvent); err != nil {
				a.opts.Logger.Error("creating a sub task failed", taskIDAttr(t.ID), "child", act.Task, "err", err)
			}
		}
		a.releaseWaiting(t, act.Task)
	case err != nil || !Done(&child):
		a.releaseWaiting(t, act.Task)
	default:
		failed := !child.Context.ResultRecorded // Done: failed, or completed with its result
		text := child.Context.FinalResult
		if failed {
			text = "sub task " + child.ID + " failed: " + child.Context.Error
		}
		b := fsm.StepDone(act, text, failed)
		if d, ok := b.(*fsm.ActDoneBody); ok {
			d.NewMessages = []fsm.Message{{Role: "user", Content: fmt.Sprintf("Result of sub task %q: %s", truncate(child.Context.InputText, 200), text)}}
		}
		a.outcome(ctx, t, t.Version, t.LastEvent, b)
	}
}
