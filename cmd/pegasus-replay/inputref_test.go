package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

// TestStateReadsTheInputFromItsEvent: on a data directory whose task
// record refers to a large input in the log instead of copying it
// (projection layout 4), state prints the task with its whole input, read
// from the event that created it, and verify passes.
func TestStateReadsTheInputFromItsEvent(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	input := "marker " + strings.Repeat("a large input ", 5000)
	body, err := fsm.Encode(&fsm.Input{Kind: fsm.MessageReceived, Text: input, Source: "cli", TaskType: "general"})
	if err != nil {
		t.Fatal(err)
	}
	id := l.NewID()
	if _, err := l.Append(ctx, id.String(), eventlog.NoStream, eventlog.Event{
		ID: id, Type: string(fsm.MessageReceived), Correlation: id, Schema: fsm.SchemaVersion, Body: body,
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := replay.Open(ctx, l, nil); err != nil { // folds and checkpoints
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, termOpts{}, "-d", dir, "state", id.String(), "--json")
	var got struct {
		Task fsm.Task `json:"task"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil {
		t.Fatalf("state: exit %d %s", r.code, r.stderr)
	}
	if got.Task.Context.InputText != input {
		t.Fatalf("state printed %d bytes of input, want %d", len(got.Task.Context.InputText), len(input))
	}
	if r := runCLI(t, termOpts{}, "-d", dir, "verify"); r.code != 0 {
		t.Fatalf("verify: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
}
