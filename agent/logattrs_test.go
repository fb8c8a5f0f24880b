package agent

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/syncbuf"
)

// TestLogLinesCarryTaskAttributes: a log line about a task's event has
// task_id, machine and event_id as attributes of their own.
func TestLogLinesCarryTaskAttributes(t *testing.T) {
	var buf syncbuf.Buffer
	h := newHarness(t, Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	id := h.submit("what time is it?")
	h.wait(id)
	// An event the machine refuses for a completed task: the fold logs it.
	data, err := fsm.Encode(&fsm.TaskResumedBody{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.log.Append(testCtx(t), id, eventlog.Any, eventlog.Event{Type: string(fsm.TaskResumed), Schema: fsm.SchemaVersion, Body: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.a.watch.waitHooked(testCtx(t), res.LastSeq); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "fold refused an event" {
			continue
		}
		if rec["task_id"] != id || rec["machine"] != "pegasus.task@1" || rec["event_id"] != res.Events[0].ID.String() {
			t.Errorf("attributes: %v", rec)
		}
		return
	}
	t.Fatalf("no line about the refused event in:\n%s", buf.String())
}
