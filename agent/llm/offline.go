package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/pegasus-engine/pegasus/fsm"
)

// OfflineModelName is the name the offline model records in MODEL_CALLED.
const OfflineModelName = "pegasus-offline-demo"

// Offline is the built-in deterministic demo and test model, used when no
// model is configured. It never touches the network and always answers the
// same conversation the same way:
//
//   - asked for a reflection (Purpose "reflect"), it says there is nothing
//     worth remembering and calls no tool;
//   - for the stages of the legacy machine: "perceive" restates the input,
//     "think" says it will look for a tool (or asks, as below), and
//     "reflect_verdict" calls verdict with "complete" and the tool results
//     (or the fixed sentence) as assessment; "plan" answers as below;
//   - after tool results, it answers with them ("The current time is ...");
//   - for a user message that is empty or "?", it asks for clarification
//     through the ask_user tool;
//   - for a message that mentions the time or the date, it calls
//     current_time;
//   - for "remember <something>", it calls memory_append on
//     "facts/notes.md";
//   - otherwise it answers with a fixed sentence that quotes the input.
//
// A tool is only called when the request offers it. Offline is safe for
// concurrent use.
type Offline struct{}

// Name implements Model.
func (Offline) Name() string { return OfflineModelName }

// Complete implements Model. It makes exactly one attempt.
func (o Offline) Complete(ctx context.Context, req Request, report func(Attempt)) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	r := o.answer(req)
	if req.Deltas != nil && r.Content != "" {
		req.Deltas(r.Content)
	}
	if report != nil {
		rr := r
		report(Attempt{Number: 1, Model: OfflineModelName, Status: 200, Response: &rr})
	}
	return r, nil
}

func (Offline) answer(req Request) Response {
	r := Response{Model: OfflineModelName, FinishReason: "stop"}
	offered := map[string]bool{}
	for _, t := range req.Tools {
		offered[t.Name] = true
	}
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(m.Content)
	}
	r.Usage.PromptTokens = prompt / 4 // a rough, deterministic count

	callID := fmt.Sprintf("offline_%d", countRole(req.Messages, "assistant")+1)
	call := func(name string, args any) Response {
		b, _ := json.Marshal(args)
		r.ToolCalls = []fsm.ToolCall{{ID: callID, Name: name, Arguments: string(b)}}
		r.FinishReason = "tool_calls"
		r.Usage.CompletionTokens = 8
		return r
	}
	say := func(text string) Response {
		r.Content = text
		r.Usage.CompletionTokens = len(text) / 4
		return r
	}

	if req.Purpose == "reflect" {
		return say("Nothing from this task is worth keeping in long-term memory.")
	}
	if len(req.Messages) == 0 {
		return say("There is nothing to answer.")
	}
	last := req.Messages[len(req.Messages)-1]
	text := strings.TrimSpace(lastUserText(req.Messages))
	lower := strings.ToLower(text)
	// The stages of the legacy machine (pegasus.task version 0).
	switch req.Purpose {
	case "perceive":
		return say(fmt.Sprintf("The user says %q.", text))
	case "think":
		if (text == "" || text == "?") && offered["ask_user"] {
			return call("ask_user", map[string]string{"question": "What would you like me to do?"})
		}
		return say(fmt.Sprintf("I will see whether a tool helps with %q.", text))
	case "reflect_verdict":
		assessment := fmt.Sprintf("Offline demo model: I received %q. Configure a model (PEGASUS_LLM_BASE_URL, PEGASUS_LLM_MODEL) for real answers.", text)
		if summary := lastToolResults(req.Messages); summary != "" {
			assessment = summary
		}
		return call("verdict", map[string]string{"verdict": "complete", "assessment": assessment})
	}
	if last.Role == "tool" {
		return say(summarizeToolResults(req.Messages))
	}
	switch {
	case (text == "" || text == "?") && offered["ask_user"]:
		return call("ask_user", map[string]string{"question": "What would you like me to do?"})
	case mentionsTime(lower) && offered["current_time"]:
		return call("current_time", map[string]string{})
	case strings.HasPrefix(lower, "remember ") && offered["memory_append"]:
		fact := strings.TrimSpace(text[len("remember "):])
		return call("memory_append", map[string]string{"path": "facts/notes.md", "entry": "- " + fact + "\n"})
	}
	return say(fmt.Sprintf("Offline demo model: I received %q. Configure a model (PEGASUS_LLM_BASE_URL, PEGASUS_LLM_MODEL) for real answers.", text))
}

func countRole(msgs []fsm.Message, role string) int {
	n := 0
	for _, m := range msgs {
		if m.Role == role {
			n++
		}
	}
	return n
}

func lastUserText(msgs []fsm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].Content
		}
	}
	return ""
}

func mentionsTime(lower string) bool {
	for _, w := range strings.FieldsFunc(lower, func(r rune) bool { return !unicode.IsLetter(r) }) {
		switch w {
		case "time", "date", "clock", "today":
			return true
		}
	}
	return false
}

// lastToolResults summarizes the tool results that answer the last
// assistant message with tool calls, or "" when there are none.
func lastToolResults(msgs []fsm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "assistant" && len(msgs[i].ToolCalls) > 0 {
			j := i + 1
			for j < len(msgs) && msgs[j].Role == "tool" {
				j++
			}
			if j == i+1 {
				return ""
			}
			return summarizeToolResults(msgs[:j])
		}
	}
	return ""
}

// summarizeToolResults answers with the tool results that follow the last
// assistant message, naming each tool through its call id.
func summarizeToolResults(msgs []fsm.Message) string {
	start := len(msgs)
	for start > 0 && msgs[start-1].Role == "tool" {
		start--
	}
	names := map[string]string{}
	if start > 0 {
		for _, tc := range msgs[start-1].ToolCalls {
			names[tc.ID] = tc.Name
		}
	}
	var parts []string
	for _, m := range msgs[start:] {
		name := names[m.ToolCallID]
		switch {
		case strings.HasPrefix(m.Content, "error: "):
			parts = append(parts, fmt.Sprintf("The tool %s failed (%s).", name, strings.TrimPrefix(m.Content, "error: ")))
		case name == "current_time":
			parts = append(parts, fmt.Sprintf("The current time is %s.", m.Content))
		case name == "memory_append" || name == "memory_write":
			parts = append(parts, "I will remember that.")
		default:
			parts = append(parts, fmt.Sprintf("%s returned: %s", name, m.Content))
		}
	}
	return strings.Join(parts, " ")
}
