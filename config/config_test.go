package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// env is a fixed environment for the tests.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

var testEnv = env(map[string]string{"OPENAI_API_KEY": "sk-canary-key-123", "SEARCH_TOKEN": "canary-token-456", "HOME_DIR": "/home/u"})

// write puts text in a file named name in a new directory, with the
// extra files beside it, and returns its path.
func write(t *testing.T, name, text string, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, s := range extra {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const full = `
models:
  - name: gpt
    baseUrl: https://api.openai.com/v1
    model: gpt-4o-mini
    apiKeyEnv: OPENAI_API_KEY
    timeout: 90s
    maxAttempts: 3
    concurrency: 4
    default: true
  - name: local
    baseUrl: http://127.0.0.1:11434/v1
    model: llama3.2
mcpServers:
  everything:
    command: npx
    args: ["-y", "@modelcontextprotocol/server-everything", "stdio"]
    env: {LOG_LEVEL: warn}
    initTimeout: 2m
  search:
    url: http://127.0.0.1:9000/mcp
    headers: {Authorization: "Bearer ${SEARCH_TOKEN}"}
tools:
  - name: shout
    description: Upper-cases a text.
    parameters: {type: object, properties: {text: {type: string}}, required: [text]}
    capability: shout
    timeoutSeconds: 30
    maxRetries: 2
    heartbeatSeconds: 10
taskTypes:
  - name: research
    description: Finds things out.
    systemPrompt: You research.
    tools: [everything__*, shout, current_time]
    model: local
    fallback: [gpt]
    maxIterations: 20
    reflection: false
  - name: general
    systemPromptFile: general.md
    tools: ["*"]
schedules:
  - name: hourly
    cron: "@hourly"
    input: what time is it?
    type: research
    priority: 2
`

func TestLoadFull(t *testing.T) {
	p := write(t, "pegasus.yaml", full, map[string]string{"general.md": "You do anything.\n"})
	f, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Models) != 2 || f.Models[0].APIKey.Reveal() != "sk-canary-key-123" || f.Models[0].Timeout != 90*time.Second ||
		!f.Models[0].Default || f.DefaultModel().Name != "gpt" {
		t.Errorf("models: %+v", f.Models)
	}
	if len(f.MCPServers) != 2 || f.MCPServers[0].Name != "everything" || f.MCPServers[1].Headers["Authorization"] != "Bearer canary-token-456" ||
		f.MCPServers[0].InitTimeout != 2*time.Minute || f.MCPServers[1].InitTimeout != 0 {
		t.Errorf("servers: %+v", f.MCPServers)
	}
	var params map[string]any
	if err := json.Unmarshal(f.Tools[0].Parameters, &params); err != nil || params["type"] != "object" {
		t.Errorf("parameters %s: %v", f.Tools[0].Parameters, err)
	}
	if f.Tools[0].TimeoutSeconds != 30 || f.Tools[0].MaxRetries != 2 || f.Tools[0].HeartbeatSeconds != 10 || f.Tools[0].Capability != "shout" {
		t.Errorf("tool: %+v", f.Tools[0])
	}
	tt := f.TaskTypes[0]
	if tt.Model != "local" || !reflect.DeepEqual(tt.Fallback, []string{"gpt"}) || tt.MaxIterations != 20 || tt.Reflection == nil || *tt.Reflection {
		t.Errorf("type: %+v", tt)
	}
	if f.TaskTypes[1].SystemPrompt != "You do anything.\n" {
		t.Errorf("prompt file: %q", f.TaskTypes[1].SystemPrompt)
	}
	if f.Schedules[0] != (Schedule{Name: "hourly", Cron: "@hourly", Input: "what time is it?", Type: "research", Priority: 2}) {
		t.Errorf("schedule: %+v", f.Schedules[0])
	}
}

// TestSecretsNeverExported: the values of apiKeyEnv and ${NAME}, and a
// credential written in the file, appear in neither Redacted nor Hash.
func TestSecretsNeverExported(t *testing.T) {
	text := full + `    # a literal credential, which the file should not hold
` // (comment only: the literal cases follow)
	text = strings.Replace(text, `env: {LOG_LEVEL: warn}`, `env: {LOG_LEVEL: warn, API_TOKEN: literal-canary-789}`, 1)
	text = strings.Replace(text, `url: http://127.0.0.1:9000/mcp`, `url: http://user:pw-canary-000@127.0.0.1:9000/mcp?api_key=q-canary-111&v=1`, 1)
	p := write(t, "pegasus.yaml", text, map[string]string{"general.md": "x"})
	f, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	red, err := f.Redacted()
	if err != nil {
		t.Fatal(err)
	}
	for _, canary := range []string{"canary"} {
		if strings.Contains(string(red), canary) {
			t.Errorf("Redacted holds a secret:\n%s", red)
		}
		if strings.Contains(f.Hash(), canary) {
			t.Error("Hash holds a secret")
		}
	}
	for _, want := range []string{"${SEARCH_TOKEN}", "apiKeyEnv: OPENAI_API_KEY", "API_TOKEN: <redacted>", "LOG_LEVEL: warn"} {
		if !strings.Contains(string(red), want) {
			t.Errorf("Redacted lacks %q:\n%s", want, red)
		}
	}
	// The hash is of the references: another secret, the same hash.
	g, err := Load(p, env(map[string]string{"OPENAI_API_KEY": "other", "SEARCH_TOKEN": "other"}))
	if err != nil {
		t.Fatal(err)
	}
	if g.Hash() != f.Hash() {
		t.Error("the hash depends on a secret's value")
	}
}

func TestHashFollowsPromptFile(t *testing.T) {
	p := write(t, "pegasus.yaml", full, map[string]string{"general.md": "one"})
	a, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(p), "general.md"), []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() == b.Hash() || len(a.Hash()) != 64 {
		t.Errorf("hashes %s %s", a.Hash(), b.Hash())
	}
}

// TestJSONEqualsYAML: the JSON form of a configuration loads as the
// same File as its YAML form.
func TestJSONEqualsYAML(t *testing.T) {
	const js = `{
  "models": [{"name": "gpt", "baseUrl": "https://api.openai.com/v1", "model": "gpt-4o-mini", "apiKeyEnv": "OPENAI_API_KEY", "timeout": "90s", "maxAttempts": 3, "concurrency": 4, "default": true},
             {"name": "local", "baseUrl": "http://127.0.0.1:11434/v1", "model": "llama3.2"}],
  "mcpServers": {
    "everything": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything", "stdio"], "env": {"LOG_LEVEL": "warn"}, "initTimeout": "2m"},
    "search": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"}}
  },
  "tools": [{"name": "shout", "description": "Upper-cases a text.", "capability": "shout", "timeoutSeconds": 30, "maxRetries": 2, "heartbeatSeconds": 10,
             "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}],
  "taskTypes": [{"name": "research", "description": "Finds things out.", "systemPrompt": "You research.", "tools": ["everything__*", "shout", "current_time"],
                 "model": "local", "fallback": ["gpt"], "maxIterations": 20, "reflection": false},
                {"name": "general", "systemPromptFile": "general.md", "tools": ["*"]}],
  "schedules": [{"name": "hourly", "cron": "@hourly", "input": "what time is it?", "type": "research", "priority": 2}]
}`
	extra := map[string]string{"general.md": "You do anything.\n"}
	y, err := Load(write(t, "pegasus.yaml", full, extra), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Load(write(t, "pegasus.json", js, extra), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if y.Hash() != j.Hash() {
		t.Error("JSON and YAML hash differently")
	}
	y.Path, j.Path = "", ""
	if !reflect.DeepEqual(y.Models, j.Models) || !reflect.DeepEqual(y.MCPServers, j.MCPServers) || !reflect.DeepEqual(y.Tools, j.Tools) ||
		!reflect.DeepEqual(y.TaskTypes, j.TaskTypes) || !reflect.DeepEqual(y.Schedules, j.Schedules) {
		t.Errorf("JSON and YAML differ:\n%+v\n%+v", y, j)
	}
}

func TestEmptyFile(t *testing.T) {
	for _, text := range []string{"", "# nothing\n", "{}\n"} {
		f, err := Load(write(t, "c.yaml", text, nil), testEnv)
		if err != nil || len(f.Models)+len(f.TaskTypes)+len(f.MCPServers)+len(f.Tools)+len(f.Schedules) != 0 {
			t.Errorf("%q: %+v %v", text, f, err)
		}
	}
}

func TestExpand(t *testing.T) {
	text := `mcpServers:
  fs:
    command: ${HOME_DIR}/bin/fs
    args: ["$${LITERAL}", "a${HOME_DIR}b"]
`
	f, err := Load(write(t, "c.yaml", text, nil), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	s := f.MCPServers[0]
	if s.Command != "/home/u/bin/fs" || !reflect.DeepEqual(s.Args, []string{"${LITERAL}", "a/home/ub"}) {
		t.Errorf("%+v", s)
	}
}

// TestBad: each bad file is refused with one message naming the file,
// the line and the key.
func TestBad(t *testing.T) {
	const server = "mcpServers:\n  everything:\n    command: npx\n"
	testBad(t, []badFile{
		{"syntax", "models: [\n", 1, "", "not valid YAML"},
		{"unknown top key", "model: []\n", 1, "model", "unknown key (known: models, taskTypes"},
		{"unknown server key", "mcpServers:\n  x:\n    comand: npx\n", 3, "mcpServers.x.comand", "unknown key (known: command"},
		{"unknown tool key", "tools:\n  - name: a\n    capability: a\n    timeout_seconds: 3\n", 4, "tools[0].timeout_seconds", "unknown key"},
		{"wrong type", "tools:\n  - name: a\n    capability: a\n    timeoutSeconds: soon\n", 4, "tools[0].timeoutSeconds", "want a whole number"},
		{"wrong type list", "mcpServers:\n  x:\n    command: npx\n    args: -y\n", 4, "mcpServers.x.args", "want a list"},
		{"top not object", "- a\n", 1, "", "want an object"},
		{"no command", "mcpServers:\n  x:\n    args: [a]\n", 2, "mcpServers.x", "neither command"},
		{"command and url", "mcpServers:\n  x:\n    command: a\n    url: http://h/mcp\n", 4, "mcpServers.x.url", "both command and url"},
		{"sse", "mcpServers:\n  x:\n    type: sse\n    url: http://h/sse\n", 3, "mcpServers.x.type", "SSE"},
		{"bad server name", "mcpServers:\n  a__b:\n    command: x\n", 2, "mcpServers.a__b", "server's name"},
		{"bad init timeout", "mcpServers:\n  x:\n    command: a\n    initTimeout: 0s\n", 4, "mcpServers.x.initTimeout", "positive duration"},
		{"bad url", "mcpServers:\n  x:\n    url: ftp://h\n", 3, "mcpServers.x.url", "http:// or https://"},
		{"missing variable", "mcpServers:\n  x:\n    url: http://h/mcp\n    headers: {Authorization: \"Bearer ${NOPE}\"}\n", 4,
			"mcpServers.x.headers.Authorization", "environment variable NOPE is not set"},
		{"missing key variable", "models:\n  - name: m\n    baseUrl: http://h/v1\n    model: m\n    apiKeyEnv: NOPE_KEY\n", 5,
			"models[0].apiKeyEnv", "environment variable NOPE_KEY is not set"},
		{"key in apiKeyEnv", "models:\n  - name: m\n    baseUrl: http://h/v1\n    model: m\n    apiKeyEnv: sk-123\n", 5,
			"models[0].apiKeyEnv", "not the key itself"},
		{"bad duration", "models:\n  - name: m\n    baseUrl: http://h/v1\n    model: m\n    timeout: 10\n", 5, "models[0].timeout", "positive duration"},
		{"no base url", "models:\n  - name: m\n    model: m\n", 2, "models[0].baseUrl", "no baseUrl"},
		{"two defaults", "models:\n  - {name: a, baseUrl: http://h/v1, model: m, default: true}\n  - {name: b, baseUrl: http://h/v1, model: m, default: true}\n",
			3, "models[1].default", "both the default"},
		{"default name", "models:\n  - {name: default, baseUrl: http://h/v1, model: m}\n", 2, "models[0].name", "another name"},
		{"two tools", "tools:\n  - {name: a, capability: c}\n  - {name: a, capability: c}\n", 3, "tools[1].name", "two tools are named \"a\""},
		{"builtin tool", "tools:\n  - {name: notify, capability: c}\n", 2, "tools[0].name", "built-in"},
		{"mcp tool name", server + "tools:\n  - {name: everything__echo, capability: c}\n", 5, "tools[0].name", "clash with the tools of MCP server \"everything\""},
		{"invalid tool name", "tools:\n  - {name: \"a b\", capability: c}\n", 2, "tools[0].name", "letters, digits"},
		{"no capability", "tools:\n  - name: a\n", 2, "tools[0].capability", "no capability"},
		{"params not object", "tools:\n  - name: a\n    capability: c\n    parameters: {type: string}\n", 4, "tools[0].parameters", "type object"},
		{"params list", "tools:\n  - name: a\n    capability: c\n    parameters: [1]\n", 4, "tools[0].parameters", "JSON Schema object"},
		{"unknown model", "taskTypes:\n  - name: t\n    systemPrompt: p\n    model: gpt\n", 4, "taskTypes[0].model", "names model \"gpt\""},
		{"unknown fallback", "models:\n  - {name: a, baseUrl: http://h/v1, model: m}\ntaskTypes:\n  - name: t\n    systemPrompt: p\n    fallback: [a, b]\n", 6,
			"taskTypes[0].fallback[1]", "names model \"b\""},
		{"unknown tool", "taskTypes:\n  - name: t\n    systemPrompt: p\n    tools: [current_time, shout]\n", 4, "taskTypes[0].tools[1]", "unknown tool \"shout\""},
		{"unknown mcp tool", server + "taskTypes:\n  - name: t\n    systemPrompt: p\n    tools: [fs__read]\n", 7, "taskTypes[0].tools[0]", "unknown tool \"fs__read\""},
		{"glob matches nothing", server + "taskTypes:\n  - name: t\n    systemPrompt: p\n    tools: [\"fs__*\"]\n", 7, "taskTypes[0].tools[0]", "matches no tool"},
		{"ask_user listed", "taskTypes:\n  - name: t\n    systemPrompt: p\n    tools: [ask_user]\n", 4, "taskTypes[0].tools[0]", "every task type"},
		{"no prompt", "taskTypes:\n  - name: t\n", 2, "taskTypes[0]", "no systemPrompt"},
		{"missing prompt file", "taskTypes:\n  - name: t\n    systemPromptFile: nope.md\n", 3, "taskTypes[0].systemPromptFile", "no such file"},
		{"two types", "taskTypes:\n  - {name: t, systemPrompt: p}\n  - {name: t, systemPrompt: p}\n", 3, "taskTypes[1].name", "two task types"},
		{"bad cron", "schedules:\n  - name: s\n    cron: every day\n    input: x\n", 3, "schedules[0].cron", "\"every day\""},
		{"schedule type", "schedules:\n  - {name: s, cron: \"@hourly\", input: x, type: nope}\n", 2, "schedules[0].type", "unknown task type \"nope\""},
		{"duplicate key", "tools: []\ntools: []\n", 2, "", "already defined"},
	})
}

// badFile is a file Load refuses: the line, the key and a part of the
// message of its *Error.
type badFile struct {
	name, text string
	line       int
	key, msg   string
}

// testBad checks that Load refuses each file with one message naming
// the file, the line and the key.
func testBad(t *testing.T, cases []badFile) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := write(t, "pegasus.yaml", c.text, nil)
			_, err := Load(p, testEnv)
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an *Error", err)
			}
			if e.File != p || e.Line != c.line || e.Key != c.key || !strings.Contains(e.Msg, c.msg) {
				t.Errorf("got %q (line %d, key %q), want line %d, key %q, message with %q", err, e.Line, e.Key, c.line, c.key, c.msg)
			}
			prefix := p + ":"
			if c.line > 0 {
				prefix += strconv.Itoa(c.line) + ":"
			}
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("%q does not begin with %q", err, prefix)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), nil)
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("%v", err)
	}
}

// TestRedactedLoads: what Redacted prints (config check's output) is a
// configuration that loads again, with the same hash.
func TestRedactedLoads(t *testing.T) {
	extra := map[string]string{"general.md": "You do anything.\n"}
	p := write(t, "pegasus.yaml", full, extra)
	f, err := Load(p, testEnv)
	if err != nil {
		t.Fatal(err)
	}
	red, err := f.Redacted()
	if err != nil {
		t.Fatal(err)
	}
	g, err := Load(write(t, "again.yaml", string(red), extra), testEnv)
	if err != nil {
		t.Fatalf("%v\n%s", err, red)
	}
	if g.Hash() != f.Hash() || !reflect.DeepEqual(g.Schedules, f.Schedules) || !reflect.DeepEqual(g.Tools, f.Tools) {
		t.Errorf("the printed configuration differs:\n%s", red)
	}
}
