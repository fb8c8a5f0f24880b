package llm

import (
	"context"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

var allTools = []ToolSpec{{Name: "ask_user"}, {Name: "current_time"}, {Name: "memory_append"}}

func TestOfflineModel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		req      Request
		tool     string // the tool it should call, "" for an answer
		args     string
		contains string
	}{
		{name: "empty input asks", req: Request{Tools: allTools, Messages: []fsm.Message{{Role: "user", Content: "  "}}}, tool: "ask_user", args: `{"question":"What would you like me to do?"}`},
		{name: "question mark asks", req: Request{Tools: allTools, Messages: []fsm.Message{{Role: "user", Content: "?"}}}, tool: "ask_user"},
		{name: "time calls current_time", req: Request{Tools: allTools, Messages: []fsm.Message{{Role: "system", Content: "x"}, {Role: "user", Content: "What TIME is it?"}}}, tool: "current_time", args: `{}`},
		{name: "timeline is not time", req: Request{Tools: allTools, Messages: []fsm.Message{{Role: "user", Content: "draw a timeline"}}}, contains: `I received "draw a timeline"`},
		{name: "time without the tool answers", req: Request{Messages: []fsm.Message{{Role: "user", Content: "what time is it"}}}, contains: "Offline demo model"},
		{name: "remember appends", req: Request{Tools: allTools, Messages: []fsm.Message{{Role: "user", Content: "Remember the door code is 42"}}}, tool: "memory_append", args: `{"entry":"- the door code is 42\n","path":"facts/notes.md"}`},
		{name: "tool result answered", req: Request{Tools: allTools, Messages: []fsm.Message{
			{Role: "user", Content: "time?"},
			{Role: "assistant", ToolCalls: []fsm.ToolCall{{ID: "offline_1", Name: "current_time"}}},
			{Role: "tool", ToolCallID: "offline_1", Content: "2025-01-02T03:04:05Z"},
		}}, contains: "The current time is 2025-01-02T03:04:05Z."},
		{name: "tool error reported", req: Request{Tools: allTools, Messages: []fsm.Message{
			{Role: "assistant", ToolCalls: []fsm.ToolCall{{ID: "c", Name: "memory_read"}}},
			{Role: "tool", ToolCallID: "c", Content: "error: no such file"},
		}}, contains: "The tool memory_read failed (no such file)."},
		{name: "reflection learns nothing", req: Request{Purpose: "reflect", Tools: allTools, Messages: []fsm.Message{{Role: "user", Content: "what time is it"}}}, contains: "Nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var atts []Attempt
			r, err := Offline{}.Complete(context.Background(), tc.req, func(a Attempt) { atts = append(atts, a) })
			if err != nil {
				t.Fatal(err)
			}
			if len(atts) != 1 || atts[0].Model != OfflineModelName || atts[0].Response == nil {
				t.Fatalf("attempts = %+v", atts)
			}
			if tc.tool != "" {
				if len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != tc.tool || r.Content != "" {
					t.Fatalf("response = %+v, want a call of %s", r, tc.tool)
				}
				if tc.args != "" && r.ToolCalls[0].Arguments != tc.args {
					t.Fatalf("arguments = %s, want %s", r.ToolCalls[0].Arguments, tc.args)
				}
				return
			}
			if len(r.ToolCalls) != 0 || !strings.Contains(r.Content, tc.contains) {
				t.Fatalf("response = %+v, want an answer containing %q", r, tc.contains)
			}
		})
	}
}

func TestOfflineIsDeterministic(t *testing.T) {
	req := Request{Tools: allTools, Messages: []fsm.Message{{Role: "user", Content: "what is the date"}}}
	a, _ := Offline{}.Complete(context.Background(), req, nil)
	b, _ := Offline{}.Complete(context.Background(), req, nil)
	if a.ToolCalls[0] != b.ToolCalls[0] || a.Usage != b.Usage {
		t.Fatalf("%+v != %+v", a, b)
	}
}
