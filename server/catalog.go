package server

import (
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/pegasus-engine/pegasus/api"
)

// noParameters is the schema of a tool that declares none: an object.
var noParameters = json.RawMessage(`{"type":"object"}`)

// tools serves GET /v1/tools: every tool the agent knows now, where it
// runs and, for an MCP server's, the server's health; and the MCP
// servers.
func (s *Server) tools(w http.ResponseWriter, r *http.Request) *apiError {
	if _, e := query(r); e != nil {
		return e
	}
	out := api.ToolList{Tools: []api.Tool{}, Servers: s.mcpServers()}
	if s.catalog != nil {
		for _, t := range s.catalog.Tools() {
			if len(t.Parameters) == 0 || string(t.Parameters) == "null" {
				t.Parameters = noParameters
			}
			t.TaskTypes = nonNil(t.TaskTypes)
			out.Tools = append(out.Tools, t)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// mcpServers are the catalog's MCP servers (MCPServers), [] for none.
func (s *Server) mcpServers() []api.MCPServer {
	out := []api.MCPServer{}
	if l, ok := s.catalog.(MCPServers); ok {
		out = append(out, l.MCPServers()...)
	}
	return out
}

// models serves GET /v1/models: each named model, its probe at start and
// its calls.
func (s *Server) models(w http.ResponseWriter, r *http.Request) *apiError {
	return catalogList(s, w, r, "models", Catalog.Models, func(m *api.Model) { m.BaseURL = redactURL(m.BaseURL) })
}

// taskTypes serves GET /v1/task-types: each task type as resolved now.
func (s *Server) taskTypes(w http.ResponseWriter, r *http.Request) *apiError {
	return catalogList(s, w, r, "task_types", Catalog.TaskTypes, func(t *api.TaskType) {
		t.Fallback, t.Tools = nonNil(t.Fallback), nonNil(t.Tools)
	})
}

// catalogList answers {key: list} with the catalog's list (empty without
// a catalog), each entry passed through fix.
func catalogList[T any](s *Server, w http.ResponseWriter, r *http.Request, key string, list func(Catalog) []T, fix func(*T)) *apiError {
	if _, e := query(r); e != nil {
		return e
	}
	out := []T{}
	if s.catalog != nil {
		for _, v := range list(s.catalog) {
			fix(&v)
			out = append(out, v)
		}
	}
	writeJSON(w, http.StatusOK, map[string][]T{key: out})
	return nil
}

// nonNil is l, or an empty list for nil: the answers carry [] rather
// than null.
func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// redactURL hides a password in a URL's user information (a key some
// APIs take there); the rest of the URL is configuration, not a secret.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}
