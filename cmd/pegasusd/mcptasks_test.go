package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/internal/mcptest"
)

// The durable MCP task tests run agent/mcp/testdata/taskserver, an MCP
// server built with the SDK whose tool work answers with a task of the
// 2026-07-28 tasks extension and keeps its tasks in a directory (a new
// process of it knows them); its files there say what it was asked:
// "created" (a line per task), "polls" (a line per tasks/get), "cancels"
// (a line per tasks/cancel). A task completes once the file "release"
// exists.

// eventuallyTrue polls cond (the daemon and the server are processes)
// until it holds or the test's timeout passes.
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// taskServerConfig declares the task server as the MCP server "tasks":
// over stdio (a process of the daemon's) or over Streamable HTTP (a
// process of the test's, which keeps running while the daemon restarts).
func taskServerConfig(t *testing.T, transport, dir string) string {
	t.Helper()
	bin := goBuild(t, "taskserver", "../../agent/mcp/testdata/taskserver")
	if transport == "stdio" {
		return fmt.Sprintf("mcpServers:\n  tasks:\n    command: %q\n    args: [-dir, %q]\n", bin, dir)
	}
	addr := mcptest.TaskServerHTTP(t, bin, dir)
	return fmt.Sprintf("mcpServers:\n  tasks:\n    url: http://%s/mcp\n", addr)
}

// toolEvents are the task's tool call events, their data decoded.
func (r *toolRig) toolEvents(id string) (started, completed, failed []map[string]any) {
	r.t.Helper()
	for _, e := range r.events(id) {
		var d map[string]any
		switch e.Type {
		case "TOOL_CALL_STARTED", "TOOL_CALL_COMPLETED", "TOOL_CALL_FAILED":
			if err := json.Unmarshal(e.Data, &d); err != nil {
				r.t.Fatal(err)
			}
		}
		switch e.Type {
		case "TOOL_CALL_STARTED":
			started = append(started, d)
		case "TOOL_CALL_COMPLETED":
			completed = append(completed, d)
		case "TOOL_CALL_FAILED":
			failed = append(failed, d)
		}
	}
	return started, completed, failed
}

// recordedHandle is the handle a TOOL_CALL_STARTED of the task recorded,
// "" for none yet.
func (r *toolRig) recordedHandle(id string) string {
	started, _, _ := r.toolEvents(id)
	for _, s := range started {
		if h, _ := s["handle"].(string); h != "" {
			return h
		}
	}
	return ""
}

// TestMCPTaskSurvivesKill9: the daemon is killed (SIGKILL) while an MCP
// call waits on the durable task its server answered with. After the
// restart the call is not sent again (the server created one task), the
// daemon polls the recorded handle, and once the task completes the tool
// call completes once and the agent task ends once; verify is clean. Over
// stdio the server's process dies with the daemon and a new one, started
// by the new daemon, finds the task in its directory; over Streamable
// HTTP the server keeps running. In the "stopped" case the daemon stops
// gracefully instead (SIGINT, a short --shutdown-timeout that the waiting
// call outlives): the call it cancels at stop must leave its task on the
// server (no tasks/cancel), and the restarted daemon resumes it alike.
func TestMCPTaskSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	for _, c := range []struct {
		name, transport string
		graceful        bool
	}{{"stdio", "stdio", false}, {"http", "http", false}, {"http-stopped", "http", true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			model := startScriptedModel(t, "scripted-1", 0)
			var extra []string
			if c.graceful {
				extra = []string{"--shutdown-timeout", "500ms"}
			}
			r := startRig(t, modelConfig(model)+taskServerConfig(t, c.transport, dir), extra...)
			r.waitServers(map[string]string{"tasks": "ok"})

			id := r.submit(`call tasks__work {}`)
			var handle string
			eventuallyTrue(t, "the task's handle to be recorded", func() bool { handle = r.recordedHandle(id); return handle != "" })
			eventuallyTrue(t, "the daemon to poll the task", func() bool { return len(mcptest.TaskServerLines(t, dir, "polls")) > 0 })
			if c.graceful {
				r.p.stop(t)
			} else {
				r.p.kill(t)
			}
			before := len(mcptest.TaskServerLines(t, dir, "polls"))

			r.restart()
			eventuallyTrue(t, "the restarted daemon to poll the task", func() bool { return len(mcptest.TaskServerLines(t, dir, "polls")) > before })
			mcptest.ReleaseTasks(t, dir)
			task := r.wait(id)
			started, completed, failed := r.toolEvents(id)
			key, _ := started[0]["idempotency_key"].(string)
			if want := fmt.Sprintf("done %s key=%s", handle, key); task.State != api.StateCompleted || task.Result != want || key == "" {
				t.Errorf("task %s %q, want completed %q", task.State, task.Result, want)
			}
			// Two TOOL_CALL_STARTED of the one step: the call began and it
			// recorded the handle (the restarted daemon resumed it from
			// that one); then one completion.
			if len(started) != 2 || started[0]["handle"] != nil || started[1]["handle"] != handle ||
				started[1]["idempotency_key"] != key || len(completed) != 1 || len(failed) != 0 {
				t.Errorf("tool call events: started %v, completed %v, failed %v", started, completed, failed)
			}
			if created := mcptest.TaskServerLines(t, dir, "created"); len(created) != 1 || created[0] != handle+" "+key {
				t.Errorf("tasks created: %q, want one: %s %s", created, handle, key)
			}
			for _, p := range mcptest.TaskServerLines(t, dir, "polls") {
				if p != handle {
					t.Errorf("polled %s, want only %s", p, handle)
				}
			}
			if c := mcptest.TaskServerLines(t, dir, "cancels"); len(c) != 0 {
				t.Errorf("tasks cancelled: %q", c)
			}
			r.p.stop(t)
			checkLog(t, r.data, map[string]bool{id: true})
			r.replayCmd("--data-dir", r.data, "verify")
		})
	}
}

// TestMCPTaskCancelled: cancelling an agent task whose MCP call waits on
// a durable task sends tasks/cancel for it; the server sees it.
func TestMCPTaskCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	dir := t.TempDir()
	model := startScriptedModel(t, "scripted-1", 0)
	r := startRig(t, modelConfig(model)+taskServerConfig(t, "http", dir))
	r.waitServers(map[string]string{"tasks": "ok"})

	id := r.submit(`call tasks__work {}`)
	var handle string
	eventuallyTrue(t, "the task's handle to be recorded", func() bool { handle = r.recordedHandle(id); return handle != "" })
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := r.c.Cancel(ctx, id, "no longer needed"); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, "the server to see tasks/cancel", func() bool { return len(mcptest.TaskServerLines(t, dir, "cancels")) > 0 })
	if c := mcptest.TaskServerLines(t, dir, "cancels"); len(c) != 1 || c[0] != handle {
		t.Errorf("tasks cancelled: %q, want %s", c, handle)
	}
	if task := r.wait(id); task.State != api.StateFailed {
		t.Errorf("task %s, want failed (cancelled)", task.State)
	}
	r.stopAndVerify()
}
