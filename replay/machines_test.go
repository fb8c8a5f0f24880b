package replay

import (
	"context"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

func TestDiffMachines(t *testing.T) {
	ctx := context.Background()
	v0, _ := fsm.MachineFor(fsm.MachineRef{Name: fsm.MachineName, Version: 0})
	v1 := fsm.DefaultMachine()

	// A machine agrees with itself on every recorded task.
	evs := replaytest.Generate(7, replaytest.Config{Tasks: 10, Concurrency: 3, Finish: true})
	mem := mustMem(t, evs)
	tasks := 0
	for _, ev := range evs {
		if ev.Version != 1 || strings.HasPrefix(ev.Stream, "$") {
			continue
		}
		tasks++
		d, err := DiffMachines(ctx, mem, ev.Stream, v1, v1)
		if err != nil || !d.Same || d.Events == 0 {
			t.Fatalf("%s: %+v, %v", ev.Stream, d, err)
		}
	}
	if tasks < 10 {
		t.Fatalf("compared %d tasks", tasks)
	}

	// A version 0 task under version 1: the first state differs.
	log0 := mustMem(t, taskEvents(t,
		&fsm.TaskCreatedBody{Machine: fsm.MachineRef{Name: fsm.MachineName, Version: 0}},
		&fsm.PerceiveDoneBody{},
	))
	id := taskEvents(t, &fsm.TaskCreatedBody{})[0].Stream
	d, err := DiffMachines(ctx, log0, id, v0, v1)
	if err != nil || d.Same || d.Seq != 1 || d.Type != fsm.TaskCreated || d.Recorded.Version != 0 ||
		d.FromGot.State != fsm.StatePerceiving || d.ToGot.State != fsm.StateReasoning {
		t.Fatalf("diff = %+v, %v", d, err)
	}

	// An input left in idle and cancelled folds the same under both; an
	// event both refuse is agreement too.
	idle := mustMem(t, taskEvents(t,
		&fsm.Input{Kind: fsm.MessageReceived, Text: "hi"},
		&fsm.TaskSuspendedBody{Reason: "refused by both: idle is not active"},
		&fsm.TaskFailedBody{Reason: "cancelled"},
	))
	d, err = DiffMachines(ctx, idle, id, v0, v1)
	if err != nil || !d.Same || d.Events != 3 {
		t.Fatalf("diff = %+v, %v", d, err)
	}
	if _, err := DiffMachines(ctx, idle, "01JPAF8WNT0000000001FET0ZZ", v0, v1); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("unknown task: %v", err)
	}
}
