package agent

import (
	"strings"
	"unicode/utf8"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Plan turns one reasoning result into plan steps. It is pure code, called
// inside the reasoning stage without a state transition of its own:
//
//   - each tool call the model chose becomes one tool_call step, in the
//     model's order, with action parameters "tool", "arguments" and
//     "tool_call_id";
//   - no tool call means the model answered: one respond step whose "text"
//     is the answer.
//
// The fsm routes on the step kinds: a plan with a tool_call step returns to
// reasoning when done (the model must see the results), a respond-only plan
// completes the task.
func Plan(goal string, r fsm.Reasoning) fsm.Plan {
	p := fsm.Plan{Goal: goalOf(goal), Reasoning: r.Text}
	if len(r.ToolCalls) == 0 {
		p.Steps = []fsm.PlanStep{{
			Index:        0,
			Description:  "respond to the user",
			ActionType:   fsm.ActionRespond,
			ActionParams: map[string]string{"text": r.Text},
		}}
		return p
	}
	p.Steps = make([]fsm.PlanStep, 0, len(r.ToolCalls))
	for i, tc := range r.ToolCalls {
		args := strings.TrimSpace(tc.Arguments)
		if args == "" {
			args = "{}"
		}
		p.Steps = append(p.Steps, fsm.PlanStep{
			Index:        i,
			Description:  describeCall(tc.Name, args),
			ActionType:   fsm.ActionToolCall,
			ActionParams: map[string]string{"tool": tc.Name, "arguments": args, "tool_call_id": tc.ID},
		})
	}
	return p
}

// goalOf is the first line of the input, bounded: the plan's goal is a
// label, the full input stays in the context.
func goalOf(input string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(input), "\n")
	return truncate(line, 200)
}

func describeCall(name, args string) string {
	return "call " + name + " " + truncate(args, 120)
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
