package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

// stdio is the process's streams and environment as the commands see them.
// Tests replace it to capture output and to pretend to be a terminal.
type stdio struct {
	in     io.Reader
	out    io.Writer
	err    io.Writer
	getenv func(string) string
	// outTTY and errTTY say whether stdout and stderr are terminals: colour
	// is used only on a terminal stdout, the progress bar only on a
	// terminal stderr.
	outTTY bool
	errTTY bool
	// now is the wall clock, used only to print ages ("3m ago"); folds
	// take every time from the events.
	now func() time.Time
	// width is the terminal's width in columns, 0 when stdout is not a
	// terminal. Human tables cut their last column to fit a terminal and
	// never cut output that goes to a pipe or a file.
	width func() int
	// retryWait is how long tail waits before reconnect attempt n (from
	// 1); nil means the default backoff. Tests make it zero.
	retryWait func(n int) time.Duration
}

func newStdio() *stdio {
	return &stdio{
		in:     os.Stdin,
		out:    os.Stdout,
		err:    os.Stderr,
		getenv: os.Getenv,
		outTTY: term.IsTerminal(int(os.Stdout.Fd())),
		errTTY: term.IsTerminal(int(os.Stderr.Fd())),
		now:    time.Now,
		width: func() int {
			w, _, err := term.GetSize(int(os.Stdout.Fd()))
			if err != nil {
				return 0
			}
			return w
		},
	}
}

// Global flag names. Each has a PEGASUS_* environment variable.
const (
	flagDataDir = "data-dir"
	flagServer  = "server"
	flagToken   = "token"
	flagFile    = "file"
	flagJSON    = "json"
	flagNoColor = "no-color"
	flagCluster = "cluster"
)

// globalFlags returns fresh global flags. The app carries visible copies,
// which also read the PEGASUS_* variables; every command carries hidden
// copies without variables, so `pegasus-replay show X --json` works as
// well as `pegasus-replay --json show X` (see readGlobals).
func globalFlags(hidden bool) []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: flagDataDir, Aliases: []string{"d"}, EnvVars: []string{"PEGASUS_DATA_DIR"}, Hidden: hidden,
			Usage: "read the log in `DIR` (a stopped daemon's data directory or a checkpoint copy), read-only"},
		&cli.StringFlag{Name: flagServer, Aliases: []string{"s"}, EnvVars: []string{"PEGASUS_SERVER"}, Hidden: hidden,
			Usage: "fetch events from a running pegasusd at `URL` (e.g. http://127.0.0.1:7070) and fold them here"},
		&cli.StringFlag{Name: flagToken, EnvVars: []string{"PEGASUS_TOKEN"}, Hidden: hidden,
			Usage: "bearer `TOKEN` for --server"},
		&cli.StringFlag{Name: flagFile, Aliases: []string{"f"}, EnvVars: []string{"PEGASUS_FILE"}, Hidden: hidden,
			Usage: "read events from the NDJSON export `FILE` (- for stdin)"},
		&cli.BoolFlag{Name: flagJSON, EnvVars: []string{"PEGASUS_JSON"}, Hidden: hidden,
			Usage: "print machine-readable JSON (shapes in docs/replay.md)"},
		&cli.BoolFlag{Name: flagNoColor, EnvVars: []string{"PEGASUS_NO_COLOR"}, Hidden: hidden,
			Usage: "never colour the output (colour is also off when stdout is not a terminal or NO_COLOR is set)"},
		&cli.StringFlag{Name: flagCluster, EnvVars: []string{"PEGASUS_CLUSTER"}, Hidden: hidden,
			Usage: "verify: the data directory is a node's copy of the clustered log on the NATS servers at `URL`; check it against the stream"},
	}
	if hidden {
		for _, f := range flags {
			switch f := f.(type) {
			case *cli.StringFlag:
				f.EnvVars = nil
			case *cli.BoolFlag:
				f.EnvVars = nil
			}
		}
	}
	return flags
}

// globals are the resolved global flags of one invocation.
type globals struct {
	dataDir, server, token, file string
	json, noColor                bool
	cluster                      string
	// explicit holds the global flags given on the command line rather
	// than through their PEGASUS_* variables (see run).
	explicit map[string]bool
}

// readGlobals resolves the global flags of c: a flag given after the command
// wins over one given before it, which wins over the environment (read by
// the app's copies only), which wins over the default.
func readGlobals(c *cli.Context) globals {
	str := func(name string) string {
		for _, cc := range c.Lineage() {
			if cc.Command != nil && hasFlag(cc, name) && cc.IsSet(name) {
				return cc.String(name)
			}
		}
		return c.String(name)
	}
	boolean := func(name string) bool {
		for _, cc := range c.Lineage() {
			if cc.Command != nil && hasFlag(cc, name) && cc.IsSet(name) {
				return cc.Bool(name)
			}
		}
		return c.Bool(name)
	}
	g := globals{
		dataDir: str(flagDataDir),
		server:  str(flagServer),
		token:   str(flagToken),
		file:    str(flagFile),
		cluster: str(flagCluster),
		json:    boolean(flagJSON),
		noColor: boolean(flagNoColor),
		explicit: func() map[string]bool {
			m, _ := c.App.Metadata[explicitKey].(map[string]bool)
			return m
		}(),
	}
	// A source given on the command line beats one from the environment:
	// the others' variables are ignored.
	if g.explicit[flagDataDir] || g.explicit[flagServer] || g.explicit[flagFile] {
		for name, v := range map[string]*string{flagDataDir: &g.dataDir, flagServer: &g.server, flagFile: &g.file} {
			if !g.explicit[name] {
				*v = ""
			}
		}
	}
	return g
}

// explicitKey is where run leaves cliconv.ExplicitFlags in the app's
// Metadata.
const explicitKey = "explicit"

// hasFlag reports whether the command of cc itself defines the flag name.
func hasFlag(cc *cli.Context, name string) bool {
	flags := cc.Command.Flags
	if cc.Command.Name == "" && cc.App != nil { // the root context
		flags = cc.App.Flags
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

// newApp builds the CLI. Commands are defined one per file (cmd_*.go).
func newApp(std *stdio) *cli.App {
	app := &cli.App{
		Name:  "pegasus-replay",
		Usage: "inspect, audit and replay a Pegasus event log",
		Description: "pegasus-replay folds a recorded log through the same replay code the daemon\n" +
			"recovers with. It never calls a model or a tool and never writes to the log it reads.\n\n" +
			"Choose one source: --data-dir DIR (read-only), --server URL, or --file EXPORT.ndjson.\n" +
			cliconv.ExitCodesHelp,
		Version:              version,
		Reader:               std.in,
		Writer:               std.out,
		ErrWriter:            std.err,
		Flags:                globalFlags(false),
		EnableBashCompletion: true,
		HideHelpCommand:      false,
		Suggest:              true,
		// Errors are turned into exit codes by report in main, never here.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return cliconv.UnknownCommand(c.App, c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
	}
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprint(c.App.Writer, cliconv.Version(c.App.Name)) }
	app.Commands = []*cli.Command{
		tasksCommand(std),
		showCommand(std),
		stateCommand(std),
		whyCommand(std),
		traceCommand(std),
		verifyCommand(std),
		exportCommand(std),
		importCommand(std),
		forkCommand(std),
		statsCommand(std),
		diffMachinesCommand(std),
		tailCommand(std),
		completionCommand(std),
	}
	for _, cmd := range app.Commands {
		prepare(cmd)
	}
	return app
}

// version is set with -ldflags "-X main.version=..." by release builds;
// --version prints the module version and commit Go records either way.
var version = "dev"

// prepare gives a command what every command has: the hidden global flags
// and usage errors mapped to exit code 2.
func prepare(cmd *cli.Command) {
	cmd.Flags = append(cmd.Flags, globalFlags(true)...)
	cmd.OnUsageError = onUsageError
	for _, sub := range cmd.Subcommands {
		prepare(sub)
	}
}

func onUsageError(c *cli.Context, err error, _ bool) error {
	name := ""
	if c.Command != nil && c.Command.Name != "" {
		name = " " + c.Command.Name
	}
	return &kindError{kind: errUsage, err: fmt.Errorf("%w (see pegasus-replay%s --help)", err, name)}
}

// exactArgs checks that c has exactly the named positional arguments.
func exactArgs(c *cli.Context, names ...string) error {
	if c.NArg() != len(names) {
		want := ""
		for _, n := range names {
			want += " " + n
		}
		return usagef("%s takes%s (got %d argument(s)); see pegasus-replay %s --help",
			c.Command.Name, orNothing(want), c.NArg(), c.Command.Name)
	}
	return nil
}

func orNothing(s string) string {
	if s == "" {
		return " no arguments"
	}
	return s
}

// env names the PEGASUS_* variable of a command flag: PEGASUS_<CMD>_<FLAG>.
func env(cmd, flag string) []string { return cliconv.EnvName(cmd, flag) }
