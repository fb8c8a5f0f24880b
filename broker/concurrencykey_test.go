package broker

import (
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestAgentWorkerConcurrencyKey: a broker task's concurrency key is its
// task's, and the agent task an agent worker runs for it has the same.
func TestAgentWorkerConcurrencyKey(t *testing.T) {
	h := newHarness(t)
	h.runAgentWorker(h.b)
	h.waitWorker(AgentWorkerID)
	body, err := createdBody(ulid.Make(), &CreateRequest{AgentID: "alice", Title: "plan the trip",
		RequiredCapabilities: []string{"Plan"}, ConcurrencyKey: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	task := h.createBody(body)
	if task.ConcurrencyKey != "acme" {
		t.Fatalf("broker task key %q", task.ConcurrencyKey)
	}
	child := h.waitChildren(h.b, task.ID, 1)[0]
	if child.ConcurrencyKey != "acme" {
		t.Fatalf("child: %s", fsm.Describe(child))
	}
	long := make([]byte, fsm.MaxConcurrencyKey+1)
	for i := range long {
		long[i] = 'k'
	}
	if _, err := h.b.Create(h.ctx, ulid.ULID{}, CreateRequest{AgentID: "alice", Title: "x", ConcurrencyKey: string(long)}); err == nil {
		t.Fatal("a key too long was accepted")
	}
}
