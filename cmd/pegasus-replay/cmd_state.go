package main

import (
	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

func stateCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "state",
		Usage:     "print the whole task (context, plan, history) as it was at a point",
		ArgsUsage: "TASK",
		Description: "Folds the task up to --at and prints it the way the fsm tests print it (fsm.Describe):\n" +
			"state, input, reasoning, plan ([x] done, > current), actions, messages, pending tool call,\n" +
			"suspension, result, error, reflection and history. Without --at: the task now.\n\n" +
			"   pegasus-replay -d ./pegasus-data state 01JD3Q0W6Y8M3V7Q9K2T5N4B1C --at 41\n" +
			"   pegasus-replay -d ./pegasus-data state 01JD3Q0W6Y8M3V7Q9K2T5N4B1C --at 01JD3Q0X2Q7J0Z8YB1W5C4F3DA\n" +
			"   pegasus-replay -d ./pegasus-data state 01JD3Q0W6Y8M3V7Q9K2T5N4B1C --at 2026-01-02T15:04:05Z",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "at", EnvVars: env("state", "at"),
				Usage: "the point: a global sequence `SEQ`, an EVENT_ID or an RFC 3339 TIME (inclusive)"},
		},
		BashComplete: completeTaskIDs(std),
		Action: func(c *cli.Context) error {
			src, id, b, g, err := openTaskAt(c, std)
			if err != nil {
				return err
			}
			defer src.Close()
			t, err := replay.StateAt(c.Context, src.reader, id, b)
			if err != nil {
				return taskErr(c.Context, src.reader, id, b, err)
			}
			p := newPrinter(std, g)
			if p.json {
				return p.JSON(stateJSON{TaskID: t.ID, At: b.String(), Task: t})
			}
			p.Printf("as of %s\n", b)
			p.Printf("%s", fsm.Describe(t))
			return nil
		},
	}
}

// stateJSON is the --json output of state: the fsm.Task with its JSON tags.
type stateJSON struct {
	TaskID string   `json:"task_id"`
	At     string   `json:"at"`
	Task   fsm.Task `json:"task"`
}
