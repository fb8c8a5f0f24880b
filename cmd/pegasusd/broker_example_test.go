package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestExampleWorker runs examples/worker against a real daemon: it
// registers, long-polls, reports progress and completes or fails tasks.
func TestExampleWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example")
	}
	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/worker").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	td := brokerDaemon(t)
	ok1 := dtask(t, td.as("c", "POST", "/api/v1/tasks", `{"title":"resize a.png","required_capabilities":["image"]}`))
	ok2 := dtask(t, td.as("c", "POST", "/api/v1/tasks", `{"title":"resize b.png","required_capabilities":["IMAGE"]}`))
	bad := dtask(t, td.as("c", "POST", "/api/v1/tasks", `{"title":"resize c.png","metadata":{"fail":"corrupt file","retryable":"false"}}`))
	out, err := exec.Command(bin, "--url", td.url, "--id", "resizer", "--caps", "image,resize", "--stop-after", "3").CombinedOutput()
	if err != nil {
		t.Fatalf("worker: %v\n%s", err, out)
	}
	for _, id := range []string{ok1.TaskID, ok2.TaskID} {
		if j := dtask(t, td.as("c", "GET", "/api/v1/tasks/"+id, "")); j.Status != "completed" || string(j.Result) != `{"title":"`+j.Title+`","worker":"resizer"}` {
			t.Fatalf("%s: %s %s", id, j.Status, j.Result)
		}
	}
	for range 50 { // the broker dead-letters the failure right after it
		j := dtask(t, td.as("c", "GET", "/api/v1/tasks/"+bad.TaskID, ""))
		if j.DeadLettered {
			if j.Status != "failed" || j.Error != "corrupt file" || j.DeadLetterReason != "not_retry_eligible" {
				t.Fatalf("dead letter: %+v", j)
			}
			return
		}
		td.as("c", "GET", "/api/v1/tasks?status=failed&owner=nobody&wait=100ms", "")
	}
	t.Fatalf("the failed task never reached the DLQ\n%s", out)
}
