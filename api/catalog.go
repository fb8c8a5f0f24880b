package api

import (
	"encoding/json"
	"time"
)

// The sources of a tool (Tool.Source): where it runs.
const (
	SourceBuiltin = "builtin" // compiled into the daemon: memory, notify, current time, ask_user
	SourceGo      = "go"      // a Go tool an embedding program registered
	SourceMCP     = "mcp"     // a tool of an MCP server (Tool.Server)
	SourceWorker  = "worker"  // run by a broker worker with Tool.Capability
)

// The health of an MCP server's tools (Tool.Health).
const (
	HealthOK       = "ok"       // the server is up
	HealthStarting = "starting" // the server is starting, or restarting
	HealthDown     = "down"     // the server is down: its tools fail at once (Tool.Error says why)
)

// Tool is a tool the agent can call: GET /v1/tools.
type Tool struct {
	Name        string `json:"name"` // as the model sees it; an MCP tool's is <server>__<tool>
	Description string `json:"description"`
	// Parameters is the JSON Schema of the tool's arguments.
	Parameters json.RawMessage `json:"parameters"`
	Source     string          `json:"source"`               // SourceBuiltin, SourceGo, SourceMCP or SourceWorker
	Server     string          `json:"server,omitempty"`     // the MCP server's name (SourceMCP)
	Capability string          `json:"capability,omitempty"` // the broker capability of its workers (SourceWorker)
	// Health is the MCP server's (HealthOK, HealthStarting, HealthDown),
	// "" for the other sources; Error says why a server is down.
	Health string `json:"health,omitempty"`
	Error  string `json:"error,omitempty"`
	// TaskTypes are the task types that offer the tool to the model.
	TaskTypes []string `json:"task_types"`
}

// MCPServer is an MCP server the daemon runs or connects to: its tools
// are offered as <name>__<tool>.
type MCPServer struct {
	Name      string `json:"name"`
	Transport string `json:"transport"` // how the daemon reaches it: stdio (a command it runs) or Streamable HTTP (a URL)
	// Health is HealthOK, HealthStarting or HealthDown; Error says why a
	// server is down.
	Health   string    `json:"health"`
	Error    string    `json:"error,omitempty"`
	Tools    int       `json:"tools"`          // the tools it offers now
	Restarts int       `json:"restarts"`       // since the daemon started
	Since    time.Time `json:"since,omitzero"` // when it entered its health
}

// ToolList is the answer of GET /v1/tools: the tools, and the MCP
// servers they come from (a server that is down lists no tool, but is
// there).
type ToolList struct {
	Tools   []Tool      `json:"tools"`
	Servers []MCPServer `json:"servers"`
}

// Model is a model the agent calls: GET /v1/models.
type Model struct {
	Name    string `json:"name"`     // the name task types give it
	BaseURL string `json:"base_url"` // its OpenAI-compatible API
	Model   string `json:"model"`    // the model's name in that API
	Default bool   `json:"default"`  // the model of the task types that name none
	// Probe is what GET {base_url}/models answered when the daemon
	// started.
	Probe ModelProbe `json:"probe"`
	// Calls and Errors count the model's calls since the daemon started,
	// and those that failed.
	Calls  int64 `json:"calls"`
	Errors int64 `json:"errors"`
}

// ModelProbe is the answer of a model's API to GET {base_url}/models.
type ModelProbe struct {
	OK     bool      `json:"ok"`
	Status int       `json:"status,omitempty"` // the HTTP status; omitted when the API did not answer
	Error  string    `json:"error,omitempty"`  // why the probe failed
	At     time.Time `json:"at,omitzero"`      // omitted when the model was not probed
}

// ModelList is the answer of GET /v1/models.
type ModelList struct {
	Models []Model `json:"models"`
}

// TaskType is a type of task the agent runs (CreateTask.Type):
// GET /v1/task-types.
type TaskType struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Model       string   `json:"model"`    // the model it runs with (Model.Name)
	Fallback    []string `json:"fallback"` // the models tried in order when it fails with a retryable error
	// Tools are the names of the tools offered to the model, its globs
	// (fs__*) resolved.
	Tools         []string `json:"tools"`
	MaxIterations int      `json:"max_iterations"`
	Reflection    bool     `json:"reflection"` // the agent reflects on each result
	// Version is a hash of the type's system prompt and tool list, recorded
	// in each task of the type (TASK_CREATED's type_version).
	Version string `json:"version"`
	BuiltIn bool   `json:"built_in"` // general, explore and plan, unless the configuration overrides them
}

// TaskTypeList is the answer of GET /v1/task-types.
type TaskTypeList struct {
	TaskTypes []TaskType `json:"task_types"`
}
