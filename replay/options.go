package replay

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/pegasus-engine/pegasus/projection"
)

// Memory budgets, in bytes (Options.MemoryBudget).
const (
	DefaultMemoryBudget = 256 << 20
	MinMemoryBudget     = 1 << 20
)

// Options configures a View. A nil *Options means all defaults.
type Options struct {
	// SnapshotEvery writes a snapshot of a task each time its stream version
	// reaches a multiple of it, so that the state of a long task at any
	// point is a snapshot read plus at most SnapshotEvery-1 events. Typical
	// tasks have 5 to 30 events; a snapshot costs one encoded task.
	//
	// The default value is 32.
	SnapshotEvery uint64

	// CheckpointEvery is how many events a persisting View folds at most
	// between automatic checkpoints. A checkpoint writes every changed
	// task, the stats, the memory and the sequence atomically, and
	// evicts finished tasks from memory; it bounds the tail a restart
	// refolds. Checkpoints run in the background: the fold does not wait
	// for them (see MemoryBudget).
	//
	// The trade-off: besides its tasks' records (about 30 µs of CPU
	// each), each checkpoint costs about 15 ms of CPU and a dozen synced
	// files, taken from the cores the appends use; a longer interval has
	// fewer of them, writes a task that changes across several of the
	// old intervals once, and refolds a longer tail at start. On a
	// two-core VM (BenchmarkRefoldTail, tasks of ten events 128 at a
	// time) a tail of 10,000 events refolds in 0.07 to 0.14 s holding
	// 4.4 MiB of tasks, one of 40,000 in 0.2 to 0.55 s holding 16 MiB.
	// The memory does not grow further with the interval: with the
	// default budget a sixteenth of it (16 MiB of changes not yet
	// written) starts a checkpoint at about that point anyway (see
	// docs/projections.md, "Persistence"). An interval of 40,000 gave the
	// agent's MCP benchmark 7% more calls/s, but bigger checkpoints beside
	// a memtable flush made the agent's tail latency miss its 100 ms
	// bound in one repetition of ten, twice: the default stays 10,000.
	//
	// The default value is 10000.
	CheckpointEvery int

	// MemoryBudget bounds, in bytes, the memory a persisting View holds:
	// the tasks in memory with their progress, the snapshots not yet
	// written and the long-term memory (an estimate kept as events are
	// folded, View.MemoryUse). Once the changes not yet persisted reach a
	// sixteenth of it, a checkpoint starts in the background, writes them
	// and evicts the finished tasks, which are then read from the persisted
	// read models. If the View still holds more than the budget, persisted
	// tasks that are not finished leave memory too (idle and suspended
	// ones first), keeping a stub of a few dozen bytes, and are read back
	// when one of their events is folded or they are queried. The fold
	// waits for a running checkpoint only while the View holds more than
	// the whole budget. Long-term memory is always held; if it and the
	// changes not yet written exceed the budget, a warning is logged.
	// Besides the budget, the View keeps the buffers a checkpoint encodes
	// into for the next one, up to a sixteenth of it (2 MiB at least).
	//
	// The default value is 256 MiB.
	MemoryBudget int64

	// Stats bounds the stats projection (window, distinct keys). Changing it
	// rebuilds the persisted projections at the next start.
	//
	// The default value is the projection.StatsOptions defaults.
	Stats projection.StatsOptions

	// ReadOnly never writes projections: for the CLI on a data directory or
	// a checkpoint copy. Persisted projections are still read when they
	// match this build, so the tail is all that is folded. A log opened
	// read-only implies it.
	//
	// The default value is false.
	ReadOnly bool

	// MaxIssues bounds how many refused events a View keeps for Issues.
	// They are all counted.
	//
	// The default value is 100.
	MaxIssues int

	// Logger receives recovery and checkpoint messages.
	//
	// The default value is a logger that discards everything.
	Logger *slog.Logger

	// ingestBytes overrides DefaultIngestBytes (tests).
	ingestBytes int
}

// EnsureDefaults fills zero fields with their default values and returns o.
// It is safe to call on a nil receiver, which returns a new Options.
func (o *Options) EnsureDefaults() *Options {
	if o == nil {
		o = &Options{}
	}
	if o.SnapshotEvery == 0 {
		o.SnapshotEvery = 32
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = 10000
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = DefaultMemoryBudget
	}
	o.Stats = o.Stats.EnsureDefaults()
	if o.MaxIssues == 0 {
		o.MaxIssues = 100
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	switch {
	case o.CheckpointEvery < 0:
		return fmt.Errorf("replay: CheckpointEvery is %d; it must be positive", o.CheckpointEvery)
	case o.MemoryBudget < MinMemoryBudget:
		return fmt.Errorf("replay: MemoryBudget is %d bytes; it must be at least %d (1 MiB)", o.MemoryBudget, MinMemoryBudget)
	case o.MaxIssues < 0:
		return fmt.Errorf("replay: MaxIssues is %d; it must be positive", o.MaxIssues)
	case o.Stats.Window < 1 || o.Stats.Window > 7*24*60:
		return fmt.Errorf("replay: Stats.Window is %d minutes; it must be 1 to 10080", o.Stats.Window)
	case o.Stats.MaxKeys < 1 || o.Stats.MaxKeys > 1<<16:
		return fmt.Errorf("replay: Stats.MaxKeys is %d; it must be 1 to 65536", o.Stats.MaxKeys)
	}
	return nil
}

// copy returns a copy of o (a new Options for nil), so that defaults
// never write into the caller's value.
func (o *Options) copy() *Options {
	if o == nil {
		return &Options{}
	}
	c := *o
	return &c
}

func (o *Options) setOptions(persist bool) projection.Options {
	po := projection.Options{Stats: o.Stats, Unbounded: !persist}
	if persist {
		po.SnapshotEvery = o.SnapshotEvery
	}
	return po
}

// pendingCheckpoint is how many bytes of changes not yet written start a
// checkpoint: a sixteenth of MemoryBudget. It also bounds the buffers a
// store keeps from one checkpoint for the next.
func (o *Options) pendingCheckpoint() int64 { return o.MemoryBudget / 16 }
