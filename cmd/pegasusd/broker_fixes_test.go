package main

import (
	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/server"
	"testing"
	"time"
)

// TestBrokerKeyedDelayedCreate: a keyed create with delay_seconds sent
// again answers the task the key created (its run_at counts from the task
// id's time, not from each request's arrival); the same key with another
// delay is another request, refused.
func TestBrokerKeyedDelayedCreate(t *testing.T) {
	td := brokerDaemon(t)
	const body = `{"title":"later","delay_seconds":60}`
	first := td.as("mike", "POST", "/api/v1/tasks", body, "Idempotency-Key", "delayed-1")
	mustStatus(t, first, 201)
	a := dtask(t, first)
	if a.RunAt.Sub(a.CreatedAt).Round(100*time.Millisecond) != time.Minute {
		t.Fatalf("run_at %s, created %s: want a minute later", a.RunAt, a.CreatedAt)
	}
	again := td.as("mike", "POST", "/api/v1/tasks", body, "Idempotency-Key", "delayed-1")
	mustStatus(t, again, 201)
	if b := dtask(t, again); b.TaskID != a.TaskID || !b.RunAt.Equal(a.RunAt) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("sent again: %s run_at %s (first %s run_at %s)", b.TaskID, b.RunAt, a.TaskID, a.RunAt)
	}
	if r := td.as("mike", "POST", "/api/v1/tasks", `{"title":"later","delay_seconds":61}`, "Idempotency-Key", "delayed-1"); r.status != 409 {
		t.Fatalf("another delay under the key: %d %s", r.status, r.body)
	}
}

// TestBrokerRepeatedFailAfterRetry: the same /fail sent again after the
// broker retried the task (waiting in the queue: its worker is drained)
// is answered as the first was, and records nothing.
func TestBrokerRepeatedFailAfterRetry(t *testing.T) {
	td := brokerDaemon(t)
	mustStatus(t, td.as("w", "PUT", "/api/v1/agents/w", `{}`), 200)
	task := dtask(t, td.as("c", "POST", "/api/v1/tasks", `{"title":"flaky"}`))
	if got := td.poll("w"); len(got) != 1 {
		t.Fatalf("poll: %+v", got)
	}
	mustStatus(t, td.admin("POST", "/api/v1/agents/w/drain", ""), 200)
	const fail = `{"error":"connection refused","retry_eligible":true}`
	mustStatus(t, td.as("w", "POST", "/api/v1/tasks/"+task.TaskID+"/fail", fail), 200)
	var queued server.DispatchJSON
	for range 50 {
		if queued = dtask(t, td.as("c", "GET", "/api/v1/tasks/"+task.TaskID, "")); queued.RetryCount == 1 {
			break
		}
		td.as("c", "GET", "/api/v1/tasks?agent=nobody&wait=100ms", "")
	}
	if queued.Status != "pending" || queued.RetryCount != 1 {
		t.Fatalf("after the failure: %+v", queued)
	}
	r := td.as("w", "POST", "/api/v1/tasks/"+task.TaskID+"/fail", fail)
	mustStatus(t, r, 200)
	if j := dtask(t, r); j.Version != queued.Version || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeated /fail: %s", r.body)
	}
}

// TestBrokerAgentToken: with --agent-token, the worker routes (register,
// poll, progress, complete, fail) refuse a request without it (401 in the
// error envelope, nothing recorded) and take it, or the admin token; the
// client routes (create, list, get) do not ask for it.
func TestBrokerAgentToken(t *testing.T) {
	cfg := testConfig(t)
	cfg.server.AdminToken, cfg.server.AgentToken = "admin-secret", "agent-secret"
	td := startDaemon(t, cfg)
	agent := []string{"Authorization", "Bearer agent-secret"}
	refused := func(r response) {
		t.Helper()
		if r.status != 401 || r.errorCode(t) != api.CodeUnauthorized {
			t.Fatalf("want 401 unauthorized: %d %s", r.status, r.body)
		}
	}
	refused(td.as("w", "PUT", "/api/v1/agents/w", `{}`))
	refused(td.as("w", "PUT", "/api/v1/agents/w", `{}`, "Authorization", "Bearer wrong"))
	mustStatus(t, td.as("w", "PUT", "/api/v1/agents/w", `{}`, agent...), 200)
	mustStatus(t, td.as("ops", "PUT", "/api/v1/agents/w2", `{}`, "Authorization", "Bearer admin-secret"), 200)

	task := dtask(t, td.as("c", "POST", "/api/v1/tasks", `{"title":"x"}`)) // a client's routes need no agent token
	mustStatus(t, td.as("c", "GET", "/api/v1/tasks", ""), 200)
	mustStatus(t, td.as("c", "GET", "/api/v1/tasks/"+task.TaskID, ""), 200)
	refused(td.as("w", "GET", "/api/v1/tasks?agent=w&status=assigned", ""))
	refused(td.as("w", "GET", "/api/v1/tasks?wait=1s", ""))
	var page struct {
		Tasks []server.DispatchJSON `json:"tasks"`
	}
	td.as("w", "GET", "/api/v1/tasks?agent=w&status=assigned&wait=20s", "", agent...).json(t, &page)
	if len(page.Tasks) != 1 {
		t.Fatalf("poll with the token: %+v", page)
	}
	w := page.Tasks[0].AssignedAgent
	for _, path := range []string{"/progress", "/complete", "/fail"} {
		refused(td.as(w, "POST", "/api/v1/tasks/"+task.TaskID+path, `{"error":"e"}`))
	}
	if j := dtask(t, td.as("c", "GET", "/api/v1/tasks/"+task.TaskID, "")); j.Version != page.Tasks[0].Version {
		t.Fatal("a refused report changed the task")
	}
	mustStatus(t, td.as(w, "POST", "/api/v1/tasks/"+task.TaskID+"/progress", `{"message":"m"}`, agent...), 200)
	done := dtask(t, td.as(w, "POST", "/api/v1/tasks/"+task.TaskID+"/complete", `{"result":{}}`, agent...))
	if done.Status != "completed" {
		t.Fatalf("complete with the token: %+v", done)
	}
}
