package engine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/agent/mcp"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/config"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// fakeModels is an OpenAI-compatible server that lists one model, and
// refuses a wrong key.
func fakeModels(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/models" && r.Header.Get("Authorization") == "Bearer sk-canary-engine":
			w.Write([]byte(`{"object":"list","data":[{"id":"small"}]}`))
		case r.URL.Path == "/v1/models":
			http.Error(w, `{"error":"bad key"}`, http.StatusUnauthorized)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func loadConfig(t *testing.T, text string, env map[string]string) *config.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pegasus.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(p, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestConfigured: an engine started with a configuration file has its
// named models (each probed at start), worker tools, task types and
// schedules; SYSTEM_STARTED records the configuration's hash; the
// default model, which is not an HTTP one here, answers the tasks.
func TestConfigured(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := fakeModels(t)
	f := loadConfig(t, `
models:
  - {name: good, baseUrl: `+srv.URL+`/v1, model: small, apiKeyEnv: KEY}
  - {name: nokey, baseUrl: `+srv.URL+`/v1, model: small, concurrency: 2}
tools:
  - name: shout
    description: Upper-cases a text.
    parameters: {type: object, properties: {text: {type: string}}}
    capability: shout
    timeoutSeconds: 30
taskTypes:
  - name: loud
    description: Shouts.
    systemPrompt: You shout.
    tools: [shout, current_time]
    model: good
    fallback: [nokey]
    maxIterations: 4
    reflection: false
schedules:
  - {name: yearly, cron: "@yearly", input: happy new year, type: loud}
`, map[string]string{"KEY": "sk-canary-engine"})
	e, err := Start(ctx, &Options{DataDir: t.TempDir(), Config: f})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)
	if e.ConfigHash() != f.Hash() {
		t.Errorf("ConfigHash %q, want %q", e.ConfigHash(), f.Hash())
	}

	// The probes run in the background: wait for both.
	e.probeWG.Wait()
	models := e.Catalog().Models()
	if len(models) != 3 || models[0].Name != DefaultModelName || !models[0].Default || models[0].Model != "pegasus-offline-demo" {
		t.Fatalf("models: %+v", models)
	}
	good, nokey := models[1], models[2]
	if good.Name != "good" || !good.Probe.OK || good.Probe.Status != 200 || good.Probe.At.IsZero() {
		t.Errorf("good: %+v", good)
	}
	if nokey.Probe.OK || nokey.Probe.Status != 401 || !strings.Contains(nokey.Probe.Error, `model "nokey"'s apiKeyEnv`) {
		t.Errorf("nokey: %+v", nokey)
	}

	var shout tools.Tool
	for _, tl := range e.Agent().Tools() {
		if tl.Name() == "shout" {
			shout = tl
		}
	}
	if shout == nil || tools.SourceOf(shout) != (tools.Source{Kind: tools.SourceWorker, Capability: "shout"}) {
		t.Fatalf("the worker tool: %v", shout)
	}
	wt := shout.(*tools.WorkerTool)
	if wt.TimeoutSeconds != 30 || !strings.Contains(string(wt.Params), `"text"`) {
		t.Errorf("worker tool: %+v", wt)
	}
	var loud *agent.TaskTypeInfo
	types := e.Agent().Types()
	for i := range types {
		if types[i].Name == "loud" {
			loud = &types[i]
		}
	}
	if loud == nil || loud.Model != "good" || !slices.Equal(loud.Fallback, []string{"nokey"}) || loud.MaxIterations != 4 ||
		loud.Reflection == nil || *loud.Reflection || loud.SystemPrompt != "You shout." {
		t.Fatalf("loud: %+v", loud)
	}
	tts := e.Catalog().TaskTypes()
	found := false
	for _, tt := range tts {
		if tt.Name == "general" && tt.Model == DefaultModelName && tt.MaxIterations == 10 && tt.Reflection {
			found = true
			if !slices.Contains(tt.Tools, "shout") {
				t.Errorf("general lacks the worker tool, as agent.Options.Tools would give it: %v", tt.Tools)
			}
		}
	}
	if !found {
		t.Errorf("no built-in general: %+v", tts)
	}
	if len(e.opts.Schedules) != 1 || e.opts.Schedules[0].Name != "yearly" || e.opts.Schedules[0].Type != "loud" {
		t.Errorf("schedules: %+v", e.opts.Schedules)
	}

	it := e.Log().ReadStream(projection.SystemStream, 1)
	defer it.Close()
	if !it.Next() {
		t.Fatalf("no SYSTEM_STARTED: %v", it.Err())
	}
	ev := it.Event()
	b, err := projection.DecodeSystem(fsm.EventType(ev.Type), ev.Schema, ev.Body)
	if err != nil {
		t.Fatal(err)
	}
	if b.Model != "pegasus-offline-demo" || b.Config != "sha256:"+f.Hash() {
		t.Errorf("SYSTEM_STARTED model %q config %q, want the offline model and sha256:%s", b.Model, b.Config, f.Hash())
	}
	if e.ModelName() != "pegasus-offline-demo" {
		t.Errorf("ModelName %q", e.ModelName())
	}
	if strings.Contains(string(ev.Body), "sk-canary") {
		t.Error("SYSTEM_STARTED holds the key")
	}
}

// TestCatalogWithoutConfig: without a file, the catalog lists the default
// model alone, unprobed, and the engine records no hash.
func TestCatalogWithoutConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := Start(ctx, &Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)
	if e.ConfigHash() != "" || e.MCPServers() != nil {
		t.Error("a hash or MCP servers without a file")
	}
	ms := e.Catalog().Models()
	if len(ms) != 1 || ms[0].Name != DefaultModelName || ms[0].BaseURL != "" || !ms[0].Probe.At.IsZero() {
		t.Errorf("models: %+v", ms)
	}
	if s := e.setup; s.mcp != nil || s.types != nil || len(s.tools) != 0 {
		t.Errorf("setup without a file: %+v", s)
	}
}

// TestConfigDefaultModel: the file's default model is the agent's model
// when the caller gives none, and its calls are counted.
func TestConfigDefaultModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := fakeModels(t)
	f := loadConfig(t, "models:\n  - {name: main, baseUrl: "+srv.URL+"/v1, model: small, default: true, timeout: 5s, maxAttempts: 1}\n", nil)
	e, err := Start(ctx, &Options{DataDir: t.TempDir(), Config: f})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)
	if e.ModelName() != "small" {
		t.Errorf("ModelName %q", e.ModelName())
	}
	id, err := e.Agent().SubmitInput(ctx, agent.Input{Text: "hi", Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if task, err := e.Agent().WaitUntil(ctx, id, agent.Done); err != nil || task.State != fsm.StateFailed {
		t.Fatalf("task %s, %v (the fake has no chat completions)", task.State, err)
	}
	e.probeWG.Wait()
	m := e.Catalog().Models()[0]
	if m.Name != "main" || m.Calls < 1 || m.Errors < 1 || m.Probe.Status != 401 {
		t.Errorf("model: %+v", m)
	}
}

// TestMCPServers: the configuration's servers reach the manager as
// written, the secrets expanded, the working directory beside the file;
// the engine reports each one's state (neither runs: the command does
// not exist, nothing listens at the URL).
func TestMCPServers(t *testing.T) {
	f := loadConfig(t, `mcpServers:
  everything:
    command: pegasus-test-no-such-mcp-server
    args: ["-y", "@modelcontextprotocol/server-everything", "stdio"]
    env: {LOG_LEVEL: warn}
    cwd: work
  search:
    url: http://127.0.0.1:1/mcp
    headers: {Authorization: "Bearer ${TOKEN}"}
`, map[string]string{"TOKEN": "canary"})
	got := mcpServers(f)
	want := []mcp.ServerConfig{
		{Name: "everything", Command: "pegasus-test-no-such-mcp-server", Args: []string{"-y", "@modelcontextprotocol/server-everything", "stdio"},
			Env: map[string]string{"LOG_LEVEL": "warn"}, Dir: filepath.Join(filepath.Dir(f.Path), "work")},
		{Name: "search", URL: "http://127.0.0.1:1/mcp", Headers: map[string]string{"Authorization": "Bearer canary"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := Start(ctx, &Options{DataDir: t.TempDir(), Config: f})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)
	var names []string
	for _, s := range e.MCPServers() {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"everything", "search"}) {
		t.Errorf("servers %v", names)
	}
}

// TestConfigSchedulesValidated: Validate counts the file's schedules
// with the others, before Start merges them.
func TestConfigSchedulesValidated(t *testing.T) {
	f := loadConfig(t, "schedules:\n  - {name: s, cron: \"@daily\", input: x}\n", nil)
	o := Options{Config: f, Schedules: []Schedule{{Name: "s", Cron: "@hourly", Input: "y"}}}
	o.EnsureDefaults()
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), `two schedules are named "s"`) {
		t.Fatalf("Validate: %v", err)
	}
	o.Schedules = nil
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o.DataDir = t.TempDir()
	e, err := Start(ctx, &o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)
	if len(e.opts.Schedules) != 1 {
		t.Errorf("schedules %+v", e.opts.Schedules)
	}
}
