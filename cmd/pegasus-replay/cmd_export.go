package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

func exportCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write events as NDJSON (a post-mortem bundle), all or filtered by task and range; or send traces over OTLP",
		ArgsUsage: "[TASK...] (with --otlp)",
		Description: "The format is replay's export format (docs/export.md): a header line, then one event per\n" +
			"line in the JSON form of docs/events.md (the API's): its envelope, its stored body (base64\n" +
			"msgpack, the truth), and the decoded body under \"data\" with a one-line \"summary\" for humans.\n" +
			"--task keeps the task's stream plus the inputs that caused it, so why still reaches the root.\n" +
			"Read it back with --file, or import it into a data directory.\n\n" +
			"   pegasus-replay -d ./pegasus-data export --task 01JD3Q0W6Y8M3V7Q9K2T5N4B1C -o bundle.ndjson\n" +
			"   pegasus-replay -d ./pegasus-data export --from 1000 --to 2000 > slice.ndjson\n\n" +
			"With --otlp URL it sends the traces of the root tasks named (all of them without TASK) to an\n" +
			"OTLP/HTTP collector instead, with the trace and span ids pegasusd's live export gives them\n" +
			"(docs/tracing.md):\n\n" +
			"   pegasus-replay -d ./pegasus-data export --otlp http://127.0.0.1:4318 01JD3Q0W6Y8M3V7Q9K2T5N4B1C",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "task", EnvVars: env("export", "task"), Usage: "only `TASK` (repeatable), with its inputs"},
			&cli.Uint64Flag{Name: "from", EnvVars: env("export", "from"), Usage: "only events with sequence >= `SEQ`"},
			&cli.Uint64Flag{Name: "to", EnvVars: env("export", "to"), Usage: "only events with sequence <= `SEQ`"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, EnvVars: env("export", "output"),
				Usage: "write to `FILE` instead of stdout (refuses to overwrite without --force)"},
			&cli.BoolFlag{Name: "force", EnvVars: env("export", "force"), Usage: "overwrite --output if it exists"},
			&cli.StringFlag{Name: "otlp", EnvVars: env("export", "otlp"),
				Usage: "send the traces of the root tasks given as arguments (all without) to the OTLP/HTTP collector at this base `URL`"},
			&cli.StringFlag{Name: "otlp-service-name", EnvVars: env("export", "otlp_service_name"),
				Usage: "the service.name of the traces (default: OTEL_SERVICE_NAME, else pegasus)"},
			&cli.BoolFlag{Name: "otlp-contents", EnvVars: env("export", "otlp_contents"),
				Usage: "export prompt and completion contents and tool arguments and results"},
		},
		Action: func(c *cli.Context) error {
			if c.IsSet("otlp") {
				return exportOTLP(c, std)
			}
			if err := exactArgs(c); err != nil {
				return err
			}
			g := readGlobals(c)
			f := replay.ExportFilter{From: c.Uint64("from"), To: c.Uint64("to")}
			for _, t := range splitList(c.StringSlice("task")) {
				f.Tasks = append(f.Tasks, parseTaskID(t))
			}
			if f.To != 0 && f.From > f.To {
				return usagef("--from %d is after --to %d", f.From, f.To)
			}
			src, err := openSource(c.Context, std, g)
			if err != nil {
				return err
			}
			defer src.Close()
			for _, id := range f.Tasks {
				if err := checkTask(c.Context, src.reader, id); err != nil {
					return err
				}
			}
			out := c.String("output")
			w, closeOut := std.out, func() error { return nil }
			if out != "" && out != "-" {
				flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
				if c.Bool("force") {
					flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
				}
				file, err := os.OpenFile(out, flags, 0o600)
				if errors.Is(err, os.ErrExist) {
					return usagef("%s exists; use --force to overwrite it", out)
				}
				if err != nil {
					return err
				}
				w, closeOut = file, file.Close
			}
			n, err := replay.Export(c.Context, src.reader, w, f)
			if cerr := closeOut(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if out != "" && out != "-" {
				p := newPrinter(std, g)
				if p.json {
					return p.JSON(exportJSON{Events: n, Output: out})
				}
				p.Printf("exported %d events from %s to %s\n", n, src.desc, out)
			} else {
				fmt.Fprintf(std.err, "exported %d events from %s\n", n, src.desc)
			}
			return nil
		},
	}
}

// checkTask returns a not-found error (exit code 3) for a task with no
// events in r.
func checkTask(ctx context.Context, r replay.Reader, id string) error {
	it := r.Stream(ctx, id, 1)
	defer it.Close()
	if it.Next() {
		return nil
	}
	if err := it.Err(); err != nil {
		return err
	}
	return notFoundf("unknown task %q", id)
}

// exportJSON is the --json output of export -o FILE. (Without -o the NDJSON
// itself is the output.)
type exportJSON struct {
	Events int    `json:"events"`
	Output string `json:"output"`
}

func importCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "write the source's events into a new data directory",
		ArgsUsage: "DIR",
		Description: "Appends every event of the source (usually --file EXPORT.ndjson) to a new log in DIR,\n" +
			"keeping ids, times, causation, correlation, metadata and bodies, then builds and persists\n" +
			"the projections, so DIR can be read with --data-dir like a daemon's (or served by pegasusd).\n" +
			"DIR must not exist or be empty. A filtered export gets new, gap-free sequence numbers.\n\n" +
			"   pegasus-replay -f bundle.ndjson import ./postmortem-data\n" +
			"   pegasus-replay -d ./pegasus-data export --task T | pegasus-replay -f - import ./one-task",
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, "DIR"); err != nil {
				return err
			}
			g := readGlobals(c)
			dir := c.Args().First()
			if err := checkEmptyDir(dir); err != nil {
				return err
			}
			var it replay.Iterator
			desc := ""
			if g.file != "" && g.dataDir == "" && g.server == "" {
				// Stream the export instead of loading it: an import of a
				// big export needs no more memory than one batch.
				r, closeIn, err := openInput(std, g.file)
				if err != nil {
					return err
				}
				defer closeIn()
				er, err := replay.NewExportReader(r)
				if err != nil {
					return sourceErr(fmt.Errorf("%s: %w", g.file, err))
				}
				it, desc = er, fmt.Sprintf("export %q", g.file)
			} else {
				src, err := openSource(c.Context, std, g)
				if err != nil {
					return err
				}
				defer src.Close()
				it, desc = src.reader.Events(c.Context, 1), src.desc
				defer it.Close()
			}
			l, err := eventlog.Open(dir, nil)
			if err != nil {
				return err
			}
			res, err := replay.Import(c.Context, l, it)
			if err == nil {
				// Build and persist the projections, as the daemon would at
				// start, so later reads of DIR fold nothing.
				_, _, err = replay.Open(c.Context, l, nil)
			}
			if cerr := l.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			p := newPrinter(std, g)
			if p.json {
				return p.JSON(importJSON{Events: res.Events, Renumbered: res.Renumbered, DataDir: dir})
			}
			p.Printf("imported %d events from %s into %s\n", res.Events, desc, dir)
			if res.Renumbered > 0 {
				p.Printf("%d events got new sequence numbers or stream versions (the source was filtered); ids are unchanged\n", res.Renumbered)
			}
			return nil
		},
	}
}

// importJSON is the --json output of import.
type importJSON struct {
	Events     int    `json:"events"`
	Renumbered int    `json:"renumbered"`
	DataDir    string `json:"data_dir"`
}

// checkEmptyDir refuses to import into a directory that holds anything.
func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Dir(dir)); err != nil {
			return usagef("import: parent of %s: %v", dir, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return usagef("import: %s is not empty; import writes a new data directory", dir)
	}
	return nil
}

// openInput opens a file argument, "-" meaning stdin.
func openInput(std *stdio, name string) (r io.Reader, closeFn func() error, err error) {
	if name == "-" {
		return std.in, func() error { return nil }, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, sourceErr(err)
	}
	return f, f.Close, nil
}
