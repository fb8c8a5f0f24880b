package engine

import (
	"context"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/fsm"
)

// TestStartStop: an engine at its defaults in a temporary directory runs a
// task with the offline model, serves its parts, reports no failure, and
// stops cleanly; the log it closed opens again with the task in it.
func TestStartStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	e, err := Start(ctx, &Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if e.Keys() != e.Log() || e.Appender() != e.Log() {
		t.Error("without Cluster, the log itself binds keys and takes appends")
	}
	if e.Broker() == nil || e.Metrics() == nil || e.View() == nil || e.ModelName() == "" {
		t.Fatal("a part is missing")
	}
	id, err := e.Agent().SubmitInput(ctx, agent.Input{Text: "what time is it?", Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := e.Agent().WaitUntil(ctx, id, agent.Done)
	if err != nil || task.State != fsm.StateCompleted {
		t.Fatalf("task = %s, %v", task.State, err)
	}
	select {
	case <-e.Failed():
		t.Fatalf("failed: %v", e.Err())
	default:
	}
	if e.Context().Err() != nil {
		t.Fatal("the base context ended before the stop")
	}
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if e.Context().Err() == nil || e.Err() != nil {
		t.Fatalf("after Stop: context %v, Err %v", e.Context().Err(), e.Err())
	}

	e, err = Start(ctx, &Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)
	if got, err := e.Agent().Task(id); err != nil || got.State != fsm.StateCompleted {
		t.Fatalf("after a restart: %s, %v", got.State, err)
	}
}
