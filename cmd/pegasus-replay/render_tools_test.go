package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/pegasus-engine/pegasus/replay"
)

// TestToolCallSummary: show, why and tail write where a tool call ran
// (an MCP server, a worker's capability and its broker task, a Go tool),
// an MCP task's handle and a result's parts, from the events' bodies; a
// built-in tool's call, and an event of a log from before those fields,
// reads as it always did. The cases are the dashboard's too
// (dashboard/testdata/tool-summaries.json): the task page writes the
// same.
func TestToolCallSummary(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("..", "..", "dashboard", "testdata", "tool-summaries.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name, Type, Summary, Want string
		Data                      json.RawMessage
	}
	if err := json.Unmarshal(in, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		data := c.Data
		if string(data) == "null" {
			data = nil
		}
		j := replay.EventJSON{Type: c.Type, Summary: c.Summary, Data: data}
		if got := eventSummary(j); got != c.Want {
			t.Errorf("%s: %q, want %q", c.Name, got, c.Want)
		}
	}
}
