package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/fsm"
)

// Tool is one capability the model may call. Implementations must be safe
// for concurrent use: several tasks may call the same tool at once.
type Tool interface {
	// Name is the name the model calls the tool by: letters, digits, '_'
	// and '-', at most 64 characters (the OpenAI limit).
	Name() string
	// Description tells the model what the tool does and when to use it.
	Description() string
	// Parameters is the JSON Schema of the arguments object. Nil means no
	// arguments.
	Parameters() json.RawMessage
	// Call runs the tool. The text returned is recorded in the log and shown
	// to the model; an error fails the step (the model sees its text). ctx
	// carries the per-call timeout.
	Call(ctx context.Context, call Call) (string, error)
}

// Call is one invocation of a tool.
type Call struct {
	// TaskID and TaskType name the task that called the tool.
	TaskID   string
	TaskType string
	// IdempotencyKey is the same every time this step runs, including after
	// a crash and recovery. See the package documentation.
	IdempotencyKey string
	// Arguments is the JSON object the model sent (never empty: "{}" when
	// the model sent nothing).
	Arguments json.RawMessage
	// Cause is the TOOL_CALL_STARTED event of this call and Correlation the
	// task's root input: events a tool appends (memory writes) record them.
	Cause       ulid.ULID
	Correlation ulid.ULID
	// Notify sends an interim message to the user. The agent records it as
	// TASK_NOTIFY together with the call's completion and then delivers it
	// to notification subscribers. Never nil when the agent calls a tool.
	Notify func(message string)
	// Handle is the durable handle an earlier run of this call recorded
	// with RecordHandle (an MCP task), "" for none: a tool that finds one
	// resumes waiting on it instead of running the call again.
	Handle string
	// RecordHandle records a durable handle (as a second TOOL_CALL_STARTED
	// of the step, with Handle set) before the tool waits on it, so that a
	// run after a crash finds it in Handle. Nil when not supported.
	RecordHandle func(ctx context.Context, handle string) error
}

// Source says where a tool runs.
type Source struct {
	Kind       string `json:"kind"`                 // SourceBuiltin, SourceGo, SourceMCP or SourceWorker
	Server     string `json:"server,omitempty"`     // the MCP server's name (SourceMCP)
	Capability string `json:"capability,omitempty"` // the broker capability (SourceWorker)
}

// The kinds of Source.
const (
	SourceBuiltin = "builtin" // memory_*, notify, current_time: part of the agent
	SourceGo      = "go"      // a Tool given to the agent in Go (Options.Tools)
	SourceMCP     = "mcp"     // a tool of an MCP server
	SourceWorker  = "worker"  // run by a broker worker (WorkerTool)
)

// String renders s as it is recorded in TOOL_CALL_STARTED.Source:
// "builtin", "go", "mcp:SERVER", "worker:CAPABILITY".
func (s Source) String() string {
	switch {
	case s.Kind == SourceMCP && s.Server != "":
		return s.Kind + ":" + s.Server
	case s.Kind == SourceWorker && s.Capability != "":
		return s.Kind + ":" + s.Capability
	case s.Kind == "":
		return SourceGo
	}
	return s.Kind
}

// Sourced is a tool that says where it runs. A tool that is not Sourced is
// SourceGo; the built-in tools say SourceBuiltin.
type Sourced interface{ Source() Source }

// SourceOf returns where t runs.
func SourceOf(t Tool) Source {
	if s, ok := t.(Sourced); ok {
		if src := s.Source(); src.Kind != "" {
			return src
		}
	}
	return Source{Kind: SourceGo}
}

// Result is a tool's output: Text for the model and the log, Parts for
// content that is not text (images, resources, structured content), which
// TOOL_CALL_COMPLETED records as typed parts.
type Result struct {
	Text  string
	Parts []fsm.ToolPart
}

// PartsTool is a tool whose output has typed parts; the agent calls
// CallParts instead of Call.
type PartsTool interface {
	Tool
	CallParts(ctx context.Context, call Call) (Result, error)
}

// Provider is a changing set of tools (an MCP server adds and removes
// tools). The agent asks it for its tools whenever it resolves a task
// type, so a tool that appears later matches the types' globs.
type Provider interface {
	// Tools returns the tools now, in a stable order.
	Tools() []Tool
	// Changed returns a channel closed when the set changes; call it again
	// for the next change.
	Changed() <-chan struct{}
}

// ErrWorkerTool is what WorkerTool.Call returns: a worker tool runs as a
// broker task, never in the daemon.
var ErrWorkerTool = errors.New("tools: a worker tool runs as a broker task, not in the daemon")

// WorkerTool is a tool run by a broker worker with Capability: a call
// creates a dispatch task whose body is the call's arguments, and the
// task's result (or its failure) is the call's. Deadlines, retries,
// heartbeats and the dead-letter queue are the broker's (the zero values
// are the broker's defaults).
type WorkerTool struct {
	ToolName, ToolDescription string
	Params                    json.RawMessage
	Capability                string
	TimeoutSeconds            int
	MaxRetries                int
	HeartbeatSeconds          int
}

// WorkerCall is one call of a worker tool: the broker task it runs as,
// as the agent asks for it (agent.Options.Delegate) and the broker
// creates it (broker.CreateToolTask).
type WorkerCall struct {
	// Parent is the agent task; Child the broker task's id, drawn and
	// recorded in TOOL_CALL_STARTED.Task before the task is created.
	Parent, Child string
	// Cause is the call's TOOL_CALL_STARTED, Correlation the agent task's
	// root input.
	Cause, Correlation ulid.ULID
	// Key is the call's idempotency key: a second call with it (a run
	// after a crash) creates nothing.
	Key string
	// Tool is the worker tool called.
	Tool *WorkerTool
	// Arguments are the call's arguments (a JSON object), the broker
	// task's body.
	Arguments json.RawMessage
}

func (w *WorkerTool) Name() string                { return w.ToolName }
func (w *WorkerTool) Description() string         { return w.ToolDescription }
func (w *WorkerTool) Parameters() json.RawMessage { return w.Params }

// Source is SourceWorker with the tool's capability.
func (w *WorkerTool) Source() Source { return Source{Kind: SourceWorker, Capability: w.Capability} }

// Call returns ErrWorkerTool: the agent delegates a worker tool's call to
// the broker instead of calling it.
func (w *WorkerTool) Call(context.Context, Call) (string, error) {
	return "", fmt.Errorf("%w: %s (capability %s)", ErrWorkerTool, w.ToolName, w.Capability)
}

// Decode unmarshals the call's arguments into v, refusing unknown fields so
// that a misspelt argument is an error the model can correct rather than a
// silently ignored one.
func (c Call) Decode(v any) error {
	args := c.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytesReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid arguments: %v", err)
	}
	return nil
}

// Func makes a Tool from a function. params is the JSON Schema of the
// arguments (nil for none).
func Func(name, description string, params json.RawMessage, fn func(ctx context.Context, call Call) (string, error)) Tool {
	return funcTool{name: name, description: description, params: params, fn: fn, source: Source{Kind: SourceGo}}
}

// builtin is Func for the built-in tools: their Source says SourceBuiltin.
func builtin(name, description string, params json.RawMessage, fn func(ctx context.Context, call Call) (string, error)) Tool {
	return funcTool{name: name, description: description, params: params, fn: fn, source: Source{Kind: SourceBuiltin}}
}

// reader is builtin for a built-in tool that only reads (see
// SideEffectFree).
func reader(name, description string, params json.RawMessage, fn func(ctx context.Context, call Call) (string, error)) Tool {
	t := builtin(name, description, params, fn).(funcTool)
	t.sideEffectFree = true
	return t
}

type funcTool struct {
	name, description string
	params            json.RawMessage
	fn                func(context.Context, Call) (string, error)
	source            Source
	sideEffectFree    bool // a built-in tool that only reads (SideEffectFree)
}

func (f funcTool) Source() Source { return f.source }

// SideEffectFree reports whether t is a built-in tool that only reads
// (current_time, memory_list, memory_read): running it changes nothing,
// in Pegasus or outside it, so running it again after a crash is
// harmless whatever its key. The agent records such a call's start and
// result together, after it ran, in the append of the model's answer
// that asked for it (docs/tools.md, the at-least-once rule). Every other
// tool (a Go tool, an MCP tool, a worker tool, a built-in tool that
// writes or notifies) is not: its start is recorded before it runs.
func SideEffectFree(t Tool) bool {
	f, ok := t.(funcTool)
	return ok && f.sideEffectFree && f.source.Kind == SourceBuiltin
}

func (f funcTool) Name() string                                     { return f.name }
func (f funcTool) Description() string                              { return f.description }
func (f funcTool) Parameters() json.RawMessage                      { return f.params }
func (f funcTool) Call(ctx context.Context, c Call) (string, error) { return f.fn(ctx, c) }

// ErrUnknownTool is returned by Registry.Lookup for a name no tool has.
var ErrUnknownTool = errors.New("tools: unknown tool")

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Registry is a set of tools by name. It is immutable once built and safe
// for concurrent use.
type Registry struct {
	byName map[string]Tool
	names  []string // sorted
}

// NewRegistry returns a registry of the given tools. Two tools with one
// name, or an invalid name, are an error.
func NewRegistry(ts ...Tool) (*Registry, error) {
	r := &Registry{byName: make(map[string]Tool, len(ts))}
	for _, t := range ts {
		if t == nil {
			return nil, errors.New("tools: nil tool")
		}
		name := t.Name()
		if !validName.MatchString(name) {
			return nil, fmt.Errorf("tools: invalid tool name %q (letters, digits, _ and -, at most 64)", name)
		}
		if _, dup := r.byName[name]; dup {
			return nil, fmt.Errorf("tools: two tools are named %q", name)
		}
		if p := t.Parameters(); len(p) > 0 && !json.Valid(p) {
			return nil, fmt.Errorf("tools: tool %q: parameters are not valid JSON", name)
		}
		r.byName[name] = t
		r.names = append(r.names, name)
	}
	sort.Strings(r.names)
	return r, nil
}

// Lookup returns the tool called name.
func (r *Registry) Lookup(name string) (Tool, error) {
	if t, ok := r.byName[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownTool, name)
}

// Has reports whether the registry holds a tool called name.
func (r *Registry) Has(name string) bool { _, ok := r.byName[name]; return ok }

// Tools returns the tools in name order.
func (r *Registry) Tools() []Tool {
	out := make([]Tool, len(r.names))
	for i, n := range r.names {
		out[i] = r.byName[n]
	}
	return out
}

// Names returns the tool names in sorted order.
func (r *Registry) Names() []string { return append([]string(nil), r.names...) }

// Subset returns a registry of the named tools, all of which must exist.
func (r *Registry) Subset(names ...string) (*Registry, error) {
	ts := make([]Tool, 0, len(names))
	for _, n := range names {
		t, err := r.Lookup(n)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return NewRegistry(ts...)
}

// Specs describes the tools to the model, in name order.
func (r *Registry) Specs() []llm.ToolSpec {
	specs := make([]llm.ToolSpec, 0, len(r.names))
	for _, n := range r.names {
		t := r.byName[n]
		specs = append(specs, llm.ToolSpec{Name: n, Description: t.Description(), Parameters: t.Parameters()})
	}
	return specs
}
