package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/config"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

// Options configures an Engine. The zero value, after EnsureDefaults, is
// pegasusd's defaults: the offline demo model, the embedded log in
// ./pegasus-data, no retention, no fan-out, no cluster.
type Options struct {
	// DataDir is the directory of the event log (with --cluster, this
	// node's copy), created 0700. The default value is "./pegasus-data".
	DataDir string
	// Log holds the event log's base options: its storage logger, a VFS
	// (tests inject I/O errors with errorfs), AcceptDataLoss (open a
	// damaged log anyway, cutting it at its last good point and recording
	// the loss). The default value is the zero eventlog.Options with, for
	// Logger, Logger at warning level and above (the storage engine
	// reports every WAL and compaction at info).
	Log eventlog.Options
	// Logger receives the engine's logs; each part adds its "component".
	// The default value is a logger that discards everything.
	Logger *slog.Logger

	// Model is the language model the agent calls. The default value is
	// the configuration's default model (Config), else llm.Offline{}, the
	// built-in offline demo model.
	Model llm.Model
	// LLM is Model's endpoint when Model is an OpenAI-compatible client,
	// for the catalog (/v1/models) and its probe. The default value, an
	// empty BaseURL, lists Model without an endpoint.
	LLM llm.Options
	// ModelProbe is the probe of LLM's endpoint the caller already ran
	// (pegasusd checks it before it binds). The default value, nil, has
	// the engine probe it at start, in the background.
	ModelProbe *llm.ProbeResult
	// Config is the configuration file (docs/config.md): named models,
	// task types, MCP servers, worker tools and schedules, added to the
	// options above. The engine starts the MCP servers, hands worker tool
	// calls to the broker, probes every model, and records the file's
	// hash in SYSTEM_STARTED. The default value, nil, is none: the
	// built-in task types and tools, and Model alone.
	Config *config.File
	// MaxActiveTasks is how many tasks reason or act at once; others wait,
	// by priority then age. The default value is 5.
	MaxActiveTasks int
	// MaxConcurrentLLM bounds concurrent model calls. The default value
	// is 3.
	MaxConcurrentLLM int
	// MaxConcurrentTools bounds concurrent tool calls. The default value
	// is 3.
	MaxConcurrentTools int
	// ToolTimeout bounds one tool call. The default value is 60s.
	ToolTimeout time.Duration
	// MaxIterations is how many reason/act iterations a task may take
	// before it fails. The default value is 10.
	MaxIterations int
	// DisableReflection turns post-task reflection off. The default value
	// is false.
	DisableReflection bool
	// MemoryBudget is what the task views may hold in memory. The default
	// value is replay's default, 256 MiB.
	MemoryBudget int64
	// ShutdownTimeout bounds how long a partition's running stages may
	// take to finish when this engine gives the partition back (with
	// Cluster). The default value is 30s.
	ShutdownTimeout time.Duration

	// Broker configures the Dispatch broker.
	Broker BrokerOptions
	// Retention archives and removes finished tasks. The default value
	// is off.
	Retention RetentionOptions
	// Schedules are the recurring tasks. The default value is none.
	Schedules []Schedule
	// Publish publishes every committed event on NATS JetStream (the
	// fan-out). The default value, an empty URL, is off.
	Publish cluster.OutboxOptions
	// Traces sends each root task's trace to an OTLP collector when it
	// ends (traces.go, docs/tracing.md). The default value is off.
	Traces TracesOptions
	// Cluster makes a JetStream stream the log's source of truth, DataDir
	// holding this node's copy (docs/cluster.md). The default value, an
	// empty URL, is the embedded log.
	Cluster cluster.LogOptions
	// Lease configures the partitions' leases, with Cluster. The default
	// value is cluster's.
	Lease cluster.LeaseOptions
	// SpikeTraceDir, when set, keeps the last seconds of a runtime/trace
	// in memory and writes them to a file in this directory when an
	// append takes 50ms or more (spikeAfter) or the storage engine stalls
	// writes (docs/operations.md "A latency spike"). The default value is
	// off.
	SpikeTraceDir string

	// configMerged is set once Config's schedules are in Schedules
	// (Start): Validate counts them either way.
	configMerged bool
}

// BrokerOptions configures the engine's Dispatch broker.
type BrokerOptions struct {
	// CheckInterval is the longest the broker sleeps between checks of
	// deadlines (it also wakes at each deadline). The default value is 30s.
	CheckInterval time.Duration
	// WorkerTTL is how long a worker not heard from still gets new tasks.
	// The default value is 90s.
	WorkerTTL time.Duration
	// AgentWorker makes the built-in agent a broker worker ("pegasus":
	// agent and the agent's task types). The default value is false
	// (pegasusd's --agent-worker is true by default).
	AgentWorker bool
}

// RetentionOptions configures retention (docs/retention.md).
type RetentionOptions struct {
	// Window archives finished tasks whose last event is older than this
	// and removes them from the live log. The default value is 0: keep
	// everything.
	Window time.Duration
	// Interval is how often retention runs. The default value is 1h.
	Interval time.Duration
	// ArchiveDir is where retention writes its archives. The default
	// value is DataDir/archive.
	ArchiveDir string
}

// EnsureDefaults fills the unset fields with their defaults. (Start
// builds Model from Config's default model first, when it has one.)
func (o *Options) EnsureDefaults() {
	if o.DataDir == "" {
		o.DataDir = "./pegasus-data"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Log.Logger == nil {
		o.Log.Logger = slog.New(minLevel{o.Logger.Handler(), slog.LevelWarn}).With("component", "eventlog")
	}
	if o.Model == nil {
		o.Model = llm.Offline{}
	}
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setInt(&o.MaxActiveTasks, 5)
	setInt(&o.MaxConcurrentLLM, 3)
	setInt(&o.MaxConcurrentTools, 3)
	setInt(&o.MaxIterations, 10)
	setDuration := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setDuration(&o.ToolTimeout, 60*time.Second)
	setDuration(&o.ShutdownTimeout, 30*time.Second)
	setDuration(&o.Broker.CheckInterval, 30*time.Second)
	setDuration(&o.Broker.WorkerTTL, 90*time.Second)
	setDuration(&o.Retention.Interval, time.Hour)
	if o.MemoryBudget == 0 {
		o.MemoryBudget = replay.DefaultMemoryBudget
	}
	if o.Retention.ArchiveDir == "" {
		o.Retention.ArchiveDir = filepath.Join(o.DataDir, "archive")
	}
}

// Validate reports options the engine cannot run with. pegasusd checks
// its flags first, with messages in their terms; this catches an
// embedder's mistakes.
func (o *Options) Validate() error {
	switch {
	case o.MaxActiveTasks < 1 || o.MaxConcurrentLLM < 1 || o.MaxConcurrentTools < 1 || o.MaxIterations < 1:
		return errors.New("engine: concurrency limits and MaxIterations must be at least 1")
	case o.MemoryBudget < replay.MinMemoryBudget:
		return fmt.Errorf("engine: MemoryBudget %d: the smallest budget is 1MiB", o.MemoryBudget)
	case o.Retention.Window < 0:
		return errors.New("engine: Retention.Window must not be negative")
	case o.Retention.Window > 0 && o.Cluster.URL != "":
		return errors.New("engine: retention does not work with Cluster yet (docs/cluster.md)")
	}
	ss := o.Schedules
	if o.Config != nil && !o.configMerged {
		ss = append(slices.Clip(ss), configSchedules(o.Config)...)
	}
	for i := range ss {
		if err := ss[i].check(); err != nil {
			return err
		}
	}
	return checkUniqueSchedules(ss)
}

// minLevel drops the records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}
func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(as), m.min}
}
func (m minLevel) WithGroup(g string) slog.Handler { return minLevel{m.Handler.WithGroup(g), m.min} }
