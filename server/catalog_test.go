package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/api"
)

// fakeCatalog is a daemon's tools, models and task types.
type fakeCatalog struct {
	tools []api.Tool
	model []api.Model
	types []api.TaskType
}

// fakeMCP is a catalog that runs MCP servers too.
type fakeMCP struct {
	*fakeCatalog
	servers []api.MCPServer
}

func (f *fakeMCP) MCPServers() []api.MCPServer { return f.servers }

func (f *fakeCatalog) Tools() []api.Tool         { return f.tools }
func (f *fakeCatalog) Models() []api.Model       { return f.model }
func (f *fakeCatalog) TaskTypes() []api.TaskType { return f.types }

func catalogServer(t *testing.T, c Catalog) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(New(Deps{Agent: &fakeEngine{accepting: true}, Store: &fakeStore{}, View: &fakeView{}, Catalog: c}, nil))
	t.Cleanup(hs.Close)
	return hs
}

// TestCatalogRoutes: /v1/tools, /v1/models and /v1/task-types serve the
// catalog in its order, with [] rather than null for a missing list, an
// object schema for a tool that declares none and a model's password
// hidden; /v1/tools and /readyz list the MCP servers of a catalog that
// has them; without a catalog, empty lists.
func TestCatalogRoutes(t *testing.T) {
	probed := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	cat := &fakeCatalog{
		tools: []api.Tool{
			{Name: "get_current_time", Description: "The time now.", Source: api.SourceBuiltin, TaskTypes: []string{"general"}},
			{Name: "everything__echo", Description: "Echoes.", Parameters: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}}}`),
				Source: api.SourceMCP, Server: "everything", Health: api.HealthDown, Error: "exited: status 1", TaskTypes: []string{"general", "explore"}},
			{Name: "shout", Source: api.SourceWorker, Capability: "shout", Parameters: json.RawMessage(`null`)},
		},
		model: []api.Model{
			{Name: "main", BaseURL: "https://user:s3cret@llm.example/v1", Model: "gpt-x", Default: true,
				Probe: api.ModelProbe{OK: true, Status: 200, At: probed}, Calls: 7, Errors: 1},
			{Name: "spare", BaseURL: "http://127.0.0.1:9/v1", Model: "small", Probe: api.ModelProbe{Error: "connection refused", At: probed}},
		},
		types: []api.TaskType{
			{Name: "general", Description: "Anything.", Model: "main", Tools: []string{"get_current_time", "everything__echo"},
				MaxIterations: 10, Reflection: true, Version: "3f2a", BuiltIn: true},
			{Name: "triage", Model: "spare", Fallback: []string{"main"}, Version: "99ab"},
		},
	}
	get := func(t *testing.T, hs *httptest.Server, path string, out any) string {
		t.Helper()
		status, _, body := fakeDo(t, hs, "GET", path)
		if status != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, status, body)
		}
		if err := json.Unmarshal([]byte(body), out); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
		return body
	}

	servers := []api.MCPServer{
		{Name: "everything", Transport: "stdio", Health: api.HealthDown, Error: "exited: status 1", Tools: 1, Restarts: 3, Since: probed},
		{Name: "search", Transport: "http", Health: api.HealthStarting},
	}
	hs := catalogServer(t, &fakeMCP{cat, servers})
	var tools api.ToolList
	get(t, hs, "/v1/tools", &tools)
	if !reflect.DeepEqual(tools.Servers, servers) {
		t.Errorf("GET /v1/tools: servers\n got %+v\nwant %+v", tools.Servers, servers)
	}
	// /readyz lists them; the daemon is ready with a server down.
	var ready struct {
		Status  string          `json:"status"`
		Servers []api.MCPServer `json:"mcp_servers"`
	}
	get(t, hs, "/readyz", &ready)
	if ready.Status != "ready" || !reflect.DeepEqual(ready.Servers, servers) {
		t.Errorf("GET /readyz = %+v, want ready with %+v", ready, servers)
	}
	wantTools := append([]api.Tool(nil), cat.tools...)
	wantTools[0].Parameters = json.RawMessage(`{"type":"object"}`)
	wantTools[2].Parameters = json.RawMessage(`{"type":"object"}`)
	wantTools[2].TaskTypes = []string{}
	if !reflect.DeepEqual(tools.Tools, wantTools) {
		t.Errorf("GET /v1/tools:\n got %+v\nwant %+v", tools.Tools, wantTools)
	}

	var models api.ModelList
	body := get(t, hs, "/v1/models", &models)
	wantModels := append([]api.Model(nil), cat.model...)
	wantModels[0].BaseURL = "https://user:xxxxx@llm.example/v1"
	if !reflect.DeepEqual(models.Models, wantModels) {
		t.Errorf("GET /v1/models:\n got %+v\nwant %+v", models.Models, wantModels)
	}
	if strings.Contains(body, "s3cret") {
		t.Errorf("GET /v1/models carries the password: %s", body)
	}

	var types api.TaskTypeList
	body = get(t, hs, "/v1/task-types", &types)
	wantTypes := append([]api.TaskType(nil), cat.types...)
	wantTypes[0].Fallback = []string{}
	wantTypes[1].Tools = []string{}
	if !reflect.DeepEqual(types.TaskTypes, wantTypes) {
		t.Errorf("GET /v1/task-types:\n got %+v\nwant %+v", types.TaskTypes, wantTypes)
	}
	if strings.Contains(body, "null") {
		t.Errorf("GET /v1/task-types has a null: %s", body)
	}

	// Without a catalog: empty lists, not null.
	empty := catalogServer(t, nil)
	if status, _, body := fakeDo(t, catalogServer(t, cat), "GET", "/readyz"); status != http.StatusOK || body != `{"status":"ready"}`+"\n" {
		t.Errorf("GET /readyz without MCP servers = %d %s", status, body)
	}
	for path, want := range map[string]string{"/v1/tools": `{"tools":[],"servers":[]}`, "/v1/models": `{"models":[]}`, "/v1/task-types": `{"task_types":[]}`} {
		if status, _, body := fakeDo(t, empty, "GET", path); status != http.StatusOK || body != want+"\n" {
			t.Errorf("GET %s without a catalog = %d %q, want 200 %s", path, status, body, want)
		}
		if status, e, body := fakeDo(t, empty, "GET", path+"?source=mcp"); status != http.StatusBadRequest || e.Code != codeBadRequest {
			t.Errorf("GET %s?source=mcp = %d %s, want 400", path, status, body)
		}
		if status, e, body := fakeDo(t, empty, "POST", path); status != http.StatusMethodNotAllowed || e.Code != codeMethodNotAllwd {
			t.Errorf("POST %s = %d %s, want 405", path, status, body)
		}
	}
}
