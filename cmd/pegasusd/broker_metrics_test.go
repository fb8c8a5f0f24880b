package main

import (
	"context"
	"testing"
)

// TestBrokerMetrics: the broker's counters on /metrics follow its events.
// A task with one retry is assigned, fails, is retried, assigned again,
// fails into the DLQ and is requeued (to a drained worker, so that it is
// not assigned a third time).
func TestBrokerMetrics(t *testing.T) {
	td := brokerDaemon(t)
	mustStatus(t, td.as("w1", "PUT", "/api/v1/agents/w1", `{"max_tasks":1}`), 200)
	tk := dtask(t, td.as("client", "POST", "/api/v1/tasks", `{"title":"flaky","max_retries":1}`))
	for range 2 {
		if got := td.poll("w1"); len(got) != 1 || got[0].TaskID != tk.TaskID {
			t.Fatalf("w1 got %+v", got)
		}
		mustStatus(t, td.as("w1", "POST", "/api/v1/tasks/"+tk.TaskID+"/fail", `{"error":"flaky","retry_eligible":true}`), 200)
	}
	if dlq := td.waitDLQ(1); len(dlq) != 1 {
		t.Fatalf("dlq: %+v", dlq)
	}
	mustStatus(t, td.admin("POST", "/api/v1/agents/w1/drain", ""), 200)
	mustStatus(t, td.admin("POST", "/api/v1/dlq/"+tk.TaskID+"/requeue", ""), 200)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := td.d.engine.Metrics().WaitFor(ctx, td.d.engine.Log().Head()); err != nil {
		t.Fatal(err)
	}
	mfs := scrape(t, td.do("GET", "/metrics", ""))
	for name, want := range map[string]float64{
		"pegasus_broker_assignments_total": 2, "pegasus_broker_retries_total": 1, "pegasus_broker_timeouts_total": 0,
		"pegasus_broker_dead_letters_total": 1, "pegasus_broker_requeues_total": 1,
	} {
		if got, ok := value(mfs, name); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}
