package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

// The test server's side of the 2026-07-28 tasks extension: the tools slow
// and doomed answer with a task; tasks/get reports it working twice, then
// completed with its result inline (slow) or failed with a JSON-RPC error
// (doomed).

const testTaskMeta = "pegasus-test/task"

type testTask struct {
	key    string
	polls  int
	doomed bool
}

type testTaskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

type testTaskResult struct {
	mcp.ResultBase
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          *int            `json:"ttlMs"`
	PollIntervalMs int             `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          map[string]any  `json:"error,omitempty"`
}

func addTaskTools(s *mcp.Server) {
	var mu sync.Mutex
	tasks := map[string]*testTask{}
	create := func(doomed bool) mcp.ToolHandler {
		return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			defer mu.Unlock()
			id := fmt.Sprintf("task-%d", len(tasks)+1)
			key, _ := req.Params.Meta[MetaIdempotencyKey].(string)
			tasks[id] = &testTask{key: key, doomed: doomed}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "task"}}, Meta: mcp.Meta{testTaskMeta: id}}, nil
		}
	}
	obj := map[string]any{"type": "object"}
	s.AddTool(&mcp.Tool{Name: "slow", Description: "Runs as a task.", InputSchema: obj}, create(false))
	s.AddTool(&mcp.Tool{Name: "doomed", Description: "Runs as a task that fails.", InputSchema: obj}, create(true))
	_ = mcp.AddReceivingCustomMethod(s, "tasks/get",
		func(ctx context.Context, ss *mcp.ServerSession, p *testTaskParams) (*testTaskResult, error) {
			mu.Lock()
			defer mu.Unlock()
			t, ok := tasks[p.TaskID]
			if !ok {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
			}
			t.polls++
			r := &testTaskResult{ResultType: "complete", TaskID: p.TaskID, Status: "working",
				CreatedAt: "2026-07-28T10:30:00Z", LastUpdatedAt: "2026-07-28T10:30:00Z", PollIntervalMs: 10}
			switch {
			case t.polls <= 2:
			case t.doomed:
				r.Status, r.Error = "failed", map[string]any{"code": -32603, "message": "API rate limit exceeded"}
			default:
				r.Status = "completed"
				r.Result, _ = json.Marshal(map[string]any{"content": []any{map[string]any{"type": "text",
					"text": fmt.Sprintf("done %s after %d polls, key=%s", p.TaskID, t.polls, t.key)}}})
			}
			return r, nil
		})
}

// taskAnswerOnWire turns a JSON-RPC response whose result's _meta has
// testTaskMeta into the extension's CreateTaskResult.
func taskAnswerOnWire(line []byte) []byte {
	var msg map[string]json.RawMessage
	if json.Unmarshal(line, &msg) != nil {
		return line
	}
	var res struct {
		Meta map[string]any `json:"_meta"`
	}
	if json.Unmarshal(msg["result"], &res) != nil || res.Meta[testTaskMeta] == nil {
		return line
	}
	msg["result"], _ = json.Marshal(map[string]any{"resultType": "task", "taskId": res.Meta[testTaskMeta],
		"status": "working", "createdAt": "2026-07-28T10:30:00Z", "lastUpdatedAt": "2026-07-28T10:30:00Z",
		"ttlMs": 60000, "pollIntervalMs": 10})
	out, _ := json.Marshal(msg)
	return append(out, '\n')
}

// TestTasksExtension2026 runs MCP tasks as the 2026-07-28 extension defines
// them against a server built with the SDK: the session speaks 2026-07-28,
// the client declares the extension, the server answers with a task
// handle, and tasks/get brings the result inline.
func TestTasksExtension2026(t *testing.T) {
	m := start(t, testOptions(), goServer("go", modeTasks, nil))
	waitReady(t, m, "go")
	sess, err := m.servers[0].current()
	if err != nil {
		t.Fatal(err)
	}
	if v := sess.cs.InitializeResult().ProtocolVersion; v < "2026-07-28" {
		t.Fatalf("the session speaks %s", v)
	}
	var handles []string
	record := func(_ context.Context, h string) error { handles = append(handles, h); return nil }
	r, err := findTool(t, m, "go__slow").CallParts(context.Background(),
		tools.Call{IdempotencyKey: "key-7", Arguments: json.RawMessage(`{}`), RecordHandle: record})
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "done task-1 after 3 polls, key=key-7" || len(handles) != 1 || handles[0] != "task-1" {
		t.Fatalf("result %q, handles %q", r.Text, handles)
	}

	// Resumed from its handle: polled again, not called again.
	before := wireCalls(t, m, "go")
	r, err = findTool(t, m, "go__slow").CallParts(context.Background(), tools.Call{IdempotencyKey: "key-7", Handle: "task-1"})
	if err != nil || !strings.HasPrefix(r.Text, "done task-1 after 4 polls") {
		t.Fatalf("resumed: %q, %v", r.Text, err)
	}
	if after := wireCalls(t, m, "go"); after != before {
		t.Errorf("resuming sent %d tools/call", after-before)
	}

	_, err = findTool(t, m, "go__doomed").CallParts(context.Background(), tools.Call{IdempotencyKey: "k", RecordHandle: record})
	if !errors.Is(err, ErrTask) || !strings.Contains(err.Error(), "task-2 failed: API rate limit exceeded (code -32603)") {
		t.Fatalf("doomed: %v", err)
	}

	// Without RecordHandle a task cannot be made durable: the call fails
	// rather than wait on a handle nobody recorded.
	_, err = findTool(t, m, "go__slow").CallParts(context.Background(), tools.Call{IdempotencyKey: "k"})
	if !errors.Is(err, ErrTask) {
		t.Fatalf("without RecordHandle: %v", err)
	}
}
