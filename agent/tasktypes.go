package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	glob "path"
	"slices"
	"strings"
	"sync"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
)

// TaskType is a kind of task: the system prompt the model gets, the tools
// it may call, the model it runs with and its loop's bounds. A call to a
// tool outside the type's set fails that step with an error naming the
// tools that are available.
type TaskType struct {
	Name         string
	Description  string
	SystemPrompt string
	// Tools are the names of the tools the model sees and may call, or
	// globs over them (path.Match syntax: "fs__*", "*"). They are resolved
	// against every tool known when a task of the type reasons (built-in,
	// Options.Tools, the Providers' tools now, worker tools), so a glob
	// matches an MCP server's tool that appeared after the start. The
	// built-in tools (memory_*, notify, current_time, ask_user) are offered
	// only when listed or matched; the built-in types always offer
	// ask_user.
	Tools []string
	// Model is a name in Options.Models; "" is Options.Model.
	Model string
	// Fallback are names in Options.Models, tried in order when the model
	// fails with a retryable error (429, 5xx, a timeout) after its own
	// attempts (llm.WithFallback).
	Fallback []string
	// MaxIterations bounds the type's reason/act loop; 0 is
	// Options.MaxIterations.
	MaxIterations int
	// Reflection turns post-task reflection on or off for the type; nil is
	// !Options.DisableReflection.
	Reflection *bool
	// BuiltIn is set on the types of DefaultTaskTypes. A type of
	// Options.TaskTypes with the same name replaces the built-in one.
	BuiltIn bool
}

// Version is the version of the type as a task records it in
// TASK_CREATED: a hex SHA-256 prefix of its system prompt and its sorted
// tool list (toolNames, the tools it resolves to now), so that two tasks
// with one version ran under the same prompt and tools.
func (t TaskType) Version(toolNames []string) string {
	names := slices.Clone(toolNames)
	slices.Sort(names)
	h := sha256.New()
	h.Write([]byte(t.SystemPrompt))
	h.Write([]byte{0})
	h.Write([]byte(strings.Join(names, "\n")))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// TaskTypeInfo is a task type as resolved now: the tools its names and
// globs match and its version.
type TaskTypeInfo struct {
	TaskType
	ToolNames []string // sorted; ask_user included when offered
	Version   string
}

// The built-in task types.
const (
	TypeGeneral = "general"
	TypeExplore = "explore"
	TypePlan    = "plan"
)

// AskUserTool is the pseudo-tool through which the model asks the user a
// question: a call to it ends reasoning with NEED_MORE_INFO and suspends the
// task until a message answers. It is offered with every built-in task type
// and with the types that list it, and is never executed.
const AskUserTool = "ask_user"

var askUserSpec = llm.ToolSpec{
	Name:        AskUserTool,
	Description: "Ask the user a clarifying question when the request is ambiguous or missing information you need. The task waits for the answer.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"],"additionalProperties":false}`),
}

// askUser is ask_user as a tool, for the lists of tools (Agent.Tools):
// the agent never calls it, a call to it ends reasoning instead.
type askUser struct{}

func (askUser) Name() string                { return AskUserTool }
func (askUser) Description() string         { return askUserSpec.Description }
func (askUser) Parameters() json.RawMessage { return askUserSpec.Parameters }
func (askUser) Source() tools.Source        { return tools.Source{Kind: tools.SourceBuiltin} }
func (askUser) Call(context.Context, tools.Call) (string, error) {
	return "", fmt.Errorf("%s is never executed: a call to it asks the user and suspends the task", AskUserTool)
}

const commonPrompt = `You are Pegasus, a task agent. You work in a loop: each turn you either call tools or answer.
- To act, call one or more tools; you will see their results next turn.
- When you have what you need, answer the user directly in plain text without calling a tool; that answer is the task's result.
- If the request is ambiguous or lacks information only the user has, call ask_user with one short question.
- Long-term memory holds facts (facts/*.md) and episodes (episodes/*.md); its index may be given to you. Read a file with memory_read before relying on it.
`

// DefaultTaskTypes returns the three built-in task types:
//
//   - general: every tool the agent knows ("*": the built-in ones,
//     Options.Tools, MCP servers' and worker tools);
//   - explore: read-only investigation (memory_list, memory_read,
//     current_time, notify): it cannot change memory;
//   - plan: produce a plan for the user to follow; it may read memory and
//     record the plan in memory, nothing else.
//
// A type of Options.TaskTypes with one of these names replaces it.
func DefaultTaskTypes() []TaskType {
	return []TaskType{
		{
			Name:         TypeGeneral,
			Description:  "General requests, with every tool the agent has.",
			SystemPrompt: commonPrompt + "You handle general requests. Use tools when they help; answer concisely.",
			Tools:        []string{"*"},
			BuiltIn:      true,
		},
		{
			Name:        TypeExplore,
			Description: "Read-only investigation: reads memory, cannot change it.",
			SystemPrompt: commonPrompt + "You explore and report: investigate what is asked with the tools you have and report your findings with their sources. " +
				"You cannot change memory in this mode.",
			Tools:   []string{tools.MemoryList, tools.MemoryRead, tools.CurrentTime, tools.Notify},
			BuiltIn: true,
		},
		{
			Name:        TypePlan,
			Description: "Turns a request into a plan for the user, which it may save to memory.",
			SystemPrompt: commonPrompt + "You plan: turn the request into a short numbered plan of concrete steps, with risks and open questions. " +
				"You may save the plan to memory (facts/plans/...). Do not carry the plan out.",
			Tools:   []string{tools.MemoryList, tools.MemoryRead, tools.MemoryWrite, tools.MemoryPatch, tools.CurrentTime, tools.Notify},
			BuiltIn: true,
		},
	}
}

// mergeTypes returns the built-in types with those of user replacing the
// ones they name, then the other types of user in their order.
func mergeTypes(user []TaskType) []TaskType {
	out := DefaultTaskTypes()
	for _, tt := range user {
		if i := slices.IndexFunc(out, func(b TaskType) bool { return b.BuiltIn && b.Name == tt.Name }); i >= 0 {
			out[i] = tt
			continue
		}
		out = append(out, tt)
	}
	return out
}

// taskKind is a resolved task type: its registry, what the model sees,
// its model and bounds.
type taskKind struct {
	TaskType
	registry      *tools.Registry
	specs         []llm.ToolSpec // the tools (and ask_user when offered), for the model
	toolNames     []string       // the names of specs, sorted
	version       string
	model         llm.Model
	modelName     string // the name in Options.Models, or the default model's Name
	maxIterations int
	reflect       bool
}

// isGlob reports whether a tool pattern is a glob rather than a name.
func isGlob(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// resolveTypes resolves types against all, the tools known now. With
// strict, a tool name no tool has is an error (no Provider can add it
// later); otherwise it is left out until a tool of that name appears.
func resolveTypes(types []TaskType, all *tools.Registry, strict bool) (map[string]*taskKind, error) {
	out := make(map[string]*taskKind, len(types))
	names := append(all.Names(), AskUserTool)
	for _, tt := range types {
		if tt.Name == "" {
			return nil, fmt.Errorf("agent: a task type has no name")
		}
		if _, dup := out[tt.Name]; dup {
			return nil, fmt.Errorf("agent: two task types are named %q", tt.Name)
		}
		var chosen []string
		askUser := tt.BuiltIn
		for _, p := range tt.Tools {
			if !isGlob(p) {
				switch {
				case p == AskUserTool:
					askUser = true
				case all.Has(p):
					chosen = append(chosen, p)
				case strict:
					return nil, fmt.Errorf("agent: task type %q: %w %q", tt.Name, tools.ErrUnknownTool, p)
				}
				continue
			}
			if _, err := glob.Match(p, ""); err != nil {
				return nil, fmt.Errorf("agent: task type %q: tool pattern %q: %w", tt.Name, p, err)
			}
			for _, n := range names {
				if ok, _ := glob.Match(p, n); ok {
					if n == AskUserTool {
						askUser = true
					} else {
						chosen = append(chosen, n)
					}
				}
			}
		}
		slices.Sort(chosen)
		chosen = slices.Compact(chosen)
		reg, err := all.Subset(chosen...)
		if err != nil {
			return nil, fmt.Errorf("agent: task type %q: %w", tt.Name, err)
		}
		specs := reg.Specs()
		toolNames := reg.Names()
		if askUser {
			specs = append(specs, askUserSpec)
			toolNames = append(toolNames, AskUserTool)
			slices.Sort(toolNames)
		}
		out[tt.Name] = &taskKind{TaskType: tt, registry: reg, specs: specs, toolNames: toolNames, version: tt.Version(toolNames)}
	}
	if _, ok := out[TypeGeneral]; !ok {
		return nil, fmt.Errorf("agent: the %q task type is required (it is the default)", TypeGeneral)
	}
	return out, nil
}

// catalog is every tool the agent knows and its task types resolved over
// them. The Providers' tools change: the catalog asks them again, and
// resolves the types again, when one says its set changed.
type catalog struct {
	fixed     []tools.Tool // built-in, then Options.Tools: their names are checked at New
	providers []tools.Provider
	types     []TaskType
	models    map[string]modelChoice // by type name
	logger    *slog.Logger

	mu      sync.Mutex
	changed []<-chan struct{} // per provider, the channel of its last Tools
	all     *tools.Registry
	kinds   map[string]*taskKind
}

// modelChoice is the model a type runs with.
type modelChoice struct {
	model llm.Model
	name  string
}

// newCatalog checks the fixed tools, the types and their models, and
// resolves the types once (strictly when no Provider can add tools).
func newCatalog(fixed []tools.Tool, providers []tools.Provider, user []TaskType, opts *Options) (*catalog, error) {
	if _, err := tools.NewRegistry(fixed...); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	c := &catalog{fixed: fixed, providers: providers, types: mergeTypes(user), models: map[string]modelChoice{}, logger: opts.Logger}
	for _, tt := range c.types {
		if tt.MaxIterations < 0 || tt.MaxIterations > 1000 {
			return nil, fmt.Errorf("agent: task type %q: max iterations %d is not in 0-1000", tt.Name, tt.MaxIterations)
		}
		m, err := chooseModel(tt, opts)
		if err != nil {
			return nil, err
		}
		c.models[tt.Name] = m
	}
	all, err := c.collect()
	if err != nil {
		return nil, err
	}
	kinds, err := resolveTypes(c.types, all, len(providers) == 0)
	if err != nil {
		return nil, err
	}
	c.install(all, kinds, opts)
	return c, nil
}

// chooseModel returns the model of tt: its named model (or the default
// one) with its fallbacks.
func chooseModel(tt TaskType, opts *Options) (modelChoice, error) {
	lookup := func(name string) (llm.Model, error) {
		m, ok := opts.Models[name]
		if !ok || m == nil {
			known := make([]string, 0, len(opts.Models))
			for n := range opts.Models {
				known = append(known, n)
			}
			slices.Sort(known)
			return nil, fmt.Errorf("agent: task type %q: unknown model %q (known: %s)", tt.Name, name, strings.Join(known, ", "))
		}
		return m, nil
	}
	primary, name := opts.Model, opts.Model.Name()
	if tt.Model != "" {
		m, err := lookup(tt.Model)
		if err != nil {
			return modelChoice{}, err
		}
		primary, name = m, tt.Model
	}
	var fallbacks []llm.Model
	for _, f := range tt.Fallback {
		m, err := lookup(f)
		if err != nil {
			return modelChoice{}, err
		}
		fallbacks = append(fallbacks, m)
	}
	return modelChoice{model: llm.WithFallback(primary, fallbacks...), name: name}, nil
}

// collect returns a registry of every tool known now, noting each
// provider's change channel first (a change while it lists is seen next
// time). A provider's tool whose name is invalid or taken is left out,
// with a warning.
func (c *catalog) collect() (*tools.Registry, error) {
	ts := slices.Clone(c.fixed)
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		seen[t.Name()] = true
	}
	c.changed = c.changed[:0]
	for _, p := range c.providers {
		c.changed = append(c.changed, p.Changed())
		for _, t := range p.Tools() {
			if t == nil {
				continue
			}
			if _, err := tools.NewRegistry(t); err != nil || seen[t.Name()] {
				c.logger.Warn("a provider's tool is left out: its name is invalid or taken", "tool", t.Name(), "source", tools.SourceOf(t).String())
				continue
			}
			seen[t.Name()] = true
			ts = append(ts, t)
		}
	}
	return tools.NewRegistry(ts...)
}

func (c *catalog) install(all *tools.Registry, kinds map[string]*taskKind, opts *Options) {
	for name, k := range kinds {
		m := c.models[name]
		k.model, k.modelName = m.model, m.name
		k.maxIterations = k.MaxIterations
		if k.maxIterations <= 0 {
			k.maxIterations = opts.MaxIterations
		}
		k.reflect = !opts.DisableReflection
		if k.Reflection != nil {
			k.reflect = *k.Reflection
		}
	}
	c.all, c.kinds = all, kinds
}

// current returns every tool known now and the types resolved over them,
// resolving again when a provider changed.
func (c *catalog) current(opts *Options) (*tools.Registry, map[string]*taskKind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stale := false
	for _, ch := range c.changed {
		select {
		case <-ch:
			stale = true
		default:
		}
	}
	if stale {
		all, err := c.collect()
		if err == nil {
			var kinds map[string]*taskKind
			if kinds, err = resolveTypes(c.types, all, false); err == nil {
				c.install(all, kinds, opts)
			}
		}
		if err != nil {
			c.logger.Error("tools changed but could not be resolved; the previous set stays", "err", err)
		}
	}
	return c.all, c.kinds
}
