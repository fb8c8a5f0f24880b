package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP tasks on the wire. Two revisions define them:
//
//   - 2025-11-25 (core, experimental): a server declares
//     capabilities.tasks.requests.tools.call and each tool its
//     execution.taskSupport ("forbidden", "optional", "required"); the
//     client adds "task": {} to a tools/call; the server answers
//     {"task": {"taskId", "status", "pollInterval", ...}}; the client polls
//     tasks/get {"taskId"} and, once the status is completed, fetches the
//     CallToolResult with tasks/result {"taskId"}.
//   - 2026-07-28 (the io.modelcontextprotocol/tasks extension): the client
//     declares the extension in the per-request capabilities of its
//     requests' _meta; the server may answer any tools/call with
//     {"resultType": "task", "taskId", "status", "pollIntervalMs", ...};
//     tasks/get answers with the status and, once completed, the
//     CallToolResult in "result" (or a JSON-RPC error in "error" when
//     failed). There is no tasks/result.
//
// The SDK (v1.8.0) keeps neither the tasks capability nor a tool's
// execution, has no "task" field in CallToolParams, and decodes a task
// answer as an empty CallToolResult. So a session's taskState rewrites
// three messages and nothing else, on a stdio session in taskConn (a
// wrapper of the SDK's connection), on a Streamable HTTP session in
// taskHTTP (the HTTP client's transport, tasks_http.go):
//
//   - the answer to initialize (or server/discover): it notes whether the
//     server offers tasks for tools/call;
//   - the answer to tools/list: each tool's execution.taskSupport is copied
//     into the tool's _meta as metaTaskSupport;
//   - a tools/call whose _meta has metaAsTask: the marker is removed and,
//     on a 2025-11-25 session, "task": {} added; the answer, when it is a
//     task, becomes a CallToolResult with no content and the task in its
//     _meta under metaTask.
//
// tasks/get, tasks/result and tasks/cancel are sent with the SDK's custom
// methods.
const (
	taskExtension   = "io.modelcontextprotocol/tasks"
	metaTaskSupport = "io.pegasus/task-support"
	metaAsTask      = "io.pegasus/as-task"
	metaTask        = "io.pegasus/task"
)

// taskState is what a session's connection learnt about tasks.
type taskState struct {
	mu      sync.Mutex
	pending map[any]string // request id -> method, for the answers to rewrite
	legacy  bool           // the server offers 2025-11-25 tasks for tools/call
	ext     bool           // the server offers the 2026-07-28 extension
	modern  bool           // the session speaks 2026-07-28 or later
	calls   int            // tools/call requests sent (tests count them)
}

// useTask reports whether a call to a tool with this execution.taskSupport
// is sent as a task.
func (st *taskState) useTask(support string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.legacy && !st.modern && (support == "optional" || support == "required")
}

// sent counts a tools/call sent past the connection's rewriting (direct.go).
func (st *taskState) sent() {
	st.mu.Lock()
	st.calls++
	st.mu.Unlock()
}

func (st *taskState) isModern() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.modern
}

// waiting reports whether an answer is awaited that may be rewritten.
func (st *taskState) waiting() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.pending) > 0
}

func (st *taskState) extension() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ext
}

func (st *taskState) track(id jsonrpc.ID, method string) {
	st.mu.Lock()
	st.pending[id] = method
	st.mu.Unlock()
}

// out notes the requests whose answers in rewrites and rewrites a
// tools/call marked metaAsTask. It returns msg itself when it leaves it
// alone.
func (st *taskState) out(msg jsonrpc.Message) jsonrpc.Message {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return msg
	}
	switch req.Method {
	case "initialize", "server/discover", "tools/list":
		st.track(req.ID, req.Method)
	case "tools/call":
		st.mu.Lock()
		st.calls++
		st.mu.Unlock()
		if bytes.Contains(req.Params, []byte(metaAsTask)) {
			st.track(req.ID, req.Method)
			if p, err := st.asTask(req.Params); err == nil {
				r := *req
				r.Params = p
				return &r
			}
		} else if st.isModern() && st.extension() {
			st.track(req.ID, req.Method)
		}
	}
	return msg
}

// asTask removes the marker from a tools/call's _meta and, on a 2025-11-25
// session, asks for a task.
func (st *taskState) asTask(params json.RawMessage) (json.RawMessage, error) {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, err
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(p["_meta"], &meta); err != nil {
		return nil, err
	}
	delete(meta, metaAsTask)
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	p["_meta"] = b
	if !st.isModern() {
		p["task"] = json.RawMessage(`{}`)
	}
	return json.Marshal(p)
}

// in rewrites the answers out noted. It returns msg itself when it leaves
// it alone.
func (st *taskState) in(msg jsonrpc.Message) jsonrpc.Message {
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return msg
	}
	st.mu.Lock()
	method, ok := st.pending[resp.ID]
	delete(st.pending, resp.ID)
	st.mu.Unlock()
	if !ok || resp.Error != nil || len(resp.Result) == 0 {
		return msg
	}
	var rewritten json.RawMessage
	switch method {
	case "initialize", "server/discover":
		st.capabilities(resp.Result)
	case "tools/list":
		rewritten = toolsWithTaskSupport(resp.Result)
	case "tools/call":
		rewritten = taskAnswer(resp.Result)
	}
	if rewritten == nil {
		return msg
	}
	r := *resp
	r.Result = rewritten
	return &r
}

// taskTransport wraps a stdio transport's connection in a taskConn.
type taskTransport struct {
	inner mcp.Transport
	st    *taskState
}

func (t *taskTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &taskConn{Connection: c, st: t.st}, nil
}

type taskConn struct {
	mcp.Connection
	st *taskState
}

func (c *taskConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	return c.Connection.Write(ctx, c.st.out(msg))
}

func (c *taskConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		return msg, err
	}
	return c.st.in(msg), nil
}

// capabilities notes the protocol version and the tasks the server offers.
func (st *taskState) capabilities(result json.RawMessage) {
	var r struct {
		ProtocolVersion   string   `json:"protocolVersion"`
		SupportedVersions []string `json:"supportedVersions"`
		Capabilities      struct {
			Tasks *struct {
				Requests *struct {
					Tools *struct {
						Call json.RawMessage `json:"call"`
					} `json:"tools"`
				} `json:"requests"`
			} `json:"tasks"`
			Extensions map[string]json.RawMessage `json:"extensions"`
		} `json:"capabilities"`
	}
	if json.Unmarshal(result, &r) != nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	t := r.Capabilities.Tasks
	st.legacy = t != nil && t.Requests != nil && t.Requests.Tools != nil && t.Requests.Tools.Call != nil
	_, st.ext = r.Capabilities.Extensions[taskExtension]
	// initialize names the version; server/discover lists the supported ones
	// and the SDK then speaks 2026-07-28 or later.
	st.modern = r.ProtocolVersion >= "2026-07-28" || r.ProtocolVersion == "" && len(r.SupportedVersions) > 0
}

// toolsWithTaskSupport copies each tool's execution.taskSupport into its
// _meta, or returns nil when no tool has one.
func toolsWithTaskSupport(result json.RawMessage) json.RawMessage {
	if !bytes.Contains(result, []byte(`"taskSupport"`)) {
		return nil
	}
	var r map[string]json.RawMessage
	if json.Unmarshal(result, &r) != nil {
		return nil
	}
	var list []map[string]json.RawMessage
	if json.Unmarshal(r["tools"], &list) != nil {
		return nil
	}
	for _, t := range list {
		var ex struct {
			TaskSupport string `json:"taskSupport"`
		}
		if json.Unmarshal(t["execution"], &ex) != nil || ex.TaskSupport == "" {
			continue
		}
		meta := map[string]any{}
		_ = json.Unmarshal(t["_meta"], &meta)
		meta[metaTaskSupport] = ex.TaskSupport
		t["_meta"], _ = json.Marshal(meta)
	}
	b, err := json.Marshal(list)
	if err != nil {
		return nil
	}
	r["tools"] = b
	out, err := json.Marshal(r)
	if err != nil {
		return nil
	}
	return out
}

// taskAnswer turns a task answer to tools/call into a CallToolResult that
// carries the task in its _meta, or returns nil for any other answer.
func taskAnswer(result json.RawMessage) json.RawMessage {
	var r struct {
		ResultType string          `json:"resultType"`
		Task       json.RawMessage `json:"task"`
		Content    json.RawMessage `json:"content"`
	}
	if json.Unmarshal(result, &r) != nil {
		return nil
	}
	var task json.RawMessage
	switch {
	case r.ResultType == "task":
		task = result
	case r.Task != nil && r.Content == nil:
		task = r.Task
	default:
		return nil
	}
	out, err := json.Marshal(map[string]any{"content": []any{}, "_meta": map[string]json.RawMessage{metaTask: task}})
	if err != nil {
		return nil
	}
	return out
}

// taskInfo is a task as tasks/get and a task answer describe it, in either
// revision.
type taskInfo struct {
	mcp.ResultBase
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	PollInterval   *int64          `json:"pollInterval,omitempty"`   // 2025-11-25, ms
	PollIntervalMs *int64          `json:"pollIntervalMs,omitempty"` // 2026-07-28
	Result         json.RawMessage `json:"result,omitempty"`         // 2026-07-28, completed
	Error          *jsonrpc.Error  `json:"error,omitempty"`          // 2026-07-28, failed
}

type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

func registerTaskMethods(c *mcp.Client) {
	_ = mcp.AddSendingCustomMethod[*taskParams, *taskInfo](c, "tasks/get")
	_ = mcp.AddSendingCustomMethod[*taskParams, *mcp.CallToolResult](c, "tasks/result")
	_ = mcp.AddSendingCustomMethod[*taskParams, *taskInfo](c, "tasks/cancel")
}

// cancelTimeout bounds a tasks/cancel.
const cancelTimeout = 5 * time.Second

// cancelTask asks the server to cancel task id, whose call's context ended
// (the agent cancelled the call, or it timed out): its result would never
// be used. It does not once the manager is stopping or closing: the daemon
// stops, and the next start polls the task again. A failure is logged: the
// call has already failed.
func (t *tool) cancelTask(ctx context.Context, sess *session, id string) {
	if t.s.m.closed() || t.s.m.stopping.Load() {
		return
	}
	t.sendCancel(ctx, sess, id)
}

// sendCancel sends tasks/cancel for task id, unless the session ended.
func (t *tool) sendCancel(ctx context.Context, sess *session, id string) {
	if sess.ended() {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer cancel()
	if _, err := mcp.CallCustomMethod[*taskParams, *taskInfo](cctx, sess.cs, "tasks/cancel", &taskParams{TaskID: id}); err != nil {
		t.s.log.Warn("mcp task not cancelled", "task", id, "error", err)
	}
}

// taskOf returns the task a tools/call answered with, if it did.
func taskOf(res *mcp.CallToolResult) (taskInfo, bool) {
	raw, ok := res.Meta[metaTask]
	if !ok {
		return taskInfo{}, false
	}
	b, err := json.Marshal(raw)
	var t taskInfo
	if err != nil || json.Unmarshal(b, &t) != nil || t.TaskID == "" {
		return taskInfo{}, false
	}
	return t, true
}

// awaitTask polls a task until it ends and returns its result.
func (t *tool) awaitTask(ctx context.Context, sess *session, id string) (*mcp.CallToolResult, error) {
	name := t.s.cfg.Name
	for {
		info, err := mcp.CallCustomMethod[*taskParams, *taskInfo](ctx, sess.cs, "tasks/get", &taskParams{TaskID: id})
		if err != nil && ctx.Err() != nil {
			t.cancelTask(ctx, sess, id)
			return nil, t.callError(ctx, sess, err)
		}
		if err != nil {
			var wire *jsonrpc.Error
			if errors.As(err, &wire) && wire.Code == jsonrpc.CodeInvalidParams {
				return nil, fmt.Errorf("%w: server %q does not know task %s (it restarted or the task expired): %s; the call is not run again",
					ErrTask, name, id, wire.Message)
			}
			return nil, t.callError(ctx, sess, err)
		}
		switch info.Status {
		case "completed":
			if len(info.Result) > 0 {
				var res mcp.CallToolResult
				if err := json.Unmarshal(info.Result, &res); err != nil {
					return nil, fmt.Errorf("%w from server %q, task %s: %v", ErrMalformedResult, name, id, err)
				}
				return &res, nil
			}
			res, err := mcp.CallCustomMethod[*taskParams, *mcp.CallToolResult](ctx, sess.cs, "tasks/result", &taskParams{TaskID: id})
			if err != nil {
				return nil, t.callError(ctx, sess, err)
			}
			return res, nil
		case "failed":
			why := info.StatusMessage
			if info.Error != nil {
				why = fmt.Sprintf("%s (code %d)", info.Error.Message, info.Error.Code)
			}
			return nil, fmt.Errorf("%w: server %q, task %s failed: %s", ErrTask, name, id, why)
		case "cancelled":
			return nil, fmt.Errorf("%w: server %q, task %s was cancelled: %s", ErrTask, name, id, info.StatusMessage)
		case "input_required":
			return nil, fmt.Errorf("%w: server %q, task %s needs input, which the agent cannot give: %s",
				ErrTask, name, id, info.StatusMessage)
		case "working":
		default:
			return nil, fmt.Errorf("%w from server %q: task %s has status %q", ErrMalformedResult, name, id, info.Status)
		}
		wait := t.s.m.opts.PollInterval
		if p := info.PollInterval; p != nil {
			wait = time.Duration(*p) * time.Millisecond
		}
		if p := info.PollIntervalMs; p != nil {
			wait = time.Duration(*p) * time.Millisecond
		}
		wait = min(max(wait, 10*time.Millisecond), time.Minute)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			t.cancelTask(ctx, sess, id)
			return nil, fmt.Errorf("mcp: waiting for task %s of server %q: %w", id, name, context.Cause(ctx))
		case <-sess.done:
			timer.Stop()
			return nil, fmt.Errorf("%w: server %q, while waiting for task %s", ErrServerExited, name, id)
		case <-timer.C:
		}
	}
}
