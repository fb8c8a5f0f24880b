package client

import (
	"context"

	"github.com/pegasus-engine/pegasus/api"
)

// Tools lists every tool the agent knows now, where each runs and the
// health of its MCP server (GET /v1/tools).
func (c *Client) Tools(ctx context.Context) ([]api.Tool, error) {
	out, err := c.toolList(ctx)
	return out.Tools, err
}

// MCPServers lists the MCP servers the daemon runs or connects to, with
// each one's health (GET /v1/tools, its servers), a server that is down
// and offers no tool included.
func (c *Client) MCPServers(ctx context.Context) ([]api.MCPServer, error) {
	out, err := c.toolList(ctx)
	return out.Servers, err
}

// toolList is the answer of GET /v1/tools.
func (c *Client) toolList(ctx context.Context) (api.ToolList, error) {
	var out api.ToolList
	_, err := c.do(ctx, c.get("/v1/tools", nil), &out)
	return out, err
}

// Models lists the models the agent calls, with the probe of each at the
// daemon's start and its calls (GET /v1/models).
func (c *Client) Models(ctx context.Context) ([]api.Model, error) {
	var out api.ModelList
	_, err := c.do(ctx, c.get("/v1/models", nil), &out)
	return out.Models, err
}

// TaskTypes lists the task types a task can be submitted with
// (GET /v1/task-types).
func (c *Client) TaskTypes(ctx context.Context) ([]api.TaskType, error) {
	var out api.TaskTypeList
	_, err := c.do(ctx, c.get("/v1/task-types", nil), &out)
	return out.TaskTypes, err
}
