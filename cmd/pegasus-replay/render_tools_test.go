package main

import (
	"encoding/json"
	"testing"

	"github.com/pegasus-engine/pegasus/replay"
)

// TestToolCallSummary: show, why and tail write where a tool call ran
// (an MCP server, a worker's capability and its broker task, a Go tool),
// an MCP task's handle and a result's parts, from the events' bodies; a
// built-in tool's call, and an event of a log from before those fields,
// reads as it always did.
func TestToolCallSummary(t *testing.T) {
	for _, c := range []struct {
		name, typ, summary, data, want string
	}{
		{"mcp started", "TOOL_CALL_STARTED", "step=0 tool=everything__echo key=K/call_1",
			`{"tool":"everything__echo","source":"mcp:everything","handle":"task-7"}`,
			"step=0 tool=everything__echo key=K/call_1 source=mcp:everything handle=task-7"},
		{"mcp result with parts", "TOOL_CALL_COMPLETED", "step=0 tool=everything__image ok",
			`{"source":"mcp:everything","parts":[{"type":"image","mime_type":"image/png"},{"type":"resource","truncated":true}]}`,
			"step=0 tool=everything__image ok source=mcp:everything parts=image,resource(truncated)"},
		{"worker", "TOOL_CALL_FAILED", "step=1 tool=shout error=dead-lettered",
			`{"source":"worker:shout","task":"01JPAGD75M0000000001FET00Y"}`,
			"step=1 tool=shout error=dead-lettered source=worker:shout task=01JPAGD75M0000000001FET00Y"},
		{"go", "TOOL_CALL_COMPLETED", "step=0 tool=lookup ok", `{"source":"go"}`, "step=0 tool=lookup ok source=go"},
		{"built in", "TOOL_CALL_COMPLETED", "step=0 tool=notify ok", `{"source":"builtin"}`, "step=0 tool=notify ok"},
		{"before sources", "TOOL_CALL_STARTED", "step=0 tool=memory_read key=K/call_1", `{"tool":"memory_read"}`, "step=0 tool=memory_read key=K/call_1"},
		{"said already", "TOOL_CALL_STARTED", "step=0 tool=x source=mcp:a", `{"source":"mcp:a"}`, "step=0 tool=x source=mcp:a"},
		{"not a tool call", "TASK_CREATED", "type=general", `{"source":"api"}`, "type=general"},
		{"no body", "TOOL_CALL_STARTED", "", ``, ""},
	} {
		j := replay.EventJSON{Type: c.typ, Summary: c.summary, Data: json.RawMessage(c.data)}
		if got := eventSummary(j); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
