package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"
)

// Exit codes. Deep code returns errors; run maps them here, and only here.
const (
	exitOK        = 0
	exitError     = 1 // anything that went wrong: a bad flag value, the daemon unreachable, ...
	exitUsage     = 2 // the command line itself is wrong
	exitFailed    = 3 // submit: the task failed
	exitNeedInput = 4 // submit: the task waits for an answer (not asked: no terminal)
)

// exitError carries a specific exit code for an error already reported.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// run is main without the process: arguments and streams in, exit code
// out, so that tests drive it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(&client{stdin: stdin, stdout: stdout, stderr: stderr})
	return exitCode(app.Run(args), stderr)
}

// exitCode reports err on stderr and maps it to the process's exit code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ec *exitCodeError
	if errors.As(err, &ec) {
		if ec.err != nil && ec.err.Error() != "" {
			fmt.Fprintln(stderr, "pegasusd:", ec.err)
		}
		return ec.code
	}
	fmt.Fprintln(stderr, "pegasusd:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitError
}

func newApp(c *client) *cli.App {
	stdin, stdout, stderr := c.stdin, c.stdout, c.stderr
	clientFlags := []cli.Flag{
		&cli.StringFlag{Name: "server", Aliases: []string{"s"}, Value: "http://127.0.0.1:7070", EnvVars: []string{"PEGASUS_SERVER"},
			Usage: "URL of the running daemon"},
		&cli.StringFlag{Name: "token", EnvVars: []string{"PEGASUS_TOKEN"}, Usage: "bearer token of the daemon, if it has one"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON for machines instead of text"},
	}
	app := &cli.App{
		Name:        "pegasusd",
		Usage:       "the Pegasus event-sourced task engine for AI agents",
		Description: "Run the daemon with `pegasusd` (or `pegasusd serve`); in another terminal, `pegasusd submit \"what time is it?\"`.",
		Reader:      stdin,
		Writer:      stdout,
		ErrWriter:   stderr,
		// A schedule's input may hold commas: --schedule is repeated, never
		// split.
		DisableSliceFlagSeparator: true,
		// Without a command, pegasusd serves: `pegasusd --addr ...` works
		// like `pegasusd serve --addr ...`.
		Flags:  serveFlags(),
		Action: func(cc *cli.Context) error { return serveAction(cc, stderr) },
		// Errors are printed by run, once.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err.Error()}
		},
		Commands: []*cli.Command{
			{
				Name:   "serve",
				Usage:  "run the daemon (the default command)",
				Flags:  serveFlags(),
				Action: func(cc *cli.Context) error { return serveAction(cc, stderr) },
				OnUsageError: func(_ *cli.Context, err error, _ bool) error {
					return usageError{err.Error()}
				},
			},
			{
				Name:      "submit",
				Usage:     "submit a task to the running daemon and wait for its result",
				ArgsUsage: "TEXT",
				Flags: append(clientFlags,
					&cli.StringFlag{Name: "type", Value: "general", Usage: "task type: general, explore or plan"},
					&cli.IntFlag{Name: "priority", Usage: "admission priority, lower first"},
					&cli.StringFlag{Name: "source", Value: "cli", Usage: "where the input comes from"},
					&cli.StringFlag{Name: "machine", Usage: "task machine NAME@VERSION, for example pegasus.task@0 (default: the current one)"},
					&cli.BoolFlag{Name: "no-wait", Usage: "print the task id and return at once"},
					&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "give up waiting after this long"},
				),
				Action: c.submit,
			},
			{
				Name:  "tasks",
				Usage: "list tasks, newest first",
				Flags: append(clientFlags,
					&cli.StringFlag{Name: "state", Usage: "only tasks in these states (comma-separated)"},
					&cli.StringFlag{Name: "type", Usage: "only tasks of these types (comma-separated)"},
					&cli.IntFlag{Name: "limit", Value: 20, Usage: "how many"},
				),
				Action: c.tasks,
			},
			{
				Name:      "task",
				Usage:     "show one task: state, result, history and plan",
				ArgsUsage: "ID",
				Flags:     clientFlags,
				Action:    c.task,
			},
			{
				Name:      "reply",
				Usage:     "answer a task that asked a question",
				ArgsUsage: "ID TEXT",
				Flags:     clientFlags,
				Action:    c.reply,
			},
		},
	}
	return app
}
