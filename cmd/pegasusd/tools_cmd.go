package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	papi "github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

// toolsCommand is `pegasusd tools`: the tools of the running daemon
// (GET /v1/tools). common are the flags of every client command
// (--server, --token, --json).
func (c *client) toolsCommand(common []cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "tools",
		Usage:     "list the running daemon's tools: where each runs and its MCP server's health",
		ArgsUsage: "[NAME]",
		Description: "Without NAME, a table of every tool; with NAME, that tool with its description and the\n" +
			"JSON Schema of its arguments. SOURCE is builtin, go, mcp:SERVER or worker:CAPABILITY.",
		Flags: slices.Concat(common, []cli.Flag{
			&cli.StringFlag{Name: "source", EnvVars: env("tools", "source"),
				Usage: "only the tools from `SOURCE`: builtin, go, mcp, worker, mcp:SERVER or worker:CAPABILITY"},
		}),
		Action: c.tools,
	}
}

// toolSource is where a tool runs, in one word: "builtin", "go",
// "mcp:SERVER" or "worker:CAPABILITY", as pegasus-replay show writes it.
func toolSource(t papi.Tool) string {
	switch {
	case t.Source == papi.SourceMCP && t.Server != "":
		return "mcp:" + t.Server
	case t.Source == papi.SourceWorker && t.Capability != "":
		return "worker:" + t.Capability
	}
	return t.Source
}

// tools lists the daemon's tools, or shows one.
func (c *client) tools(cc *cli.Context) error {
	if cc.NArg() > 1 {
		return usageError{"tools takes at most one tool name"}
	}
	api, err := newAPIClient(cc)
	if err != nil {
		return err
	}
	var list papi.ToolList
	if err := api.call(cc.Context, "GET", "/v1/tools", &list); err != nil {
		return err
	}
	all := list.Tools
	src := cc.String("source")
	shown := []papi.Tool{}
	for _, t := range all {
		if src == "" || src == t.Source || src == toolSource(t) {
			shown = append(shown, t)
		}
	}
	if cc.NArg() == 1 {
		name := cc.Args().First()
		i := slices.IndexFunc(shown, func(t papi.Tool) bool { return t.Name == name })
		if i < 0 {
			return cliconv.NotFoundf("the daemon has no tool %q (pegasusd tools lists them)", name)
		}
		if cc.Bool("json") {
			return c.printJSON(shown[i])
		}
		return c.printTool(shown[i])
	}
	servers := []papi.MCPServer{}
	for _, sv := range list.Servers {
		if src == "" || src == papi.SourceMCP || src == "mcp:"+sv.Name {
			servers = append(servers, sv)
		}
	}
	if cc.Bool("json") {
		return c.printJSON(papi.ToolList{Tools: shown, Servers: servers})
	}
	if len(shown) == 0 {
		fmt.Fprintln(c.stdout, "no tools")
	} else if err := c.printTools(shown); err != nil {
		return err
	}
	// Why a server is not up, once per server (one that is down may
	// offer no tool at all).
	for _, sv := range servers {
		if sv.Health != papi.HealthOK {
			fmt.Fprintf(c.stdout, "mcp server %s is %s%s\n", sv.Name, sv.Health, toolPrefixed(": ", sv.Error))
		}
	}
	return nil
}

// printTools prints the table of tools.
func (c *client) printTools(shown []papi.Tool) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tSOURCE\tHEALTH\tTASK TYPES\tDESCRIPTION")
	for _, t := range shown {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, toolSource(t), cliconv.OrDash(t.Health), cliconv.OrDash(strings.Join(t.TaskTypes, ",")),
			cliconv.OrDash(toolFirstLine(t.Description, 60)))
	}
	return tw.Flush()
}

// printTool prints one tool, its schema indented.
func (c *client) printTool(t papi.Tool) error {
	fmt.Fprintf(c.stdout, "tool: %s\nsource: %s\n", t.Name, toolSource(t))
	if t.Health != "" {
		fmt.Fprintf(c.stdout, "health: %s%s\n", t.Health, toolPrefixed(": ", t.Error))
	}
	fmt.Fprintf(c.stdout, "task types: %s\n", cliconv.OrDash(strings.Join(t.TaskTypes, ", ")))
	if t.Description != "" {
		fmt.Fprintf(c.stdout, "description: %s\n", t.Description)
	}
	var schema any
	if err := json.Unmarshal(t.Parameters, &schema); err != nil {
		return fmt.Errorf("tool %s: its parameters are not JSON: %w", t.Name, err)
	}
	out, err := json.MarshalIndent(schema, "  ", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "parameters:\n  %s\n", out)
	return nil
}

func toolPrefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// toolFirstLine is s's first line, cut to n runes with an ellipsis.
func toolFirstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
