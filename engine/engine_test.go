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
	if ta, ok := e.Appender().(*timedAppender); e.Keys() != e.Log() || !ok || ta.a != e.Log() {
		t.Error("without Cluster, the log itself binds keys and takes appends (timed)")
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
	checkStages(t, e)
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

// checkStages: the task's appends were timed, and the storage engine's
// series are registered.
func checkStages(t *testing.T, e *Engine) {
	t.Helper()
	mfs, err := e.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if mf.GetName() != "pegasus_task_stage_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == "append" && m.GetHistogram().GetSampleCount() == 0 {
				t.Error("no append timed after a task")
			}
		}
	}
	for _, name := range []string{"pegasus_task_stage_duration_seconds", "pegasus_eventlog_write_stall_duration_seconds",
		"pegasus_eventlog_flush_duration_seconds", "pegasus_eventlog_compaction_duration_seconds"} {
		if !got[name] {
			t.Errorf("no %s", name)
		}
	}
}
