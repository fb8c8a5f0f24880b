package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/oklog/ulid/v2"
	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// source is where a command reads events: exactly one of --data-dir (a
// Pebble log opened read-only), --server (a running daemon's events,
// fetched and held in memory) or --file (an NDJSON export, held in memory).
// Every command reads through replay: the source only chooses the Reader.
type source struct {
	desc   string        // for messages: `data directory "x"`
	log    *eventlog.Log // --data-dir only
	mem    *replay.MemLog
	reader replay.Reader
	// partial is set for a filtered export (its header says it is not
	// complete): its global sequence has gaps by design.
	partial bool
}

// sourceFlags lists the source flags, for messages.
const sourceFlags = "--data-dir DIR, --server URL or --file EXPORT.ndjson"

// openSource opens the one source the global flags name.
func openSource(ctx context.Context, std *stdio, g globals) (*source, error) {
	// An explicit flag beats an environment variable: `-f x.ndjson`
	// works after `export PEGASUS_DATA_DIR=...`.
	i, err := cliconv.OneOf(
		cliconv.Setting{Flag: "--data-dir", Env: "PEGASUS_DATA_DIR", Value: g.dataDir, Explicit: g.explicit[flagDataDir]},
		cliconv.Setting{Flag: "--server", Env: "PEGASUS_SERVER", Value: g.server, Explicit: g.explicit[flagServer]},
		cliconv.Setting{Flag: "--file", Env: "PEGASUS_FILE", Value: g.file, Explicit: g.explicit[flagFile]},
	)
	switch {
	case err != nil:
		return nil, err
	case i < 0:
		return nil, usagef("no source: give one of %s (or PEGASUS_DATA_DIR, PEGASUS_SERVER, PEGASUS_FILE)", sourceFlags)
	case i == 0:
		return openDataDir(g.dataDir)
	case i == 2:
		return openFile(ctx, std, g.file)
	default:
		return openServer(ctx, std, g)
	}
}

// openDataDir opens a data directory read-only. eventlog guarantees that a
// read-only open modifies nothing, and refuses a directory a running daemon
// holds (ErrLocked).
func openDataDir(dir string) (*source, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, sourceErr(fmt.Errorf("data directory %q: %w", dir, err))
	}
	if !fi.IsDir() {
		return nil, sourceErr(fmt.Errorf("data directory %q is not a directory (for an NDJSON export use --file)", dir))
	}
	l, err := eventlog.Open(dir, &eventlog.Options{ReadOnly: true})
	if errors.Is(err, eventlog.ErrLocked) {
		return nil, sourceErr(lockedError(dir))
	}
	if eventlog.IsCorruption(err) {
		// Damage is a finding (verify reports it), not a source of the
		// wrong kind: exit code 1, like corruption met while reading.
		return nil, fmt.Errorf("data directory %q: %w", dir, err)
	}
	if err != nil {
		return nil, sourceErr(fmt.Errorf("data directory %q: %w", dir, err))
	}
	return &source{desc: fmt.Sprintf("data directory %q", dir), log: l, reader: replay.FromLog(l)}, nil
}

// lockedError says how to read a directory a running daemon holds, in the
// operator's terms. It still matches eventlog.ErrLocked.
func lockedError(dir string) error {
	return cliconv.Kind(eventlog.ErrLocked, fmt.Errorf("data directory %q is in use by a running pegasusd. "+
		"Read it through the daemon with --server http://127.0.0.1:7070, "+
		"or take a checkpoint (POST /v1/admin/checkpoint, e.g. curl -X POST http://127.0.0.1:7070/v1/admin/checkpoint) "+
		"and read that copy with --data-dir", dir))
}

// openFile loads an NDJSON export (replay's format, docs/export.md) into
// memory; "-" reads stdin. Lines of events in their JSON form without an
// export header (an API response's events, tail --json) load too, as a
// partial export.
func openFile(ctx context.Context, std *stdio, name string) (*source, error) {
	r, closeIn, err := openInput(std, name)
	if err != nil {
		return nil, err
	}
	defer closeIn()
	desc := "export on stdin"
	if name != "-" {
		desc = fmt.Sprintf("export %q", name)
	}
	m, h, err := replay.ReadExport(r)
	if err != nil {
		return nil, sourceErr(fmt.Errorf("%s: %w", desc, err))
	}
	return &source{desc: desc, mem: m, reader: m, partial: !h.Complete}, nil
}

// memSource wraps events loaded into memory (a file or a server).
func memSource(desc string, evs []eventlog.Event) (*source, error) {
	m, err := replay.NewMemLog(evs...)
	if err != nil {
		return nil, sourceErr(fmt.Errorf("%s: %w", desc, err))
	}
	return &source{desc: desc, mem: m, reader: m}, nil
}

// Close releases the data directory, if any.
func (s *source) Close() error {
	if s == nil || s.log == nil {
		return nil
	}
	return s.log.Close()
}

// head is the highest sequence in the source.
func (s *source) head() uint64 { return s.reader.Head() }

// view folds the whole source into a View, for the commands that list or
// count (tasks, stats). On a data directory it is replay.Open read-only:
// projections the daemon persisted are loaded and only the tail after them
// is folded. Anything else is folded from zero in memory, with a progress
// bar when the fold is long.
func (s *source) view(ctx context.Context, std *stdio) (*replay.View, error) {
	if s.log != nil {
		v, _, err := replay.Open(ctx, s.log, &replay.Options{ReadOnly: true})
		return v, err
	}
	v, err := replay.NewView(nil)
	if err != nil {
		return nil, err
	}
	bar := newProgress(std, uint64(s.mem.Len()), "folding")
	n := uint64(0)
	_, err = replay.Fold(ctx, v, s.reader, replay.FoldOptions{OnChange: func(*replay.Change) error {
		n++
		if n%1024 == 0 {
			bar.set(n)
		}
		return nil
	}})
	bar.done()
	if err != nil {
		return nil, err
	}
	return v, nil
}

// openTaskAt reads the TASK argument and --at, and opens the source: how
// every command that looks at one task as of a point starts. The caller
// closes the source.
func openTaskAt(c *cli.Context, std *stdio) (src *source, id string, b replay.Bound, g globals, err error) {
	if err = exactArgs(c, "TASK"); err != nil {
		return nil, "", b, g, err
	}
	g = readGlobals(c)
	if b, err = parseAt(c.String("at")); err != nil {
		return nil, "", b, g, err
	}
	if src, err = openSource(c.Context, std, g); err != nil {
		return nil, "", b, g, err
	}
	return src, parseTaskID(c.Args().First()), b, g, nil
}

// parseTaskID normalises a task id argument. Task ids are ULIDs, printed in
// upper case; a lower-case paste is accepted. Anything else is looked up
// as given (and will not be found).
func parseTaskID(s string) string {
	if id, err := ulid.ParseStrict(strings.ToUpper(s)); err == nil {
		return id.String()
	}
	return s
}

// parseEventID parses an event id argument.
func parseEventID(s string) (ulid.ULID, error) {
	id, err := ulid.ParseStrict(strings.ToUpper(s))
	if err != nil {
		return ulid.ULID{}, usagef("%q is not an event id (a 26-character ULID): %v", s, err)
	}
	return id, nil
}

// taskErr turns replay's "task not found" into a message about the task
// argument (exit code 3); other errors pass through.
func taskErr(ctx context.Context, r replay.Reader, id string, b replay.Bound, err error) error {
	if errors.Is(err, replay.ErrBoundNotFound) {
		return notFoundf("--at %s: no such event in this source", b.ID)
	}
	if !errors.Is(err, projection.ErrTaskNotFound) {
		return err
	}
	if !b.IsZero() && checkTask(ctx, r, id) == nil {
		return notFoundf("task %s did not exist yet at %s", id, b)
	}
	return notFoundf("unknown task %q", id)
}

// isSourceError reports errors that make a source unusable: not a Pegasus
// log, a format this build cannot read, a directory another process holds.
func isSourceError(err error) bool {
	return errors.Is(err, eventlog.ErrFormat) || errors.Is(err, eventlog.ErrLocked) ||
		errors.Is(err, replay.ErrExportFormat)
}

// isNotFoundError reports an unknown task or event.
func isNotFoundError(err error) bool {
	return errors.Is(err, projection.ErrTaskNotFound) || errors.Is(err, eventlog.ErrNotFound) ||
		errors.Is(err, replay.ErrBoundNotFound)
}

// hint returns advice for an error, or "".
func hint(err error) string {
	switch {
	case errors.Is(err, eventlog.ErrFormat):
		return "--data-dir wants a pegasusd data directory or a checkpoint copy; if it was written by a newer Pegasus, use a newer pegasus-replay"
	case errors.Is(err, replay.ErrExportFormat):
		return "--file wants an NDJSON export written by pegasus-replay export (docs/export.md), or events in their JSON form one per line (docs/events.md)"
	case eventlog.IsCorruption(err):
		return "run pegasus-replay verify to list every bad position"
	case errors.Is(err, projection.ErrTaskNotFound):
		return "list the task ids with pegasus-replay tasks"
	}
	return ""
}
