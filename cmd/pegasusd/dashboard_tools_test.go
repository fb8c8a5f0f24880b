package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/server"
)

// shownCatalog is a daemon's tools, models and task types of every kind,
// as an engine built from a configuration file reports them
// (server.Catalog); the test changes a server's health.
type shownCatalog struct {
	mu      sync.Mutex
	tools   []api.Tool
	servers []api.MCPServer
	model   []api.Model
	types   []api.TaskType
}

func (c *shownCatalog) MCPServers() []api.MCPServer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]api.MCPServer(nil), c.servers...)
}

func (c *shownCatalog) Tools() []api.Tool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]api.Tool(nil), c.tools...)
}
func (c *shownCatalog) Models() []api.Model       { return c.model }
func (c *shownCatalog) TaskTypes() []api.TaskType { return c.types }

func (c *shownCatalog) setHealth(server, health, err string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.tools {
		if c.tools[i].Server == server {
			c.tools[i].Health, c.tools[i].Error = health, err
		}
	}
	for i := range c.servers {
		if c.servers[i].Name == server {
			c.servers[i].Health, c.servers[i].Error = health, err
		}
	}
}

// TestDashboardToolsInBrowser: the Tools page shows each tool with its
// source (built in, MCP server, worker capability), its MCP server's
// health and its schema, the MCP servers (one that is down and offers no
// tool too), the models with their probe and
// counts, the task types with their version; the overview offers the
// daemon's task types. The engine is real; its catalog is given here.
func TestDashboardToolsInBrowser(t *testing.T) {
	exe := findChromium(t)
	ctx := context.Background()
	e, err := engine.Start(ctx, &engine.Options{DataDir: filepath.Join(t.TempDir(), "data")})
	if err != nil {
		t.Fatal(err)
	}
	echo := `{"type":"object","properties":{"message":{"type":"string","description":"what to echo"}},"required":["message"]}`
	cat := &shownCatalog{
		tools: []api.Tool{
			{Name: "get_current_time", Description: "The current date and time.", Parameters: json.RawMessage(`{"type":"object"}`),
				Source: api.SourceBuiltin, TaskTypes: []string{"general", "triage"}},
			{Name: "everything__echo", Description: "Echoes back the input.", Parameters: json.RawMessage(echo),
				Source: api.SourceMCP, Server: "everything", Health: api.HealthOK, TaskTypes: []string{"triage"}},
			{Name: "everything__add", Description: "Adds two numbers.", Parameters: json.RawMessage(`{"type":"object"}`),
				Source: api.SourceMCP, Server: "everything", Health: api.HealthOK, TaskTypes: []string{"triage"}},
			{Name: "search__find", Description: "Searches.", Parameters: json.RawMessage(`{"type":"object"}`),
				Source: api.SourceMCP, Server: "search", Health: api.HealthDown, Error: "connection refused; retrying in 4s", TaskTypes: []string{}},
			{Name: "shout", Description: "Upper-cases a text.", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
				Source: api.SourceWorker, Capability: "shout", TaskTypes: []string{"triage"}},
		},
		servers: []api.MCPServer{
			{Name: "everything", Transport: "stdio", Health: api.HealthOK, Tools: 2, Since: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)},
			{Name: "fs", Transport: "stdio", Health: api.HealthDown, Error: "npx: not found", Restarts: 5},
			{Name: "search", Transport: "http", Health: api.HealthDown, Error: "connection refused; retrying in 4s", Tools: 1, Restarts: 2},
		},
		model: []api.Model{
			{Name: "main", BaseURL: "http://127.0.0.1:1/v1", Model: "big", Default: true,
				Probe: api.ModelProbe{OK: true, Status: 200, At: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)}, Calls: 12, Errors: 2},
			{Name: "spare", BaseURL: "http://127.0.0.1:2/v1", Model: "small",
				Probe: api.ModelProbe{Error: "connection refused", At: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)}},
		},
		types: []api.TaskType{
			{Name: "general", Description: "Anything.", Model: "main", Fallback: []string{}, Tools: []string{"get_current_time"},
				MaxIterations: 10, Reflection: true, Version: "a1b2c3d4e5f6", BuiltIn: true},
			{Name: "triage", Description: "Sorts tickets.", Model: "spare", Fallback: []string{"main"},
				Tools: []string{"everything__add", "everything__echo", "get_current_time", "shout"}, MaxIterations: 4, Version: "0f1e2d3c4b5a"},
		},
	}
	srv := server.New(server.Deps{Agent: e.Agent(), Store: e.Log(), View: e.View(), History: e.History(), Keys: e.Keys(),
		Broker: e.Broker(), Catalog: cat, Model: e.ModelName(), Base: e.Context()}, &server.Options{OpenAdmin: true})
	hs := httptest.NewServer(srv)
	defer func() {
		srv.Drain()
		e.StopSchedules()
		e.Cancel()
		hs.Close()
		if err := e.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()

	b := newBrowser(t, exe)
	b.do("the tools page", chromedp.Navigate(hs.URL+"/#/tools"))
	b.until("the tools, live", `document.querySelectorAll("#tools tr[data-tool]").length === 5 && document.getElementById("live").classList.contains("on")`)
	for sel, want := range map[string]string{
		`#tools tr[data-tool="get_current_time"] td:nth-child(2)`: "built-in",
		`#tools tr[data-tool="everything__echo"] td:nth-child(2)`: "MCP server everything",
		`#tools tr[data-tool="shout"] td:nth-child(2)`:            "worker capability shout",
		`#tools tr[data-tool="search__find"] td:nth-child(3)`:     "down connection refused; retrying in 4s",
		`#tools tr[data-tool="everything__echo"] td:nth-child(3)`: "ok",
		`#tools tr[data-tool="get_current_time"] td:nth-child(3)`: "—",
		`#tools tr[data-tool="everything__echo"] td:nth-child(4)`: "triage",
		`#tools tr[data-tool="search__find"] td:nth-child(4)`:     "none",
		`#mcp-servers tr[data-server="everything"]`:               "everything\tstdio\tok\nsince 2026-11-26 09:00:00Z\n\t2\t0",
		`#mcp-servers tr[data-server="fs"]`:                       "fs\tstdio\tdown npx: not found\t0\t5",
		`#mcp-servers tr[data-server="search"]`:                   "search\thttp\tdown connection refused; retrying in 4s\t1\t2",
		`#models tr[data-model="main"] td:nth-child(1)`:           "main (default)\nbig",
		`#models tr[data-model="spare"] td:nth-child(3)`:          "failed\nconnection refused\n2026-11-26 09:00:00Z",
		`#models tr[data-model="main"] td:nth-child(3)`:           "ok HTTP 200\n2026-11-26 09:00:00Z",
		`#models tr[data-model="main"] td:nth-child(4)`:           "12",
		`#models tr[data-model="main"] td:nth-child(5)`:           "2",
		`#task-types tr[data-type="triage"] td:nth-child(2)`:      "spare\nthen main",
		`#task-types tr[data-type="triage"] td:nth-child(3)`:      "everything__add, everything__echo, get_current_time, shout",
		`#task-types tr[data-type="triage"] td:nth-child(6)`:      "0f1e2d3c4b5a",
		`#task-types tr[data-type="general"] td:nth-child(1)`:     "general (built in)\nAnything.",
		`#task-types tr[data-type="general"] td:nth-child(5)`:     "on",
	} {
		if got := eval[string](b, `document.querySelector(`+jsString(sel)+`).innerText.trim()`); got != want {
			t.Errorf("%s = %q, want %q", sel, got, want)
		}
	}
	// A tool's schema unfolds: the parameters, as the API gives them.
	b.do("unfold a schema", chromedp.Click(chromedp.CSS(`#tools tr[data-tool="everything__echo"] summary`)))
	var shown, want any
	if err := json.Unmarshal([]byte(eval[string](b, `document.querySelector('#tools tr[data-tool="everything__echo"] pre').textContent`)), &shown); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal([]byte(echo), &want)
	if !jsonEqual(shown, want) {
		t.Errorf("the schema shown is %v, want %v", shown, want)
	}
	b.shot("tools-all")
	b.accessible("tools with every kind")

	// The source filter.
	eval[bool](b, `(() => { const s = document.getElementById("tools-source"); s.value = "worker"; s.dispatchEvent(new Event("change")); return true; })()`)
	b.until("the worker tools", `[...document.querySelectorAll("#tools tr[data-tool]")].map(r => r.dataset.tool).join() === "shout"`)

	// A server's health is read again: after a change, the page shows it.
	cat.setHealth("search", api.HealthStarting, "")
	b.do("the overview", chromedp.Navigate(hs.URL+"/#/"))
	// The overview offers the daemon's task types.
	b.until("the types to submit", `[...document.querySelectorAll("#submit-type option")].map(o => o.value).join() === "general,triage"`)
	b.do("the tools page again", chromedp.Navigate(hs.URL+"/#/tools"))
	b.until("the server starting", `document.querySelector('#mcp-servers tr[data-server="search"] [data-health="starting"]') !== null`)
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
