package tools

import (
	"context"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Source says where a tool runs.
type Source struct {
	Kind       string `json:"kind"`                 // SourceBuiltin, SourceGo, SourceMCP or SourceWorker
	Server     string `json:"server,omitempty"`     // the MCP server's name (SourceMCP)
	Capability string `json:"capability,omitempty"` // the broker capability (SourceWorker)
}

// The kinds of Source.
//
// Persisted: these strings are recorded in tool call events; never change
// an existing value.
const (
	SourceBuiltin = "builtin"
	SourceGo      = "go"
	SourceMCP     = "mcp"
	SourceWorker  = "worker"
)

// String returns "builtin", "go", "mcp:everything" or "worker:shout".
func (s Source) String() string {
	switch {
	case s.Kind == SourceMCP && s.Server != "":
		return s.Kind + ":" + s.Server
	case s.Kind == SourceWorker && s.Capability != "":
		return s.Kind + ":" + s.Capability
	}
	return s.Kind
}

// Sourced is a tool that says where it runs; a tool that is not is
// SourceGo (the built-ins say SourceBuiltin).
type Sourced interface{ Source() Source }

// SourceOf returns where t runs.
func SourceOf(t Tool) Source {
	if s, ok := t.(Sourced); ok {
		return s.Source()
	}
	return Source{Kind: SourceGo}
}

// Result is a tool's output: Text for the model and the log, Parts for
// content that is not text.
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
// tools).
type Provider interface {
	// Tools returns the tools now, in a stable order.
	Tools() []Tool
	// Changed returns a channel closed when the set changes; call again for
	// the next change.
	Changed() <-chan struct{}
}
