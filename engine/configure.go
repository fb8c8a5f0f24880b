package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/mcp"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/broker"
	"github.com/pegasus-engine/pegasus/config"
)

// DefaultModelName is the catalog's name of the default model when the
// configuration names none (the --llm-* flags' model, or the offline one).
const DefaultModelName = config.DefaultModelName

// ErrNoBroker is what a worker tool call gets when the broker is not
// running (the engine is stopping, or failed to start it).
var ErrNoBroker = errors.New("engine: the broker is not running")

// setup is what the engine built from Options.Config: the named models,
// the MCP servers' manager, the worker tools, the task types and the hash.
type setup struct {
	models []*namedModel // the default first
	def    *namedModel
	mcp    *mcp.Manager // nil without servers
	stop   context.CancelFunc
	tools  []tools.Tool // the worker tools
	types  []agent.TaskType
	hash   string // Config.Hash(); "" without a file

	delegate *delegator
}

// namedModel is one model of the catalog: its client, counted, and the
// probe of its endpoint.
type namedModel struct {
	name  string
	opts  llm.Options // BaseURL "": not an HTTP endpoint (the offline model)
	hints llm.ProbeHints
	model *countingModel
	def   bool

	mu    sync.Mutex
	probe *llm.ProbeResult
}

func (m *namedModel) setProbe(r *llm.ProbeResult) {
	m.mu.Lock()
	m.probe = r
	m.mu.Unlock()
}

func (m *namedModel) probed() *llm.ProbeResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.probe
}

// countingModel counts a model's calls and failed calls, and bounds the
// calls at once when sem is set (the model's concurrency).
type countingModel struct {
	llm.Model
	sem           chan struct{}
	calls, failed atomic.Int64
}

func (m *countingModel) Complete(ctx context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	if m.sem != nil {
		select {
		case m.sem <- struct{}{}:
			defer func() { <-m.sem }()
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	}
	m.calls.Add(1)
	resp, err := m.Model.Complete(ctx, req, report)
	if err != nil {
		m.failed.Add(1)
	}
	return resp, err
}

// modelOptions is the client's options of a configured model; maxConns is
// the daemon's model-call concurrency, for a model that sets none.
func modelOptions(m *config.Model, maxConns int) llm.Options {
	o := llm.Options{BaseURL: m.BaseURL, Model: m.Model, APIKey: m.APIKey, Timeout: m.Timeout, MaxAttempts: m.MaxAttempts, MaxConns: maxConns,
		NoStream: m.NoStream}
	if m.Concurrency > 0 {
		o.MaxConns = m.Concurrency
	}
	return o
}

// ModelHints are the probe's hints of a configured model.
func ModelHints(m *config.Model) llm.ProbeHints {
	h := llm.ProbeHints{BaseURL: fmt.Sprintf("model %q's baseUrl", m.Name), Model: fmt.Sprintf("model %q's model", m.Name),
		APIKey: fmt.Sprintf("model %q's apiKeyEnv", m.Name)}
	if m.APIKeyEnv != "" {
		h.APIKey += " (" + m.APIKeyEnv + ")"
	}
	return h
}

// defaultFromConfig fills o.Model and o.LLM from the configuration's
// default model when the caller gave no model.
func defaultFromConfig(o *Options) error {
	if o.Model != nil || o.Config == nil {
		return nil
	}
	m := o.Config.DefaultModel()
	if m == nil {
		return nil
	}
	o.LLM = modelOptions(m, o.MaxConcurrentLLM)
	c, err := llm.New(o.LLM)
	if err != nil {
		return fmt.Errorf("engine: model %q: %w", m.Name, err)
	}
	o.Model = c
	return nil
}

// configure builds the models, the MCP manager, the worker tools and the
// task types of o (o.Model set: EnsureDefaults ran).
func configure(o *Options, logger *slog.Logger) (*setup, error) {
	s := &setup{delegate: &delegator{ready: make(chan struct{})}}
	f := o.Config
	defName := DefaultModelName
	if f != nil {
		s.hash = f.Hash()
		if m := f.DefaultModel(); m != nil {
			defName = m.Name
		}
	}
	s.def = &namedModel{name: defName, opts: o.LLM, hints: llm.FlagHints, model: &countingModel{Model: o.Model}, def: true, probe: o.ModelProbe}
	if f != nil {
		if m := f.DefaultModel(); m != nil {
			s.def.hints = ModelHints(m)
		}
	}
	s.models = append(s.models, s.def)
	if f == nil {
		return s, nil
	}
	for i := range f.Models {
		m := &f.Models[i]
		if m.Default {
			if m.Concurrency > 0 {
				s.def.model.sem = make(chan struct{}, m.Concurrency)
			}
			continue
		}
		opts := modelOptions(m, o.MaxConcurrentLLM)
		c, err := llm.New(opts)
		if err != nil {
			return nil, fmt.Errorf("engine: model %q: %w", m.Name, err)
		}
		nm := &namedModel{name: m.Name, opts: opts, hints: ModelHints(m), model: &countingModel{Model: c}}
		if m.Concurrency > 0 {
			nm.model.sem = make(chan struct{}, m.Concurrency)
		}
		s.models = append(s.models, nm)
	}
	for _, t := range f.Tools {
		s.tools = append(s.tools, &tools.WorkerTool{ToolName: t.Name, ToolDescription: t.Description, Params: t.Parameters,
			Capability: t.Capability, TimeoutSeconds: t.TimeoutSeconds, MaxRetries: t.MaxRetries, HeartbeatSeconds: t.HeartbeatSeconds})
	}
	s.types = taskTypes(f, s.tools)
	if servers := mcpServers(f); len(servers) > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		s.mcp, s.stop = mcp.Start(ctx, servers, &mcp.Options{Logger: logger.With("component", "mcp")}), cancel
	}
	return s, nil
}

// taskTypes is the built-in types, with the worker tools in general as
// agent.Options.Tools would have them, overridden and completed by the
// file's; nil when the file declares none (the agent's defaults).
func taskTypes(f *config.File, workers []tools.Tool) []agent.TaskType {
	if len(f.TaskTypes) == 0 {
		return nil
	}
	types := agent.DefaultTaskTypes()
	for _, t := range workers {
		types[0].Tools = append(types[0].Tools, t.Name())
	}
	for _, t := range f.TaskTypes {
		at := agent.TaskType{Name: t.Name, Description: t.Description, SystemPrompt: t.SystemPrompt, Tools: slices.Clone(t.Tools),
			Model: t.Model, Fallback: slices.Clone(t.Fallback), MaxIterations: t.MaxIterations, Reflection: t.Reflection}
		if i := slices.IndexFunc(types, func(b agent.TaskType) bool { return b.Name == t.Name }); i >= 0 {
			types[i] = at
		} else {
			types = append(types, at)
		}
	}
	return types
}

// agentOptions adds the setup's models, tools, types, providers and
// delegation to the agent's options.
func (s *setup) agentOptions(a *agent.Options) {
	a.Model = s.def.model
	if s.hash != "" {
		a.ConfigHash = "sha256:" + s.hash
	}
	a.Models = make(map[string]llm.Model, len(s.models))
	for _, m := range s.models {
		a.Models[m.name] = m.model
	}
	a.Tools = append(a.Tools, s.tools...)
	a.TaskTypes = s.types
	if s.mcp != nil {
		a.Providers = append(a.Providers, s.mcp)
	}
	a.Delegate = s.delegate.delegate
}

// stopping tells the MCP servers' manager that the daemon stops, so the
// calls the agent cancels at stop keep their servers' tasks for the next
// start to poll.
func (s *setup) stopping() {
	if s.mcp != nil {
		s.mcp.Stopping()
	}
}

// close stops the MCP servers.
func (s *setup) close() error {
	if s.mcp == nil {
		return nil
	}
	err := s.mcp.Close()
	s.stop()
	return err
}

// delegator hands a worker tool's call to the broker, once the broker
// runs (the agent starts, and may resume a call, before it).
type delegator struct {
	ready chan struct{} // closed when b is set, or the broker will not run
	b     *broker.Broker
	once  sync.Once
}

func (d *delegator) set(b *broker.Broker) {
	d.once.Do(func() {
		d.b = b
		close(d.ready)
	})
}

func (d *delegator) delegate(ctx context.Context, dl agent.Delegation) error {
	select {
	case <-d.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	if d.b == nil {
		return ErrNoBroker
	}
	return d.b.CreateToolTask(ctx, dl)
}

// startProbes probes each HTTP model not yet probed, in the background
// (a slow endpoint does not hold the start up); /v1/models shows the
// results.
func (e *Engine) startProbes() {
	for _, m := range e.setup.models {
		if m.opts.BaseURL == "" || m.probed() != nil {
			continue
		}
		e.probeWG.Add(1)
		go func() {
			defer e.probeWG.Done()
			r, _ := CheckModel(e.base, m.opts, m.hints, false, e.log.With("component", "model", "model_name", m.name))
			m.setProbe(r)
		}()
	}
}

// ConfigHash is the hash of the configuration file (config.File.Hash),
// "" without one.
func (e *Engine) ConfigHash() string { return e.setup.hash }

// MCPServers is the state of each MCP server (readiness details, the
// dashboard); nil without any.
func (e *Engine) MCPServers() []mcp.ServerStatus {
	if e.setup.mcp == nil {
		return nil
	}
	return e.setup.mcp.Servers()
}

// configSchedules are the configuration's schedules.
func configSchedules(f *config.File) []Schedule {
	out := make([]Schedule, len(f.Schedules))
	for i, s := range f.Schedules {
		out[i] = Schedule{Name: s.Name, Cron: s.Cron, Input: s.Input, Type: s.Type, Priority: s.Priority,
			ConcurrencyKey: s.ConcurrencyKey}
	}
	return out
}

// mcpServers are the configuration's MCP servers, as the manager takes
// them.
func mcpServers(f *config.File) []mcp.ServerConfig {
	out := make([]mcp.ServerConfig, len(f.MCPServers))
	for i, sv := range f.MCPServers {
		out[i] = mcp.ServerConfig{Name: sv.Name, Command: sv.Command, Args: sv.Args, Env: sv.Env, Dir: sv.Cwd,
			URL: sv.URL, Headers: sv.Headers, InitTimeout: sv.InitTimeout}
	}
	return out
}
