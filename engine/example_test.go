package engine_test

import (
	"context"
	"fmt"
	"os"

	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/fsm"
)

// An engine in a temporary directory with the offline demo model, used
// from Go without HTTP: a task submitted to its agent, waited for, then
// the engine stopped (which drains the agent and closes the log).
func ExampleStart() {
	dir, err := os.MkdirTemp("", "pegasus-engine-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	e, err := engine.Start(ctx, &engine.Options{DataDir: dir})
	if err != nil {
		panic(err)
	}
	id, err := e.Agent().Submit(ctx, "what time is it?", "example", "general")
	if err != nil {
		panic(err)
	}
	t, err := e.Agent().WaitUntil(ctx, id, func(t *fsm.Task) bool { return t.State.IsTerminal() })
	if err != nil {
		panic(err)
	}
	fmt.Println(t.State)
	e.StopSchedules()
	e.Cancel()
	if err := e.Stop(ctx); err != nil {
		panic(err)
	}
	// Output: completed
}
