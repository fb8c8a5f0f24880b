package main

import (
	"fmt"
	"github.com/pegasus-engine/pegasus/server"
	"path/filepath"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestBrokerCrash kills the daemon with SIGKILL while tasks are queued,
// assigned, in progress and done, restarts it, and checks: no task lost or
// duplicated (creates retried with their Idempotency-Key answer the same
// ids), deadlines of tasks assigned before the kill still fire, the worker
// finishes the rest, and verify is clean.
func TestBrokerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon binary")
	}
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	flags := []string{"--timeout-check-interval", "1s", "--admin-token", "admin-secret"}
	p := startProc(t, bin, data, flags...)
	td := &testDaemon{t: t, url: p.url}

	const silent, normal = 2, 10
	create := func(td *testDaemon) map[string]bool {
		ids := map[string]bool{}
		for i := range silent + normal {
			body := `{"title":"job","priority":1}`
			if i < silent { // assigned first, never reported on
				body = `{"title":"silent","priority":10,"timeout_seconds":1,"max_retries":0}`
			}
			r := td.as("client", "POST", "/api/v1/tasks", body, "Idempotency-Key", fmt.Sprintf("job-%d", i))
			if r.status != 201 {
				t.Fatalf("create %d: %d %s", i, r.status, r.body)
			}
			ids[dtask(t, r).TaskID] = i < silent
		}
		return ids
	}
	ids := create(td)
	mustStatus(t, td.as("w", "PUT", "/api/v1/agents/w", `{"max_tasks":4}`), 200)
	var got []server.DispatchJSON
	for range 50 { // the long poll answers at the first assignment; the others follow
		if got = td.poll("w"); len(got) >= 4 {
			break
		}
	}
	if len(got) != 4 {
		t.Fatalf("w got %d tasks, want 4 (max_tasks)", len(got))
	}
	reported := 0
	for _, j := range got {
		if ids[j.TaskID] {
			continue
		}
		if reported == 0 {
			mustStatus(t, td.as("w", "POST", "/api/v1/tasks/"+j.TaskID+"/complete", `{"result":{"ok":true}}`), 200)
		} else {
			mustStatus(t, td.as("w", "POST", "/api/v1/tasks/"+j.TaskID+"/progress", `{"message":"half"}`), 200)
		}
		reported++
	}
	p.kill(t)

	p = startProc(t, bin, data, flags...)
	td = &testDaemon{t: t, url: p.url}
	if again := create(td); len(again) != len(ids) {
		t.Fatalf("after the restart the same keys gave %d tasks, before %d", len(again), len(ids))
	} else {
		for id := range again {
			if _, ok := ids[id]; !ok {
				t.Fatalf("a retried create made a new task %s", id)
			}
		}
	}
	// The worker comes back and finishes every job it gets; it never
	// reports on the silent ones, whose deadlines fire.
	finished := func() bool {
		tasks := td.dispatchTasks("w", "limit=1000")
		n := 0
		for _, j := range tasks {
			if j.Status == "completed" || j.DeadLettered {
				n++
			}
		}
		if testing.Verbose() {
			var st []string
			for _, j := range tasks {
				st = append(st, fmt.Sprintf("%s/%s/%v", j.Status, j.AssignedAgent, j.DeadLettered))
			}
			t.Logf("%v", st)
		}
		return n == len(ids) && len(tasks) == len(ids)
	}
	for range 100 {
		if finished() {
			break
		}
		for _, j := range td.poll("w") {
			if !ids[j.TaskID] {
				mustStatus(t, td.as("w", "POST", "/api/v1/tasks/"+j.TaskID+"/complete", `{"result":{"ok":true}}`), 200)
			}
		}
		// An in-progress job from before the kill: the worker completes it too.
		for _, j := range td.dispatchTasks("w", "agent=w&status=in_progress") {
			mustStatus(t, td.as("w", "POST", "/api/v1/tasks/"+j.TaskID+"/complete", `{"result":{"ok":true}}`), 200)
		}
		// The silent tasks' deadlines (1 s) fire on the daemon's clock:
		// wait for a timed-out task (the long poll answers at once then).
		td.as("w", "GET", "/api/v1/tasks?status=timed_out&wait=2s", "")
	}
	if !finished() {
		r := td.as("w", "GET", "/api/v1/tasks?limit=1000", "")
		t.Fatalf("the tasks never all finished after the restart: %s\n%s", r.body, p.output())
	}
	p.stop(t)

	_, v := openVerified(t, data)
	for id, isSilent := range ids {
		task, err := v.Task(id)
		if err != nil {
			t.Fatalf("task %s lost: %v", id, err)
		}
		switch {
		case isSilent && (task.State != fsm.StateTimedOut || !task.IsDeadLetter()):
			t.Errorf("silent task %s: %s dead_lettered=%v", id, task.State, task.IsDeadLetter())
		case !isSilent && task.State != fsm.StateCompleted:
			t.Errorf("task %s: %s", id, task.State)
		}
	}
}
