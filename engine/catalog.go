package engine

import (
	"slices"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/mcp"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/api"
)

// Catalog lists what the engine offers: its tools with their sources and
// health, its models with their probes and counts, its task types
// resolved. It is the server's Catalog (GET /v1/tools, /v1/models,
// /v1/task-types); nothing in it is a secret.
type Catalog struct{ e *Engine }

// Catalog returns the engine's catalog.
func (e *Engine) Catalog() *Catalog { return &Catalog{e} }

// Tools is every tool known now: built-in, Go, MCP and worker tools.
func (c *Catalog) Tools() []api.Tool {
	types := c.e.agent.Types()
	servers := map[string]mcp.ServerStatus{}
	for _, s := range c.e.MCPServers() {
		servers[s.Name] = s
	}
	ts := c.e.agent.Tools()
	out := make([]api.Tool, 0, len(ts))
	for _, t := range ts {
		src := tools.SourceOf(t)
		at := api.Tool{Name: t.Name(), Description: t.Description(), Parameters: t.Parameters(),
			Source: src.Kind, Server: src.Server, Capability: src.Capability}
		if src.Kind == tools.SourceMCP {
			s := servers[src.Server]
			at.Health, at.Error = health(s.State), s.Error
		}
		for _, tt := range types {
			if slices.Contains(tt.ToolNames, at.Name) {
				at.TaskTypes = append(at.TaskTypes, tt.Name)
			}
		}
		out = append(out, at)
	}
	return out
}

// MCPServers is each MCP server with its health (GET /v1/tools' servers,
// /readyz's details), a server that offers no tool included.
func (c *Catalog) MCPServers() []api.MCPServer {
	ss := c.e.MCPServers()
	out := make([]api.MCPServer, 0, len(ss))
	for _, s := range ss {
		out = append(out, api.MCPServer{Name: s.Name, Transport: s.Transport, Health: health(s.State), Error: s.Error,
			Tools: s.Tools, Restarts: s.Restarts, Since: s.Since})
	}
	return out
}

// health is a tool's health from its server's state.
func health(state string) string {
	switch state {
	case "ready":
		return "ok"
	case "down":
		return "down"
	}
	return "starting"
}

// Models is every model, the default first, with its probe at start and
// its calls and failed calls since.
func (c *Catalog) Models() []api.Model {
	out := make([]api.Model, 0, len(c.e.setup.models))
	for _, m := range c.e.setup.models {
		am := api.Model{Name: m.name, BaseURL: llm.RedactURL(m.opts.BaseURL), Model: m.opts.Model, Default: m.def,
			Calls: m.model.calls.Load(), Errors: m.model.failed.Load()}
		if am.Model == "" {
			am.Model = m.model.Model.Name()
		}
		if p := m.probed(); p != nil {
			am.Probe = api.ModelProbe{OK: p.OK, Status: p.Status, Error: p.Error, At: p.At}
		}
		out = append(out, am)
	}
	return out
}

// TaskTypes is every task type, resolved now: its tools (globs matched
// against the tools known now), model, limits and version.
func (c *Catalog) TaskTypes() []api.TaskType {
	o := c.e.opts
	types := c.e.agent.Types()
	out := make([]api.TaskType, 0, len(types))
	for _, t := range types {
		at := api.TaskType{Name: t.Name, Description: t.Description, Model: t.Model, Fallback: t.Fallback, Tools: t.ToolNames,
			MaxIterations: t.MaxIterations, Reflection: !o.DisableReflection, Version: t.Version, BuiltIn: t.BuiltIn}
		if at.Model == "" {
			at.Model = c.e.setup.def.name
		}
		if at.MaxIterations == 0 {
			at.MaxIterations = o.MaxIterations
		}
		if t.Reflection != nil {
			at.Reflection = *t.Reflection
		}
		out = append(out, at)
	}
	return out
}
