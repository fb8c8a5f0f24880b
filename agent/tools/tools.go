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
	// (MCP tasks), "" for none.
	Handle string
	// RecordHandle records a durable handle (as a TOOL_CALL_STARTED with
	// Handle set) before the tool waits on it; nil when not supported.
	RecordHandle func(ctx context.Context, handle string) error
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
	return funcTool{name: name, description: description, params: params, fn: fn}
}

type funcTool struct {
	name, description string
	params            json.RawMessage
	fn                func(context.Context, Call) (string, error)
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
