package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	papi "github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/server"
)

// runTools runs `pegasusd tools args...` in-process, the command added
// to the app as the other client commands are if it is not there yet.
func runTools(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &client{stdin: strings.NewReader(""), stdout: &out, stderr: &errb}
	app := newApp(c)
	if !slices.ContainsFunc(app.Commands, func(cmd *cli.Command) bool { return cmd.Name == "tools" }) {
		i := slices.IndexFunc(app.Commands, func(cmd *cli.Command) bool { return cmd.Name == "events" })
		cmd := c.toolsCommand(app.Commands[i].Flags) // events has exactly the common flags
		cmd.OnUsageError = cliconv.OnUsageError
		app.Commands = append(app.Commands, cmd)
	}
	code = exitCode(app.Run(cliconv.Interspersed(app, append([]string{"pegasusd", "tools"}, args...))), &errb)
	return code, out.String(), errb.String()
}

// toolsCatalog is a daemon's tools (server.Catalog), without models or
// task types, and its MCP servers (server.MCPServers): fs is starting,
// search is down and offers no tool.
type toolsCatalog []papi.Tool

func (c toolsCatalog) Tools() []papi.Tool { return c }
func (c toolsCatalog) MCPServers() []papi.MCPServer {
	return []papi.MCPServer{
		{Name: "everything", Transport: "stdio", Health: papi.HealthOK, Tools: 1},
		{Name: "fs", Transport: "stdio", Health: papi.HealthStarting},
		{Name: "search", Transport: "http", Health: papi.HealthDown, Error: "connection refused; retrying in 4s"},
	}
}
func (c toolsCatalog) Models() []papi.Model       { return nil }
func (c toolsCatalog) TaskTypes() []papi.TaskType { return nil }

// TestToolsCommand: `pegasusd tools` asks the daemon and prints a table
// (source, health, task types) and why a server is down (one with no
// tool too), one tool with its schema, --source filters and --json; an
// unknown tool exits as not found.
func TestToolsCommand(t *testing.T) {
	cat := toolsCatalog{
		{Name: "get_current_time", Description: "The current date and time.", Parameters: json.RawMessage(`{"type":"object"}`),
			Source: papi.SourceBuiltin, TaskTypes: []string{"general", "plan"}},
		{Name: "everything__echo", Description: "Echoes back the input.\nSecond line.", Parameters: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}}}`),
			Source: papi.SourceMCP, Server: "everything", Health: papi.HealthOK, TaskTypes: []string{"general"}},
		{Name: "fs__read", Parameters: json.RawMessage(`{"type":"object"}`), Source: papi.SourceMCP, Server: "fs",
			Health: papi.HealthStarting, TaskTypes: []string{}},
		{Name: "shout", Description: "Upper-cases a text.", Parameters: json.RawMessage(`{"type":"object"}`),
			Source: papi.SourceWorker, Capability: "shout", TaskTypes: []string{"general"}},
	}
	hs := httptest.NewServer(server.New(server.Deps{Catalog: cat}, nil))
	defer hs.Close()

	code, out, errs := runTools(t, "--server", hs.URL)
	want := `TOOL              SOURCE          HEALTH    TASK TYPES    DESCRIPTION
get_current_time  builtin         -         general,plan  The current date and time.
everything__echo  mcp:everything  ok        general       Echoes back the input.
fs__read          mcp:fs          starting  -             -
shout             worker:shout    -         general       Upper-cases a text.
mcp server fs is starting
mcp server search is down: connection refused; retrying in 4s
`
	if code != 0 || out != want {
		t.Errorf("tools: exit %d %s\n got:\n%s\nwant:\n%s", code, errs, out, want)
	}

	code, out, _ = runTools(t, "everything__echo", "--server", hs.URL)
	want = `tool: everything__echo
source: mcp:everything
health: ok
task types: general
description: Echoes back the input.
Second line.
parameters:
  {
    "properties": {
      "message": {
        "type": "string"
      }
    },
    "type": "object"
  }
`
	if code != 0 || out != want {
		t.Errorf("tools NAME: exit %d\n got:\n%s\nwant:\n%s", code, out, want)
	}

	for src, names := range map[string][]string{"mcp": {"everything__echo", "fs__read"}, "mcp:fs": {"fs__read"},
		"worker:shout": {"shout"}, "builtin": {"get_current_time"}, "go": {}} {
		code, out, _ := runTools(t, "--server", hs.URL, "--source", src, "--json")
		var got papi.ToolList
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("tools --source %s --json: exit %d\n%s", src, code, out)
		}
		var gotNames []string
		for _, tl := range got.Tools {
			gotNames = append(gotNames, tl.Name)
		}
		if !slices.Equal(gotNames, names) {
			t.Errorf("tools --source %s: %v, want %v", src, gotNames, names)
		}
		if src == "worker:shout" {
			var params bytes.Buffer
			json.Compact(&params, got.Tools[0].Parameters)
			got.Tools[0].Parameters = params.Bytes()
			if !reflect.DeepEqual(got.Tools[0], cat[3]) {
				t.Errorf("tools --json: %+v, want %+v", got.Tools[0], cat[3])
			}
		}
	}

	if code, _, errs := runTools(t, "nope", "--server", hs.URL); code != cliconv.Code(cliconv.NotFoundf("x")) || !strings.Contains(errs, `no tool "nope"`) {
		t.Errorf("tools nope: exit %d %q", code, errs)
	}
	if code, _, _ := runTools(t, "a", "b", "--server", hs.URL); code != cliconv.Code(cliconv.Usagef("x")) {
		t.Errorf("tools a b: exit %d, want the usage exit code", code)
	}

	// A daemon without a configuration: whatever it has, in the table's
	// form, or "no tools".
	td := startDaemon(t, testConfig(t))
	if code, out, errs := runTools(t, "--server", td.url); code != 0 || !(strings.HasPrefix(out, "TOOL ") || out == "no tools\n") {
		t.Errorf("tools of a daemon: exit %d %q %q", code, out, errs)
	}
}
