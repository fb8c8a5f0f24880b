package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/replay"
)

// completionCommand prints a shell completion script. The scripts ask the
// binary itself for candidates (urfave/cli's --generate-bash-completion), so
// they complete commands, flags and, for commands that take a task, the task
// ids of the configured source.
func completionCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash or zsh)",
		ArgsUsage: "bash|zsh",
		Description: "Load it in the current shell:\n\n" +
			"   source <(pegasus-replay completion bash)\n" +
			"   source <(pegasus-replay completion zsh)\n\n" +
			"or install it: pegasus-replay completion bash > /etc/bash_completion.d/pegasus-replay",
		BashComplete: func(c *cli.Context) {
			fmt.Fprintln(c.App.Writer, "bash")
			fmt.Fprintln(c.App.Writer, "zsh")
		},
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, "bash|zsh"); err != nil {
				return err
			}
			script, err := cliconv.CompletionScript("pegasus-replay", c.Args().First())
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(std.out, script)
			return err
		},
	}
}

// completeTaskIDs completes a TASK argument with the ids of the newest tasks
// of the configured source (if any is configured and readable; completion
// never prints errors). Flags are completed as usual.
func completeTaskIDs(std *stdio) cli.BashCompleteFunc {
	return func(c *cli.Context) {
		if c.NArg() > 0 {
			return // the task is already given
		}
		g := readGlobals(c)
		if g.dataDir == "" && g.file == "" { // never hit a server on <TAB>
			cli.DefaultCompleteWithFlags(c.Command)(c)
			return
		}
		quiet := *std
		quiet.errTTY = false
		src, err := openSource(c.Context, &quiet, g)
		if err != nil {
			return
		}
		defer src.Close()
		v, err := src.view(c.Context, &quiet)
		if err != nil {
			return
		}
		page, err := v.Tasks(c.Context, replay.Query{Limit: 200, Desc: true})
		if err != nil {
			return
		}
		for _, t := range page.Tasks {
			fmt.Fprintln(c.App.Writer, t.ID)
		}
	}
}
