package agent

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/internal/syncbuf"
)

// logRecords returns the JSON log records with message msg.
func logRecords(t *testing.T, logs, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(logs, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestLifecycleLogLines: a task's life is one debug line per submission
// and admission and one info line at its end (with duration or reason),
// and each failed model attempt is a warning, all with the task's id as a
// typed attribute.
func TestLifecycleLogLines(t *testing.T) {
	var buf syncbuf.Buffer
	fake := newFakeModel(t, func(*chatReq) reply { return reply{status: 500, content: "the model is down"} })
	model := fake.client(t, func(o *llm.Options) { o.MaxAttempts = 3 })
	h := newHarness(t, Options{Model: llm.Offline{}, Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	ok := h.submit("what time is it?")
	h.wait(ok)
	h.stop()
	h.opts.Model = model
	h.start()
	bad := h.submit("what time is it?")
	h.wait(bad)
	h.stop() // the lines are written beside the fold: stopping writes them all
	logs := buf.String()

	for _, id := range []string{ok, bad} {
		for _, msg := range []string{"task submitted", "task admitted"} {
			if recs := filterTask(logRecords(t, logs, msg), id); len(recs) != 1 || recs[0]["level"] != "DEBUG" {
				t.Errorf("%s %s: %v", msg, id, recs)
			}
		}
	}
	done := filterTask(logRecords(t, logs, "task completed"), ok)
	if len(done) != 1 || done[0]["level"] != "INFO" || done[0]["machine"] != "pegasus.task@1" || done[0]["duration"] == nil {
		t.Errorf("task completed: %v", done)
	}
	failed := filterTask(logRecords(t, logs, "task failed"), bad)
	if len(failed) != 1 || failed[0]["level"] != "INFO" || failed[0]["reason"] == "" || !strings.Contains(failed[0]["error"].(string), "the model is down") {
		t.Errorf("task failed: %v", failed)
	}
	attempts := filterTask(logRecords(t, logs, "model call attempt failed"), bad)
	if len(attempts) != 3 || attempts[0]["level"] != "WARN" || attempts[0]["will_retry"] != true || attempts[2]["will_retry"] != false {
		t.Errorf("model call attempts: %v", attempts)
	}
	if strings.Contains(logs, "sk-fake-key") {
		t.Error("the API key is in the log")
	}
}

func filterTask(recs []map[string]any, id string) []map[string]any {
	var out []map[string]any
	for _, r := range recs {
		if r["task_id"] == id {
			out = append(out, r)
		}
	}
	return out
}
