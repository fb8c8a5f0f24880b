package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/parser"

	"github.com/pegasus-engine/pegasus/agent/llm"
)

// ErrInvalid is what every *Error wraps: the file cannot be used.
var ErrInvalid = errors.New("config: invalid configuration")

// Error is a problem in the file: where it is and what is wrong.
type Error struct {
	File string // the file's path as given to Load
	Line int    // 1-based; 0 when the problem has no place (the file cannot be read)
	Key  string // the key's path, for example "mcpServers.everything.command" or "tools[1].name"
	Msg  string
}

// Error returns "FILE:LINE: KEY: MSG".
func (e *Error) Error() string {
	switch {
	case e.Line == 0 && e.Key == "":
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	case e.Key == "":
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	case e.Line == 0:
		return fmt.Sprintf("%s: %s: %s", e.File, e.Key, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Key, e.Msg)
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

// File is a loaded, checked configuration: strings expanded, keys read
// from the environment, system prompt files read.
type File struct {
	Path       string
	Models     []Model
	TaskTypes  []TaskType
	MCPServers []MCPServer // by name
	Tools      []Tool
	Schedules  []Schedule
	// Limits are the concurrency limits per key (limits.go).
	Limits Limits

	doc     document          // the file as written (references, not secrets), for Hash and Redacted
	prompts map[string]string // a task type's prompt file's text, by type name, for Hash
}

// Model is a named OpenAI-compatible model endpoint.
type Model struct {
	Name    string
	BaseURL string
	Model   string
	// APIKeyEnv names the variable the key was read from; APIKey is its
	// value (empty for a server that needs no key).
	APIKeyEnv string
	APIKey    llm.Secret
	// Timeout bounds one attempt (0: the client's default, 120s).
	Timeout time.Duration
	// MaxAttempts is the attempts per call (0: the client's default, 4).
	MaxAttempts int
	// Concurrency bounds this model's calls at once (0: the daemon's
	// --max-concurrent-llm).
	Concurrency int
	// Default makes it the model of every task type that names none.
	Default bool
	// NoStream is "stream: false": the model's calls ask for one JSON
	// body instead of streaming the reply (the default streams).
	NoStream bool
}

// TaskType is a kind of task: its prompt, tools, model and limits.
type TaskType struct {
	Name, Description string
	// SystemPrompt is the prompt, read from SystemPromptFile when that
	// is set (relative to the configuration file).
	SystemPrompt     string
	SystemPromptFile string
	// Tools are tool names or globs ("fs__*"); built-ins are offered
	// only when listed.
	Tools         []string
	Model         string   // a model's name; "" is the default model
	Fallback      []string // models tried in order on retryable failures
	MaxIterations int      // 0: the daemon's --max-iterations
	Reflection    *bool    // nil: the daemon's setting
}

// MCPServer is an MCP server: a command run over stdio, or a URL spoken
// to over Streamable HTTP.
type MCPServer struct {
	Name    string
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string // relative to the configuration file; "" is the daemon's directory
	URL     string
	Headers map[string]string
	// InitTimeout bounds the server's start (connecting, initialize, the
	// first tools/list); 0 is the daemon's default (30s).
	InitTimeout time.Duration
}

// Tool is a tool run by a broker worker with Capability.
type Tool struct {
	Name, Description string
	Parameters        json.RawMessage // a JSON Schema of type object
	Capability        string
	TimeoutSeconds    int
	MaxRetries        int
	HeartbeatSeconds  int
}

// Schedule is a recurring task, as --schedule declares one.
type Schedule struct {
	Name, Cron, Input, Type string
	Priority                int
	ConcurrencyKey          string
}

// The file as written: what YAML decodes into, and what Hash and
// Redacted print.
type document struct {
	Models     []rawModel           `yaml:"models,omitempty" json:"models,omitempty"`
	TaskTypes  []rawTaskType        `yaml:"taskTypes,omitempty" json:"taskTypes,omitempty"`
	MCPServers map[string]rawServer `yaml:"mcpServers,omitempty" json:"mcpServers,omitempty"`
	Tools      []rawTool            `yaml:"tools,omitempty" json:"tools,omitempty"`
	Schedules  []rawSchedule        `yaml:"schedules,omitempty" json:"schedules,omitempty"`
	Limits     *rawLimits           `yaml:"limits,omitempty" json:"limits,omitempty"`
}

type rawModel struct {
	Name        string `yaml:"name" json:"name"`
	BaseURL     string `yaml:"baseUrl" json:"baseUrl"`
	Model       string `yaml:"model" json:"model"`
	APIKeyEnv   string `yaml:"apiKeyEnv,omitempty" json:"apiKeyEnv,omitempty"`
	Timeout     string `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	MaxAttempts int    `yaml:"maxAttempts,omitempty" json:"maxAttempts,omitempty"`
	Concurrency int    `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	Default     bool   `yaml:"default,omitempty" json:"default,omitempty"`
	Stream      *bool  `yaml:"stream,omitempty" json:"stream,omitempty"`
}

type rawTaskType struct {
	Name             string   `yaml:"name" json:"name"`
	Description      string   `yaml:"description,omitempty" json:"description,omitempty"`
	SystemPrompt     string   `yaml:"systemPrompt,omitempty" json:"systemPrompt,omitempty"`
	SystemPromptFile string   `yaml:"systemPromptFile,omitempty" json:"systemPromptFile,omitempty"`
	Tools            []string `yaml:"tools,omitempty" json:"tools,omitempty"`
	Model            string   `yaml:"model,omitempty" json:"model,omitempty"`
	Fallback         []string `yaml:"fallback,omitempty" json:"fallback,omitempty"`
	MaxIterations    int      `yaml:"maxIterations,omitempty" json:"maxIterations,omitempty"`
	Reflection       *bool    `yaml:"reflection,omitempty" json:"reflection,omitempty"`
}

type rawServer struct {
	// Type is what VS Code writes ("stdio", "http"); it must agree with
	// command or url.
	Type    string            `yaml:"type,omitempty" json:"type,omitempty"`
	Command string            `yaml:"command,omitempty" json:"command,omitempty"`
	Args    []string          `yaml:"args,omitempty" json:"args,omitempty"`
	Env     map[string]string `yaml:"env,omitempty" json:"env,omitempty"`
	Cwd     string            `yaml:"cwd,omitempty" json:"cwd,omitempty"`
	URL     string            `yaml:"url,omitempty" json:"url,omitempty"`
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`
	// InitTimeout is a duration ("10s").
	InitTimeout string `yaml:"initTimeout,omitempty" json:"initTimeout,omitempty"`
}

type rawTool struct {
	Name             string `yaml:"name" json:"name"`
	Description      string `yaml:"description,omitempty" json:"description,omitempty"`
	Parameters       any    `yaml:"parameters,omitempty" json:"parameters,omitempty"`
	Capability       string `yaml:"capability" json:"capability"`
	TimeoutSeconds   int    `yaml:"timeoutSeconds,omitempty" json:"timeoutSeconds,omitempty"`
	MaxRetries       int    `yaml:"maxRetries,omitempty" json:"maxRetries,omitempty"`
	HeartbeatSeconds int    `yaml:"heartbeatSeconds,omitempty" json:"heartbeatSeconds,omitempty"`
}

type rawSchedule struct {
	Name     string `yaml:"name" json:"name"`
	Cron     string `yaml:"cron" json:"cron"`
	Input    string `yaml:"input" json:"input"`
	Type     string `yaml:"type,omitempty" json:"type,omitempty"`
	Priority int    `yaml:"priority,omitempty" json:"priority,omitempty"`
	// ConcurrencyKey is the concurrency key of the tasks it creates.
	ConcurrencyKey string `yaml:"concurrencyKey,omitempty" json:"concurrencyKey,omitempty"`
}

// Load reads and checks the configuration file at path; getenv (nil:
// os.Getenv) resolves ${NAME} and apiKeyEnv. Every problem is an *Error.
func Load(path string, getenv func(string) string) (*File, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	return parse(path, data, getenv)
}

// parse decodes and checks data, the text of the file at path.
func parse(path string, data []byte, getenv func(string) string) (*File, error) {
	ast, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, syntaxError(path, err)
	}
	loc := locate(ast)
	var doc document
	if len(ast.Docs) > 1 {
		return nil, &Error{File: path, Line: loc.docLine(1), Msg: "one YAML document per file (remove the '---')"}
	}
	if len(ast.Docs) == 1 && ast.Docs[0].Body != nil {
		if err := yaml.NodeToValue(ast.Docs[0].Body, &doc, yaml.Strict()); err != nil {
			return nil, loc.decodeError(path, err)
		}
	}
	f := &File{Path: path, doc: doc, prompts: map[string]string{}}
	c := &checker{path: path, loc: loc, getenv: getenv}
	if err := c.build(f); err != nil {
		return nil, err
	}
	return f, nil
}

// syntaxError is the parser's error with its place.
func syntaxError(path string, err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		return &Error{File: path, Line: ye.GetToken().Position.Line, Msg: "not valid YAML (or JSON): " + ye.GetMessage()}
	}
	return &Error{File: path, Msg: "not valid YAML (or JSON): " + err.Error()}
}

// kindName says what a Go type is in the file's terms.
func kindName(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64:
		return "a whole number"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return kindName(t.Elem())
	}
	return "a " + t.String()
}
