package main

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

// Exit codes: the one table both programs share (internal/cliconv,
// docs/cli.md). Deep code returns errors; run maps them here, and only here.
const (
	exitOK        = cliconv.ExitOK
	exitError     = cliconv.ExitFailed      // anything that went wrong: a bad flag value, an error answer, ...
	exitUsage     = cliconv.ExitUsage       // the command line itself is wrong
	exitNotFound  = cliconv.ExitNotFound    // no such task
	exitDown      = cliconv.ExitUnavailable // the daemon cannot be reached
	exitFailed    = cliconv.ExitTaskFailed  // submit, task --follow: the task failed
	exitNeedInput = cliconv.ExitNeedsInput  // submit: the task waits for an answer (not asked: no terminal)
	exitSuspended = cliconv.ExitSuspended   // submit: an operator suspended the task; it waits for a resume
)

// usageError is a usage error (exit code 2) with its message.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
func (e usageError) Unwrap() error { return cliconv.ErrUsage }

// run is main without the process: arguments and streams in, exit code
// out, so that tests drive it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(&client{stdin: stdin, stdout: stdout, stderr: stderr})
	return exitCode(app.Run(cliconv.Interspersed(app, args)), stderr)
}

// exitCode reports err on stderr, one line, and maps it to the process's
// exit code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	if msg := cliconv.Message(err); msg != "" {
		fmt.Fprintln(stderr, "pegasusd:", msg)
	}
	return cliconv.Code(err)
}

// env names the PEGASUS_* variable of a client command's own flag:
// PEGASUS_<CMD>_<FLAG>, as pegasus-replay does.
func env(cmd, flag string) []string { return cliconv.EnvName(cmd, flag) }

func newApp(c *client) *cli.App {
	stdin, stdout, stderr := c.stdin, c.stdout, c.stderr
	clientFlags := func() []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "server", Aliases: []string{"s"}, Value: "http://127.0.0.1:7070", EnvVars: []string{"PEGASUS_SERVER"},
				Usage: "`URL` (or HOST:PORT) of the running daemon"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"PEGASUS_TOKEN"}, Usage: "bearer `TOKEN` of the daemon, if it has one"},
			&cli.BoolFlag{Name: "json", EnvVars: []string{"PEGASUS_JSON"}, Usage: "print JSON for machines instead of text"},
		}
	}
	with := func(cmd string, flags ...cli.Flag) []cli.Flag { return append(clientFlags(), flags...) }
	reason := func(cmd string) cli.Flag {
		return &cli.StringFlag{Name: "reason", EnvVars: env(cmd, "reason"), Usage: "why, recorded in the task's history"}
	}
	cli.VersionPrinter = func(cc *cli.Context) { fmt.Fprint(cc.App.Writer, cliconv.Version(cc.App.Name)) }
	app := &cli.App{
		Name:        "pegasusd",
		Usage:       "the Pegasus event-sourced task engine for AI agents",
		Description: "Run the daemon with `pegasusd` (or `pegasusd serve`); in another terminal, `pegasusd submit \"what time is it?\"`.\n" + cliconv.ExitCodesHelp,
		Version:     "see --version",
		Reader:      stdin,
		Writer:      stdout,
		ErrWriter:   stderr,
		// A schedule's input may hold commas: --schedule is repeated, never
		// split.
		DisableSliceFlagSeparator: true,
		EnableBashCompletion:      true,
		// Without a command, pegasusd serves: `pegasusd --addr ...` works
		// like `pegasusd serve --addr ...`.
		Flags: serveFlags(),
		Action: func(cc *cli.Context) error {
			if cc.NArg() > 0 {
				return cliconv.UnknownCommand(cc.App, cc.Args().First())
			}
			return serveAction(cc, stderr)
		},
		// Errors are printed by run, once.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   cliconv.OnUsageError,
		Commands: []*cli.Command{
			{
				Name:   "serve",
				Usage:  "run the daemon (the default command)",
				Flags:  serveFlags(),
				Action: func(cc *cli.Context) error { return serveAction(cc, stderr) },
			},
			{
				Name:      "submit",
				Usage:     "submit a task to the running daemon and wait for its result",
				ArgsUsage: "TEXT",
				Flags: with("submit",
					&cli.StringFlag{Name: "type", Value: "general", EnvVars: env("submit", "type"), Usage: "task type: general, explore, plan or one of --config's"},
					&cli.IntFlag{Name: "priority", EnvVars: env("submit", "priority"), Usage: "admission priority, lower first"},
					&cli.StringFlag{Name: "concurrency-key", EnvVars: env("submit", "concurrency-key"), Usage: "concurrency key (a tenant, a user): admission takes keys in turn, each within its limit"},
					&cli.StringFlag{Name: "source", Value: "cli", EnvVars: env("submit", "source"), Usage: "where the input comes from"},
					&cli.StringFlag{Name: "machine", EnvVars: env("submit", "machine"), Usage: "task machine NAME@VERSION, for example pegasus.task@0 (default: the current one)"},
					&cli.BoolFlag{Name: "no-wait", EnvVars: env("submit", "no-wait"), Usage: "print the task id and return at once"},
					&cli.BoolFlag{Name: "no-stream", EnvVars: env("submit", "no-stream"), Usage: "on a terminal, print the answer once it is complete instead of as the model streams it"},
					&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, EnvVars: env("submit", "timeout"), Usage: "give up waiting after this long"},
				),
				Action: c.submit,
			},
			{
				Name:  "tasks",
				Usage: "list tasks, oldest first (as pegasus-replay tasks)",
				Flags: with("tasks",
					&cli.StringFlag{Name: "state", EnvVars: env("tasks", "state"), Usage: "only tasks in these states (comma-separated)"},
					&cli.StringFlag{Name: "machine", EnvVars: env("tasks", "machine"), Usage: "only tasks of these machines, NAME@VERSION (comma-separated)"},
					&cli.StringFlag{Name: "type", EnvVars: env("tasks", "type"), Usage: "only tasks of these types (comma-separated)"},
					&cli.IntFlag{Name: "limit", Value: cliconv.PageSize, EnvVars: env("tasks", "limit"), Usage: "page size"},
					&cli.StringFlag{Name: "cursor", EnvVars: env("tasks", "cursor"), Usage: "continue from the `CURSOR` a previous page printed"},
					&cli.BoolFlag{Name: "desc", EnvVars: env("tasks", "desc"), Usage: "newest first"},
					&cli.BoolFlag{Name: "all", EnvVars: env("tasks", "all"), Usage: "every page, not just the first"},
				),
				Action: c.tasks,
			},
			{
				Name:      "task",
				Usage:     "show one task: state, result, history and plan",
				ArgsUsage: "ID",
				Flags: with("task",
					&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, EnvVars: env("task", "follow"),
						Usage: "print each change until the task ends (exit 5 if it fails)"},
				),
				Action: c.task,
			},
			{
				Name:      "events",
				Usage:     "print a task's events in order",
				ArgsUsage: "ID",
				Flags:     clientFlags(),
				Action:    c.events,
			},
			{
				Name:      "reply",
				Usage:     "answer a task that asked a question",
				ArgsUsage: "ID TEXT",
				Flags:     clientFlags(),
				Action:    c.reply,
			},
			{
				Name: "suspend", Usage: "pause a running task", ArgsUsage: "ID",
				Flags: with("suspend", reason("suspend")), Action: c.command("suspend"),
			},
			{
				Name: "resume", Usage: "resume a suspended task", ArgsUsage: "ID",
				Flags: with("resume", reason("resume")), Action: c.command("resume"),
			},
			{
				Name: "cancel", Usage: "cancel a task (it ends failed)", ArgsUsage: "ID",
				Flags: with("cancel", reason("cancel")), Action: c.command("cancel"),
			},
			configCommand(stdout),
			c.toolsCommand(clientFlags()),
			{
				Name:      "completion",
				Usage:     "print a shell completion script (bash or zsh)",
				ArgsUsage: "bash|zsh",
				Description: "Load it in the current shell:\n\n" +
					"   source <(pegasusd completion bash)",
				Action: func(cc *cli.Context) error {
					if cc.NArg() != 1 {
						return cliconv.Usagef("completion takes bash or zsh")
					}
					s, err := cliconv.CompletionScript("pegasusd", cc.Args().First())
					if err != nil {
						return err
					}
					_, err = fmt.Fprint(stdout, s)
					return err
				},
			},
		},
	}
	for _, cmd := range app.Commands {
		cmd.OnUsageError = cliconv.OnUsageError
	}
	return app
}
