package main

import (
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
// broker retried the task (and handed it to the same worker) is answered
// as the first was, and records nothing.
func TestBrokerRepeatedFailAfterRetry(t *testing.T) {
	td := brokerDaemon(t)
	mustStatus(t, td.as("w", "PUT", "/api/v1/agents/w", `{}`), 200)
	task := dtask(t, td.as("c", "POST", "/api/v1/tasks", `{"title":"flaky"}`))
	if got := td.poll("w"); len(got) != 1 {
		t.Fatalf("poll: %+v", got)
	}
	const fail = `{"error":"connection refused","retry_eligible":true}`
	mustStatus(t, td.as("w", "POST", "/api/v1/tasks/"+task.TaskID+"/fail", fail), 200)
	got := td.poll("w")
	if len(got) != 1 || got[0].RetryCount != 1 {
		t.Fatalf("after the failure: %+v", got)
	}
	r := td.as("w", "POST", "/api/v1/tasks/"+task.TaskID+"/fail", fail)
	mustStatus(t, r, 200)
	if j := dtask(t, r); j.Version != got[0].Version || j.RetryCount != 1 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeated /fail: %s", r.body)
	}
}
