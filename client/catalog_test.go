package client_test

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/client"
	pegasus "github.com/pegasus-engine/pegasus/server"
)

// catalog is a daemon's tools, models and task types (pegasus.Catalog).
type catalog struct {
	tools []api.Tool
	model []api.Model
	types []api.TaskType
}

func (c *catalog) Tools() []api.Tool         { return c.tools }
func (c *catalog) Models() []api.Model       { return c.model }
func (c *catalog) TaskTypes() []api.TaskType { return c.types }
func (c *catalog) MCPServers() []api.MCPServer {
	return []api.MCPServer{{Name: "everything", Transport: "stdio", Health: api.HealthOK, Tools: 1,
		Since: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)}}
}

// TestCatalog reads the tools, models and task types of a server that has
// them (the package's server, whose catalog is given here) field for
// field, and those of the shared daemon (whatever it runs with: the
// lists, maybe empty, decode).
func TestCatalog(t *testing.T) {
	ctx := testContext(t)
	want := &catalog{
		tools: []api.Tool{
			{Name: "everything__echo", Description: "Echoes.", Parameters: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}}}`),
				Source: api.SourceMCP, Server: "everything", Health: api.HealthOK, TaskTypes: []string{"general"}},
			{Name: "shout", Description: "Upper-cases a text.", Parameters: json.RawMessage(`{"type":"object"}`),
				Source: api.SourceWorker, Capability: "shout", TaskTypes: []string{}},
		},
		model: []api.Model{{Name: "main", BaseURL: "http://127.0.0.1:9/v1", Model: "small", Default: true,
			Probe: api.ModelProbe{Error: "connection refused", At: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)}, Calls: 3, Errors: 3}},
		types: []api.TaskType{{Name: "triage", Description: "Sorts tickets.", Model: "main", Fallback: []string{}, Tools: []string{"shout"},
			MaxIterations: 5, Version: "0c1d2e3f", BuiltIn: false}},
	}
	hs := httptest.NewServer(pegasus.New(pegasus.Deps{Catalog: want}, nil))
	defer hs.Close()
	c, err := client.New(hs.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := c.Tools(ctx)
	if err != nil || !reflect.DeepEqual(tools, want.tools) {
		t.Errorf("Tools = %+v, %v\nwant %+v", tools, err, want.tools)
	}
	servers, err := c.MCPServers(ctx)
	if err != nil || !reflect.DeepEqual(servers, want.MCPServers()) {
		t.Errorf("MCPServers = %+v, %v\nwant %+v", servers, err, want.MCPServers())
	}
	models, err := c.Models(ctx)
	if err != nil || !reflect.DeepEqual(models, want.model) {
		t.Errorf("Models = %+v, %v\nwant %+v", models, err, want.model)
	}
	types, err := c.TaskTypes(ctx)
	if err != nil || !reflect.DeepEqual(types, want.types) {
		t.Errorf("TaskTypes = %+v, %v\nwant %+v", types, err, want.types)
	}

	d := newClient(t, nil)
	if tools, err := d.Tools(ctx); err != nil || tools == nil {
		t.Errorf("the daemon's Tools = %v, %v", tools, err)
	}
	if servers, err := d.MCPServers(ctx); err != nil || servers == nil {
		t.Errorf("the daemon's MCPServers = %v, %v", servers, err)
	}
	if models, err := d.Models(ctx); err != nil || models == nil {
		t.Errorf("the daemon's Models = %v, %v", models, err)
	}
	if types, err := d.TaskTypes(ctx); err != nil || types == nil {
		t.Errorf("the daemon's TaskTypes = %v, %v", types, err)
	}
}
