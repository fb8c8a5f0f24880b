package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// Options configure an Agent.
type Options struct {
	// Model reasons and reflects. The default value is llm.Offline, the
	// built-in deterministic demo model.
	Model llm.Model

	// Models are named models, which task types choose by name (TaskType
	// Model and Fallback). The default value is none: every type runs with
	// Model.
	Models map[string]llm.Model

	// Tools are user tools, added to the built-in ones (memory_*, notify,
	// current_time) and offered to "general" tasks; a *tools.WorkerTool
	// among them runs as a broker task (Delegate). To offer them to other
	// types, list their names (or globs) in TaskTypes. The default value is
	// none.
	Tools []tools.Tool

	// Providers are changing sets of tools (MCP servers): their tools are
	// offered like Tools, as they are when a task reasons. The default
	// value is none.
	Providers []tools.Provider

	// TaskTypes are task types, each with its system prompt, tools, model
	// and bounds. They are added to DefaultTaskTypes(); one with the name
	// of a built-in type replaces it. The default value is none: the
	// built-in types.
	TaskTypes []TaskType

	// Delegate creates the broker task that runs a worker tool's call
	// (engine wires it to the broker): a second call with the same
	// Delegation.Key creates nothing. The default value is nil: a worker
	// tool's call fails at once.
	Delegate func(ctx context.Context, d Delegation) error

	// MaxActiveTasks is how many tasks may be reasoning or acting at once;
	// further tasks wait their turn, admitted by priority (lower value
	// first) then age. The default value is 5.
	MaxActiveTasks int

	// Concurrency limits the tasks of each concurrency key that hold a
	// slot at once; admission takes the keys with tasks waiting in turn.
	// The default value is no limit per key.
	Concurrency ConcurrencyLimits

	// RateLimits bound the calls of named models (by their name in
	// Models; "default" for Model when it is none of them): calls wait,
	// in order, until they fit the model's requests and tokens per
	// minute. The default value is none.
	RateLimits map[string]RateLimit

	// Prices price the model calls (by a model's name in Models, or the
	// model identifiers a MODEL_CALLED records; see
	// projection.Prices.Lookup), for the spend projection and the
	// budgets. The default value is none: every call costs 0.
	Prices projection.Prices

	// Budgets bound what tasks and concurrency keys spend (docs/limits.md).
	// The default value is none.
	Budgets Budgets

	// MaxConcurrentLLM bounds concurrent model calls (reasoning and
	// reflection). The default value is 3.
	MaxConcurrentLLM int

	// MaxConcurrentTools bounds concurrent tool calls. The default value is
	// 3.
	MaxConcurrentTools int

	// ToolTimeout bounds one tool call; a call that takes longer fails its
	// step. The default value is 60s.
	ToolTimeout time.Duration

	// MaxIterations bounds the reason/act loop of one task: a task about to
	// reason for iteration MaxIterations+1 fails with reason
	// "max_iterations". The default value is 10.
	MaxIterations int

	// DisableReflection turns post-task reflection off. The default value
	// is false (reflection on).
	DisableReflection bool

	// ReflectionRounds bounds the tool-use loop of post-task reflection.
	// The default value is 5.
	ReflectionRounds int

	// ShouldReflect says whether a completed task is worth reflecting on.
	// The default value reflects on tasks that called a tool or took more
	// than one iteration, and skips one-shot answers.
	ShouldReflect func(t *fsm.Task) bool

	// Replay configures the fold (snapshots, checkpoints). The default
	// value is replay's defaults.
	Replay *replay.Options

	// Logger receives the agent's messages. The default value discards
	// them.
	Logger *slog.Logger

	// Appender receives every event the agent writes; the log given to
	// New is where it reads, and Appender must make an append visible
	// there before it returns (pegasusd --cluster passes the replicated
	// log, whose local copy that log is). The default value is the log
	// given to New.
	Appender eventlog.Appender

	// Owns says whether this agent runs a task (pegasusd --cluster: the
	// task's partition is leased to this daemon). A task it does not own
	// is folded and served like any other, but no stage of it runs here;
	// ResumeOwned starts the tasks of a partition taken later. The default
	// value owns every task.
	Owns func(task string) bool

	// ConfigHash is recorded in SYSTEM_STARTED: the hash of the
	// configuration the agent runs under (pegasusd --config), so that the
	// log says what a daemon ran with. The default value is none.
	ConfigHash string

	// Now is the clock of the current_time tool and of reported latencies.
	// Event times come from the log, never from here. The default value is
	// time.Now.
	Now func() time.Time
}

// EnsureDefaults fills every unset field with its default value.
func (o *Options) EnsureDefaults() {
	if o.Model == nil {
		o.Model = llm.Offline{}
	}
	if o.MaxActiveTasks <= 0 {
		o.MaxActiveTasks = 5
	}
	if o.MaxConcurrentLLM <= 0 {
		o.MaxConcurrentLLM = 3
	}
	if o.MaxConcurrentTools <= 0 {
		o.MaxConcurrentTools = 3
	}
	if o.ToolTimeout <= 0 {
		o.ToolTimeout = 60 * time.Second
	}
	if o.MaxIterations <= 0 {
		o.MaxIterations = 10
	}
	if o.ReflectionRounds <= 0 {
		o.ReflectionRounds = 5
	}
	if o.ShouldReflect == nil {
		o.ShouldReflect = defaultShouldReflect
	}
	if o.Logger == nil {
		// A handler enabled for no level: the lines, the task ends' among
		// them, are never built.
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if o.MaxActiveTasks > 100000 || o.MaxConcurrentLLM > 100000 || o.MaxConcurrentTools > 100000 {
		return errors.New("agent: concurrency limits above 100000 are not supported")
	}
	if o.MaxIterations > 1000 {
		return errors.New("agent: MaxIterations above 1000 is not supported")
	}
	return nil
}

// defaultShouldReflect skips trivial tasks: a single iteration that only
// answered teaches nothing worth an extra model call.
func defaultShouldReflect(t *fsm.Task) bool {
	if t.Context.Iteration > 1 {
		return true
	}
	for _, a := range t.Context.ActionsDone {
		if a.ActionType == fsm.ActionToolCall {
			return true
		}
	}
	return false
}
