package main

import (
	"fmt"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

func diffMachinesCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "diff-machines",
		Usage:     "fold recorded tasks through two machine versions and show where they first disagree",
		ArgsUsage: "[TASK...]",
		Description: "Each task's recorded events are folded twice, through --from and through --to, each as if\n" +
			"the task had been created under it, without re-running the model or the tools. For each task\n" +
			"it prints \"same\", or the first event where the two disagree: the state each machine moves\n" +
			"the task to, or that one refuses the event. With no TASK, every task of the source.\n\n" +
			"   pegasus-replay -d ./pegasus-data diff-machines --from pegasus.task@0 --to pegasus.task@1\n" +
			"   pegasus-replay -d ./pegasus-data diff-machines --from pegasus.task@0 --to pegasus.task@1 01JD3Q0W6Y8M3V7Q9K2T5N4B1C",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Required: true, EnvVars: env("diff-machines", "from"), Usage: "the first machine, `NAME@VERSION` (pegasus.task@0)"},
			&cli.StringFlag{Name: "to", Required: true, EnvVars: env("diff-machines", "to"), Usage: "the second machine, `NAME@VERSION` (pegasus.task@1)"},
		},
		BashComplete: completeTaskIDs(std),
		Action: func(c *cli.Context) error {
			from, err := machineFlag(c, "from")
			if err != nil {
				return err
			}
			to, err := machineFlag(c, "to")
			if err != nil {
				return err
			}
			g := readGlobals(c)
			src, err := openSource(c.Context, std, g)
			if err != nil {
				return err
			}
			defer src.Close()
			var ids []string
			for _, a := range c.Args().Slice() {
				ids = append(ids, parseTaskID(a))
			}
			if len(ids) == 0 {
				if ids, err = allTaskIDs(c, std, src); err != nil {
					return err
				}
			}
			diffs := make([]replay.MachineDiff, 0, len(ids))
			for _, id := range ids {
				d, err := replay.DiffMachines(c.Context, src.reader, id, from, to)
				if err != nil {
					return taskErr(c.Context, src.reader, id, replay.Bound{}, err)
				}
				diffs = append(diffs, d)
			}
			p := newPrinter(std, g)
			if p.json {
				return p.JSON(diffs)
			}
			return printDiffs(p, diffs, from.Ref(), to.Ref())
		},
	}
}

func machineFlag(c *cli.Context, name string) (fsm.Machine, error) {
	ref, err := fsm.ParseMachineRef(c.String(name))
	if err != nil {
		return nil, usagef("--%s: %v", name, err)
	}
	m, _ := fsm.MachineFor(ref)
	return m, nil
}

// allTaskIDs lists every task of the source, oldest first.
func allTaskIDs(c *cli.Context, std *stdio, src *source) ([]string, error) {
	v, err := src.view(c.Context, std)
	if err != nil {
		return nil, err
	}
	var ids []string
	q := replay.Query{Limit: replay.MaxLimit}
	for {
		page, err := v.Tasks(c.Context, q)
		if err != nil {
			return nil, err
		}
		for _, s := range page.Tasks {
			ids = append(ids, s.ID)
		}
		if page.Next == "" {
			return ids, nil
		}
		q.Cursor = page.Next
	}
}

func printDiffs(p *printer, diffs []replay.MachineDiff, from, to fsm.MachineRef) error {
	if len(diffs) == 0 {
		p.Printf("no tasks\n")
		return nil
	}
	t := newTable("TASK", "RECORDED", "COMPARED", "FIRST DIFFERENCE")
	for _, d := range diffs {
		first := "same"
		if !d.Same {
			first = fmt.Sprintf("seq %d v%d %s: %s %s; %s %s", d.Seq, d.Version, d.Type, from, d.FromGot, to, d.ToGot)
		}
		t.row(d.TaskID, d.Recorded.String(), strconv.Itoa(d.Events), first)
	}
	return t.print(p)
}
