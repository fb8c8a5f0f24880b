// Command taskserver is an MCP server built with the Go SDK whose tool
// "work" runs as a durable task of the io.modelcontextprotocol/tasks
// extension (protocol revision 2026-07-28), kept in a directory so that a
// new process of the server still knows the tasks an old one created. The
// tests of agent/mcp and cmd/pegasusd run it to show that a recorded task
// handle is polled again after the daemon (or the server) restarts,
// instead of the call being sent again.
//
//	taskserver -dir DIR            serves on stdio
//	taskserver -dir DIR -http ADDR serves Streamable HTTP on ADDR, path /mcp
//
// Its tools:
//
//	work  answers with a task; the task stays "working" until the file
//	      DIR/release exists, then completes with the text
//	      "done ID key=KEY" (KEY: the call's io.pegasus/idempotency-key)
//	echo  answers at once with the text "echo KEY" (a plain call)
//
// What it did, one line per event, in files of DIR the tests read:
//
//	created  "ID KEY" for each task created (each tools/call of work)
//	polls    "ID" for each tasks/get
//	cancels  "ID" for each tasks/cancel
//
// and each task in DIR/ID.json.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	extension = "io.modelcontextprotocol/tasks"
	metaKey   = "io.pegasus/idempotency-key"
)

func main() {
	dir := flag.String("dir", "", "the directory that keeps the tasks")
	addr := flag.String("http", "", "serve Streamable HTTP on this address instead of stdio")
	flag.Parse()
	if *dir == "" {
		log.Fatal("taskserver: -dir is required")
	}
	st := &store{dir: *dir}
	if *addr == "" {
		if err := newServer(st).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
		return
	}
	s := newServer(st)
	// Stateless: protocol revision 2026-07-28 has no HTTP sessions.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	log.Fatal(http.ListenAndServe(*addr, mux))
}

// task is one task as the directory keeps it.
type task struct {
	ID        string          `json:"id"`
	Key       string          `json:"key"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Status    string          `json:"status"` // working or cancelled; completed is derived from DIR/release
	Created   time.Time       `json:"created"`
}

// store keeps tasks in a directory. Its lock serves one process; two
// processes of a stdio server do not overlap in what they write (the
// old one exits when its client is gone).
type store struct {
	dir string
	mu  sync.Mutex
}

func (s *store) appendLine(file, line string) error {
	f, err := os.OpenFile(filepath.Join(s.dir, file), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (s *store) save(t *task) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, t.ID+".json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, t.ID+".json"))
}

func (s *store) load(id string) (*task, error) {
	if strings.ContainsAny(id, `/\`) || id == "" {
		return nil, os.ErrNotExist
	}
	b, err := os.ReadFile(filepath.Join(s.dir, id+".json"))
	if err != nil {
		return nil, err
	}
	var t task
	return &t, json.Unmarshal(b, &t)
}

func (s *store) create(key string, args json.RawMessage) (*task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _ := os.ReadFile(filepath.Join(s.dir, "created"))
	t := &task{ID: fmt.Sprintf("task-%d-%d", os.Getpid(), strings.Count(string(b), "\n")+1), Key: key,
		Arguments: args, Status: "working", Created: time.Now().UTC()}
	if err := s.save(t); err != nil {
		return nil, err
	}
	return t, s.appendLine("created", t.ID+" "+key)
}

func (s *store) released() bool {
	_, err := os.Stat(filepath.Join(s.dir, "release"))
	return err == nil
}

// taskResult is a task as the extension describes it: the answer to a
// tools/call (ResultType "task") and to tasks/get and tasks/cancel
// (ResultType "complete").
type taskResult struct {
	mcp.ResultBase
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          *int64          `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result,omitempty"`
}

type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

func (t *task) result(resultType string) *taskResult {
	at := t.Created.Format(time.RFC3339)
	return &taskResult{ResultType: resultType, TaskID: t.ID, Status: t.Status, CreatedAt: at, LastUpdatedAt: at, PollIntervalMs: 20}
}

var errNotFound = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}

func newServer(st *store) *mcp.Server {
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}
	caps.AddExtension(extension, map[string]any{})
	s := mcp.NewServer(&mcp.Implementation{Name: "pegasus-taskserver", Version: "1"}, &mcp.ServerOptions{Capabilities: caps})
	obj := map[string]any{"type": "object"}
	s.AddTool(&mcp.Tool{Name: "work", Description: "Runs as a durable task until released.", InputSchema: obj},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, errors.New("work runs as a task") // the middleware answers
		})
	s.AddTool(&mcp.Tool{Name: "echo", Description: "Answers with the idempotency key.", InputSchema: obj},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			key, _ := req.Params.Meta[metaKey].(string)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo " + key}}}, nil
		})
	// The SDK's tools/call answers with a CallToolResult: a call of work is
	// answered here with the task instead.
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if r, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" && r.Params.Name == "work" {
				key, _ := r.Params.Meta[metaKey].(string)
				t, err := st.create(key, r.Params.Arguments)
				if err != nil {
					return nil, err
				}
				return t.result("task"), nil
			}
			return next(ctx, method, req)
		}
	})
	_ = mcp.AddReceivingCustomMethod(s, "tasks/get", func(_ context.Context, _ *mcp.ServerSession, p *taskParams) (*taskResult, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		t, err := st.load(p.TaskID)
		if err != nil {
			return nil, errNotFound
		}
		if err := st.appendLine("polls", t.ID); err != nil {
			return nil, err
		}
		r := t.result("complete")
		if t.Status == "working" && st.released() {
			r.Status = "completed"
			r.Result, _ = json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text",
				"text": fmt.Sprintf("done %s key=%s", t.ID, t.Key)}}})
		}
		return r, nil
	})
	_ = mcp.AddReceivingCustomMethod(s, "tasks/cancel", func(_ context.Context, _ *mcp.ServerSession, p *taskParams) (*taskResult, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		t, err := st.load(p.TaskID)
		if err != nil {
			return nil, errNotFound
		}
		if err := st.appendLine("cancels", t.ID); err != nil {
			return nil, err
		}
		if t.Status == "working" {
			t.Status = "cancelled"
			if err := st.save(t); err != nil {
				return nil, err
			}
		}
		return t.result("complete"), nil
	})
	return s
}
