package agent

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/fsm"
)

// memoryIndexHeader starts the user message that carries the memory index
// on a task's first reasoning.
const memoryIndexHeader = "Long-term memory index (read a file with memory_read before relying on it):\n"

// firstReasoning reports whether t has not finished a reasoning stage yet:
// its history has neither REASON_DONE nor NEED_MORE_INFO. The first
// reasoning outcome records the input (and the memory index) as messages,
// so that every later request replays the same conversation.
func firstReasoning(t *fsm.Task) bool {
	for _, h := range t.History {
		if h.Event == fsm.ReasonDone || h.Event == fsm.NeedMoreInfo {
			return false
		}
	}
	return true
}

// openingMessages are the messages a task's first reasoning adds before
// the model's reply: the memory index (when there is one) and the input.
func openingMessages(t *fsm.Task, memoryIndex string) []fsm.Message {
	var msgs []fsm.Message
	if memoryIndex != "" {
		msgs = append(msgs, fsm.Message{Role: "user", Content: memoryIndexHeader + memoryIndex})
	}
	return append(msgs, fsm.Message{Role: "user", Content: t.Context.InputText})
}

// buildRequest is the model request of one reasoning stage: the type's
// system prompt, the opening messages, then the conversation so far.
func buildRequest(kind *taskKind, t *fsm.Task, opening []fsm.Message) llm.Request {
	msgs := make([]fsm.Message, 0, 1+len(opening)+len(t.Context.Messages))
	msgs = append(msgs, fsm.Message{Role: "system", Content: kind.SystemPrompt})
	msgs = append(msgs, opening...)
	msgs = append(msgs, t.Context.Messages...)
	return llm.Request{Messages: answerDanglingCalls(msgs), Tools: kind.specs, Purpose: "reason"}
}

// answerDanglingCalls adds a tool message for every tool call of an
// assistant message that no tool message answers (a plan superseded by a
// user message while the task was suspended): the Chat Completions protocol
// rejects a conversation with an unanswered call. The added messages are
// only sent, never recorded. When every call is answered, msgs itself is
// returned.
func answerDanglingCalls(msgs []fsm.Message) []fsm.Message {
	var out []fsm.Message // nil while every call is answered: msgs[:i] is the output so far
	for i := 0; i < len(msgs); i++ {
		if out != nil {
			out = append(out, msgs[i])
		}
		if msgs[i].Role != "assistant" || len(msgs[i].ToolCalls) == 0 {
			continue
		}
		j := i + 1
		for ; j < len(msgs) && msgs[j].Role == "tool"; j++ {
			if out != nil {
				out = append(out, msgs[j])
			}
		}
		answers := msgs[i+1 : j]
		for _, tc := range msgs[i].ToolCalls {
			if slices.ContainsFunc(answers, func(m fsm.Message) bool { return m.ToolCallID == tc.ID }) {
				continue
			}
			if out == nil {
				out = append(make([]fsm.Message, 0, len(msgs)+len(msgs[i].ToolCalls)), msgs[:j]...)
			}
			out = append(out, fsm.Message{Role: "tool", ToolCallID: tc.ID, Content: "error: not executed (the plan was superseded)"})
		}
		i = j - 1
	}
	if out == nil {
		return msgs
	}
	return out
}

// decide turns the model's reply into the reasoning outcome. A call of
// ask_user means the model needs the user: NEED_MORE_INFO with its
// question, recorded as a plain assistant message (any other call in the
// same reply is dropped, since the user's answer may change it). Otherwise
// the planner turns the tool calls into steps: REASON_DONE.
func decide(t *fsm.Task, opening []fsm.Message, resp llm.Response) fsm.Body {
	reasoning := fsm.Reasoning{Text: resp.Content, ToolCalls: resp.ToolCalls, Model: resp.Model}
	for _, tc := range resp.ToolCalls {
		if tc.Name != AskUserTool {
			continue
		}
		var a struct {
			Question string `json:"question"`
		}
		_ = json.Unmarshal([]byte(tc.Arguments), &a)
		q := strings.TrimSpace(a.Question)
		if q == "" {
			q = strings.TrimSpace(resp.Content)
		}
		if q == "" {
			q = "Could you tell me more about what you need?"
		}
		reasoning.ToolCalls = nil
		reasoning.NeedsClarification = true
		reasoning.Question = q
		msgs := append(append([]fsm.Message(nil), opening...), fsm.Message{Role: "assistant", Content: q})
		return &fsm.NeedMoreInfoBody{Reasoning: reasoning, NewMessages: msgs}
	}
	msgs := append(append(make([]fsm.Message, 0, len(opening)+1), opening...), fsm.Message{Role: "assistant", Content: resp.Content, ToolCalls: resp.ToolCalls})
	return &fsm.ReasonDoneBody{Reasoning: reasoning, Plan: Plan(t.Context.InputText, reasoning), NewMessages: msgs}
}

// modelCalled is the MODEL_CALLED body of one attempt.
func modelCalled(purpose string, a llm.Attempt) *fsm.ModelCalledBody {
	b := &fsm.ModelCalledBody{
		Purpose:   purpose,
		Attempt:   a.Number,
		Model:     a.Model,
		LatencyMS: a.Latency.Milliseconds(),
		Status:    a.Status,
	}
	if a.Err != nil {
		b.Error = a.Err.Error()
	}
	if r := a.Response; r != nil {
		if r.Model != "" {
			b.Model = r.Model
		}
		b.PromptTokens = r.Usage.PromptTokens
		b.CompletionTokens = r.Usage.CompletionTokens
		b.Content = r.Content
		b.ToolCalls = r.ToolCalls
		b.FinishReason = r.FinishReason
	}
	return b
}

// toolMessage is the tool result the model sees next: the result, or
// "error: " and the error.
func toolMessage(callID, result string, err error) fsm.Message {
	content := result
	if err != nil {
		content = "error: " + err.Error()
	}
	return fsm.Message{Role: "tool", ToolCallID: callID, Content: content}
}

// compileResult is the task's final result: the text of the respond and
// generate steps of the last plan, in order; for a plan without one (a
// version 0 plan of tool calls and sub tasks), the last reflection's
// assessment, else the last successful step's result.
func compileResult(t *fsm.Task) string {
	if r := stepResults(t); r != "" {
		return r
	}
	if n := len(t.Context.Reflections); n > 0 && t.Context.Reflections[n-1].Assessment != "" {
		return t.Context.Reflections[n-1].Assessment
	}
	for i := len(t.Context.ActionsDone) - 1; i >= 0; i-- {
		if ad := t.Context.ActionsDone[i]; ad.Success {
			return ad.Result
		}
	}
	return ""
}

// stepResults joins the text of the respond and generate steps of t's
// last plan, in order.
func stepResults(t *fsm.Task) string {
	p := t.Context.Plan
	if p == nil {
		return ""
	}
	var parts []string
	for _, s := range p.Steps {
		if s.ActionType == fsm.ActionRespond || s.ActionType == fsm.ActionGenerate {
			for i := len(t.Context.ActionsDone) - 1; i >= 0; i-- {
				if a := t.Context.ActionsDone[i]; a.StepIndex == s.Index && a.ActionType == s.ActionType {
					parts = append(parts, a.Result)
					break
				}
			}
		}
	}
	return strings.Join(parts, "\n\n")
}
