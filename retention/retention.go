package retention

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/internal/durable"
	"github.com/pegasus-engine/pegasus/replay"
)

// Options configure a retention run. Like Pebble's, every field documents
// its default; EnsureDefaults fills them and Validate checks them.
type Options struct {
	// Window is how long a finished task stays in the live log after its
	// last event. It must be positive (the daemon's --retain-finished,
	// off when zero, decides whether Run is called at all).
	Window time.Duration
	// ArchiveDir is the directory archives are written to; it is created
	// (mode 0700) if missing. Required.
	ArchiveDir string
	// FS is the filesystem of ArchiveDir; tests use vfs.NewCrashableMem.
	// The default value is vfs.Default.
	FS vfs.FS
	// MaxEvents bounds the events one run removes (a run holds them in
	// memory while it writes the archive, and they go in one batch); the
	// rest waits for the next run. A task is never split across runs.
	// The default value is 50000.
	MaxEvents int
	// Clock gives the time the window ends at.
	// The default value is time.Now.
	Clock func() time.Time
	// Checkpoint, if set, is called at the start of a run to persist the
	// read models, so that every task finished before the run can be a
	// candidate (only tasks in the persisted projections are). The daemon
	// passes its View's Checkpoint.
	// The default value is nil: the projections as last persisted.
	Checkpoint func(context.Context) error
	// Logger reports each run.
	// The default value discards.
	Logger *slog.Logger

	// crashAt, in tests, is called after each step of a run.
	crashAt func(Step)
}

// Step names a point of a run, for crash tests.
type Step int

// The steps of a run, in order.
const (
	StepArchived  Step = iota + 1 // the archive file is synced and renamed into place
	StepRetired                   // the removal batch is committed
	StepCompacted                 // the deleted ranges are compacted
)

// EnsureDefaults fills zero fields with their defaults and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o == nil {
		o = &Options{}
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = 50000
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// ErrInvalid is returned for options that cannot work.
var ErrInvalid = errors.New("retention: invalid options")

// Validate checks o after EnsureDefaults.
func (o *Options) Validate() error {
	switch {
	case o.Window <= 0:
		return fmt.Errorf("%w: window %s; it must be positive", ErrInvalid, o.Window)
	case o.ArchiveDir == "":
		return fmt.Errorf("%w: no archive directory", ErrInvalid)
	}
	return nil
}

// Result says what a run did.
type Result struct {
	// Manifest is the run's manifest and Seq its EVENTS_ARCHIVED event;
	// nil and 0 when nothing was old enough.
	Manifest *replay.ArchiveManifest
	Seq      uint64
	// Pinned counts finished tasks kept because a task still in the log
	// points at them; Orphans the archive files of crashed runs deleted.
	Pinned  int
	Orphans int
}

// Run makes one retention run on l (see the package comment). The
// persisted projections must be l's (the daemon's View persists them).
func Run(ctx context.Context, l *eventlog.Log, opts *Options) (Result, error) {
	o := *opts.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	var res Result
	if err := makeDir(o.FS, o.ArchiveDir); err != nil {
		return res, fmt.Errorf("retention: archive directory: %w", err)
	}
	var err error
	if res.Orphans, err = removeOrphans(ctx, l, &o); err != nil {
		return res, err
	}
	if o.Checkpoint != nil {
		if err := o.Checkpoint(ctx); err != nil {
			return res, fmt.Errorf("retention: checkpoint: %w", err)
		}
	}
	cutoff := o.Clock().Add(-o.Window)
	p, err := plan(ctx, l, cutoff, o.MaxEvents)
	if err != nil {
		return res, err
	}
	res.Pinned = p.pinned
	if len(p.events) == 0 {
		return res, nil
	}
	id := l.NewID()
	m := &replay.ArchiveManifest{
		File:  archiveName(id),
		Tasks: len(p.streams), Events: len(p.events), FinishedBefore: cutoff.UTC(),
	}
	hs := replay.NewArchiveHasher()
	seqs := make([]uint64, len(p.events))
	for i, ev := range p.events {
		seqs[i] = ev.Seq
		if err := hs.Add(ev); err != nil {
			return res, err
		}
	}
	m.Ranges, m.Hash = replay.RangesOf(seqs), hs.Sum()

	if err := writeArchive(&o, m, l.Head(), p.events); err != nil {
		return res, err
	}
	o.step(StepArchived)

	mev, err := replay.ManifestEvent(m)
	if err != nil {
		return res, err
	}
	mev.ID = id
	ar, err := l.Retire(ctx, p.retirement(mev))
	if err != nil {
		// The archive stays as an orphan; the next run deletes it.
		return res, fmt.Errorf("retention: remove: %w", err)
	}
	res.Manifest, res.Seq = m, ar.FirstSeq
	o.step(StepRetired)

	if err := l.CompactRetired(ctx, m.Ranges[0].First, m.Ranges[len(m.Ranges)-1].Last); err != nil {
		return res, err
	}
	o.step(StepCompacted)
	o.Logger.Info("retention: archived finished tasks", "tasks", m.Tasks, "events", m.Events,
		"ranges", len(m.Ranges), "file", m.File, "manifest_seq", res.Seq, "pinned", res.Pinned, "orphans", res.Orphans)
	return res, nil
}

// retirement is the removal of the plan's tasks, recorded by manifest:
// their events and index entries, and their persisted read models.
func (p *runPlan) retirement(manifest eventlog.Event) eventlog.Retirement {
	rt := eventlog.Retirement{Manifest: manifest, Events: make([]eventlog.RetiredEvent, len(p.events))}
	for i, ev := range p.events {
		rt.Events[i] = eventlog.RetiredEvent{Seq: ev.Seq, ID: ev.ID, Causation: ev.Causation}
	}
	for _, s := range p.streams {
		rt.Streams = append(rt.Streams, eventlog.RetiredStream{Stream: s.ID, Version: s.Version})
	}
	rt.Aux = func(b *eventlog.AuxBatch) error { replay.ForgetTasks(b, p.streams); return nil }
	return rt
}

func (o *Options) step(s Step) {
	if o.crashAt != nil {
		o.crashAt(s)
	}
}

func archiveName(id ulid.ULID) string { return "pegasus-archive-" + id.String() + ".ndjson.gz" }

// writeArchive writes the archive durably (internal/durable): to a
// temporary file, synced, renamed into place, the directory synced.
func writeArchive(o *Options, m *replay.ArchiveManifest, head uint64, evs []eventlog.Event) error {
	err := durable.WriteFile(o.FS, o.FS.PathJoin(o.ArchiveDir, m.File), func(w io.Writer) error {
		zw := gzip.NewWriter(w)
		ex, err := replay.NewExporter(zw, replay.ArchiveHeader(head, m))
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if err := ex.Write(ev); err != nil {
				return err
			}
		}
		if err := ex.Close(); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return fmt.Errorf("retention: archive %s: %w", m.File, err)
	}
	return nil
}

// makeDir creates dir if it is missing, durably: its parent is synced, so
// that an archive synced into it later survives power loss.
func makeDir(fs vfs.FS, dir string) error {
	if _, err := fs.Stat(dir); err == nil {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return durable.SyncDir(fs, fs.PathDir(dir))
}

// removeOrphans deletes the archive files (and temporary files) that no
// manifest in the log names.
func removeOrphans(ctx context.Context, l *eventlog.Log, o *Options) (int, error) {
	ms, err := replay.Manifests(ctx, replay.FromLog(l))
	if err != nil {
		return 0, err
	}
	named := make(map[string]bool, len(ms))
	for _, m := range ms {
		named[m.File] = true
	}
	names, err := o.FS.List(o.ArchiveDir)
	if err != nil {
		return 0, fmt.Errorf("retention: archive directory: %w", err)
	}
	slices.Sort(names)
	n := 0
	for _, name := range names {
		if !isArchiveFile(name) || named[name] {
			continue
		}
		if err := o.FS.Remove(o.FS.PathJoin(o.ArchiveDir, name)); err != nil {
			return n, fmt.Errorf("retention: delete orphan archive: %w", err)
		}
		o.Logger.Info("retention: deleted the archive of a run that did not commit", "file", name)
		n++
	}
	return n, nil
}
