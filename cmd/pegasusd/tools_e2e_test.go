package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pegasus-engine/pegasus/agent/mcp"
	"github.com/pegasus-engine/pegasus/api"
	pclient "github.com/pegasus-engine/pegasus/client"
	"github.com/pegasus-engine/pegasus/internal/mcptest"
)

// The end-to-end tests of tools (MCP servers and worker tools) run a real
// daemon (internal/daemontest) with a configuration file, a fake
// OpenAI-compatible model scripted by the task's input, the MCP servers
// pinned in agent/mcp/testdata/npm, a small MCP server built with the SDK
// (this test binary, started with e2eMCPServerEnv set), and tool workers
// in Go (the worker SDK) and in Python (examples/worker-python).

// ---- the scripted model

// scriptedModel is an OpenAI-compatible server (/models, /chat/completions)
// whose answers the task's input scripts: each line `call TOOL {JSON}` of
// the input is one tool call, asked in order, one per completion; once
// every call has its result, it answers with the results' text, one per
// line. An input without calls is answered "done: INPUT". With status set,
// every completion answers that status instead.
type scriptedModel struct {
	*httptest.Server
	name   string
	status int

	mu    sync.Mutex
	calls int // completions asked
}

func startScriptedModel(t *testing.T, name string, status int) *scriptedModel {
	t.Helper()
	m := &scriptedModel{name: name, status: status}
	m.Server = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.Close)
	return m
}

// completions is how many completions the model was asked for.
func (m *scriptedModel) completions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

// The wire format, as agent/llm's client sends and reads it.
type (
	chatRequest struct {
		Messages []chatMessage `json:"messages"`
	}
	chatMessage struct {
		Role       string         `json:"role"`
		Content    *string        `json:"content"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
		ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	}
	chatToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
)

func (m *scriptedModel) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models": // the probe at start
		fmt.Fprintf(w, `{"data":[{"id":%q}]}`, m.name)
		return
	case "/v1/chat/completions":
	default:
		http.NotFound(w, r)
		return
	}
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
	if m.status != 0 {
		http.Error(w, `{"error":{"message":"the scripted model fails"}}`, m.status)
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	content, call := scriptedReply(req.Messages)
	var calls []chatToolCall
	if call != nil {
		calls = []chatToolCall{*call}
	}
	writeCompletion(w, m.name, content, calls)
}

// writeCompletion writes a chat completion of model: the tool calls if
// any, else the text content.
func writeCompletion(w io.Writer, model, content string, calls []chatToolCall) {
	msg := map[string]any{"role": "assistant"}
	finish := "stop"
	if calls != nil {
		msg["content"], msg["tool_calls"], finish = nil, calls, "tool_calls"
	} else {
		msg["content"] = content
	}
	json.NewEncoder(w).Encode(map[string]any{
		"model":   model,
		"choices": []any{map[string]any{"message": msg, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 5},
	})
}

// lastUser is the index of the task's input in msgs, the last user
// message; -1 when there is none, or it has no content.
func lastUser(msgs []chatMessage) int {
	user := -1
	for i, m := range msgs {
		if m.Role == "user" {
			user = i
		}
	}
	if user >= 0 && msgs[user].Content == nil {
		return -1
	}
	return user
}

// scriptedReply is the model's next answer to msgs: a tool call, or text.
func scriptedReply(msgs []chatMessage) (string, *chatToolCall) {
	user := lastUser(msgs)
	if user < 0 {
		return "nothing to do", nil
	}
	input := *msgs[user].Content
	var results []string
	for _, m := range msgs[user+1:] {
		if m.Role == "tool" && m.Content != nil {
			results = append(results, *m.Content)
		}
	}
	var calls []chatToolCall
	for line := range strings.Lines(input) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "call ")
		if !ok {
			continue
		}
		name, args, _ := strings.Cut(rest, " ")
		c := chatToolCall{ID: fmt.Sprintf("call_%d", len(calls)+1), Type: "function"}
		c.Function.Name, c.Function.Arguments = name, strings.TrimSpace(args)
		if c.Function.Arguments == "" {
			c.Function.Arguments = "{}"
		}
		calls = append(calls, c)
	}
	switch {
	case len(calls) == 0:
		return "done: " + input, nil
	case len(results) < len(calls):
		return "", &calls[len(results)]
	}
	return strings.Join(results, "\n"), nil
}

// ---- a small MCP server built with the SDK: this test binary

// e2eMCPServerEnv, set to a mode, makes this test binary an MCP server on
// stdio (TestMain).
const e2eMCPServerEnv = "PEGASUS_E2E_MCP_SERVER"

// runE2EMCPServer serves on stdio. In mode "silent" it never answers
// initialize; otherwise its tools are:
//
//	hold       asks $HOLD_URL?key=KEY (KEY: the call's idempotency key) and
//	           answers with the answer's body: the test holds the call
//	crash      exits the process during the call
//	malformed  answers with content that is a string, not a list
func runE2EMCPServer(mode string) error {
	s := sdk.NewServer(&sdk.Implementation{Name: "pegasus-e2e", Version: "1"}, nil)
	if mode == "silent" {
		mcptest.Silent(s)
	}
	text := func(s string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	obj := map[string]any{"type": "object"}
	s.AddTool(&sdk.Tool{Name: "hold", Description: "Holds the call until the test lets it go.", InputSchema: obj},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			key, _ := req.Params.Meta[mcp.MetaIdempotencyKey].(string)
			hr, err := http.NewRequestWithContext(ctx, "GET", os.Getenv("HOLD_URL")+"?key="+key, nil)
			if err != nil {
				return nil, err
			}
			resp, err := http.DefaultClient.Do(hr)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			return text(string(body)), err
		})
	s.AddTool(&sdk.Tool{Name: "crash", Description: "Exits mid-call.", InputSchema: obj},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&sdk.Tool{Name: "malformed", Description: "Answers with a malformed result.", InputSchema: obj},
		func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return text(mcptest.MalformedText), nil
		})
	return s.Run(context.Background(), &sdk.IOTransport{Reader: os.Stdin, Writer: mcptest.Malformer{W: os.Stdout}})
}

// holder is the endpoint the hold tool asks: it records each call's key
// and answers once released (or when the caller goes away).
type holder struct {
	*httptest.Server
	keys    chan string
	release chan struct{}
	once    sync.Once
}

func startHolder(t *testing.T) *holder {
	t.Helper()
	h := &holder{keys: make(chan string, 16), release: make(chan struct{})}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		h.keys <- key
		select {
		case <-h.release:
			fmt.Fprintf(w, "held %s", key)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { h.letGo(); h.Close() })
	return h
}

func (h *holder) letGo() { h.once.Do(func() { close(h.release) }) }

// nextKey waits for the next call of the hold tool and returns its key.
func (h *holder) nextKey(t *testing.T, what string) string {
	t.Helper()
	select {
	case k := <-h.keys:
		return k
	case <-time.After(testTimeout):
		t.Fatalf("no call of the hold tool: %s", what)
		return ""
	}
}

// ---- the rig

// npmServer returns the path of an npm binary of agent/mcp/testdata/npm:
// without it (or node) the test skips, or fails when CI=true.
func npmServer(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "agent", "mcp", "testdata", "npm", "node_modules", ".bin", name))
	if err != nil {
		t.Fatal(err)
	}
	_, serr := os.Stat(p)
	_, nerr := exec.LookPath("node")
	if serr != nil || nerr != nil {
		msg := fmt.Sprintf("%s is not installed: run `npm ci` in agent/mcp/testdata/npm (node: %v)", name, nerr)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// freeAddr is a free port of the loopback.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// toolRig is a daemon started with a configuration file.
type toolRig struct {
	t      *testing.T
	bin    string // pegasusd
	replay string // the directory of pegasus-replay
	data   string
	cfg    string // the configuration file
	p      *proc
	c      *pclient.Client
}

// rigBin is the pegasusd binary of the rigs, built once per test binary
// beside pegasus-replay (in a directory of its own: the documentation's
// examples have pegasus-replay's on their PATH).
var rigBin struct {
	once sync.Once
	path string
	err  error
}

func rigDaemon(t *testing.T) string {
	t.Helper()
	dir := buildReplay(t)
	rigBin.once.Do(func() {
		p := filepath.Join(dir, "daemon", "pegasusd")
		out, err := exec.Command("go", "build", "-o", p, ".").CombinedOutput()
		if err != nil {
			rigBin.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		rigBin.path = p
	})
	if rigBin.err != nil {
		t.Fatal(rigBin.err)
	}
	return rigBin.path
}

// startRig writes config into a file and starts a daemon with it.
func startRig(t *testing.T, config string, extra ...string) *toolRig {
	t.Helper()
	r := &toolRig{t: t, bin: rigDaemon(t), replay: buildReplay(t), data: filepath.Join(t.TempDir(), "data"),
		cfg: filepath.Join(t.TempDir(), "pegasus.yaml")}
	if err := os.WriteFile(r.cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	r.p = startProc(t, r.bin, r.data, append([]string{"--config", r.cfg, "--no-reflection"}, extra...)...)
	r.connect()
	return r
}

func (r *toolRig) connect() {
	c, err := pclient.New(r.p.url, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.c = c
}

// restart starts the daemon again on its data directory and address.
func (r *toolRig) restart() {
	r.t.Helper()
	d, err := r.p.Restart()
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = d.Kill() })
	r.p = &proc{Daemon: d, url: d.URL}
	r.connect()
}

func (r *toolRig) submit(input string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := r.c.Submit(ctx, api.CreateTask{Input: input})
	if err != nil {
		r.t.Fatal(err)
	}
	return c.TaskID
}

// wait returns the task once it finished.
func (r *toolRig) wait(id string) api.Task {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	task, err := r.c.Wait(ctx, id)
	if err != nil || !task.Finished() {
		r.t.Fatalf("task %s: %s, %v\n%s", id, task.State, err, r.p.output())
	}
	return task
}

// events are the task's events.
func (r *toolRig) events(id string) []api.Event {
	r.t.Helper()
	evs, err := r.c.TaskEvents(context.Background(), id, 0, 1000)
	if err != nil {
		r.t.Fatal(err)
	}
	return evs.Events
}

// toolEvent is the first event of type typ of the task's, its data
// decoded; it fails the test when there is none.
func (r *toolRig) toolEvent(id, typ string) toolEventData {
	r.t.Helper()
	for _, e := range r.events(id) {
		if e.Type == typ {
			var d toolEventData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				r.t.Fatal(err)
			}
			return d
		}
	}
	r.t.Fatalf("task %s has no %s", id, typ)
	return toolEventData{}
}

type toolEventData struct {
	Tool           string `json:"tool"`
	Source         string `json:"source"`
	Task           string `json:"task"`
	Result         string `json:"result"`
	Error          string `json:"error"`
	IdempotencyKey string `json:"idempotency_key"`
}

// replayCmd runs pegasus-replay with args and returns its output; it
// fails the test unless it exits 0.
func (r *toolRig) replayCmd(args ...string) string {
	r.t.Helper()
	out, err := exec.Command(filepath.Join(r.replay, "pegasus-replay"), args...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("pegasus-replay %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// stopAndVerify stops the daemon and runs pegasus-replay verify on its
// data directory.
func (r *toolRig) stopAndVerify() {
	r.t.Helper()
	r.p.stop(r.t)
	r.replayCmd("--data-dir", r.data, "verify") // exit 1 on a problem
}

// readyz is the daemon's /readyz answer.
func (r *toolRig) readyz() (servers []api.MCPServer) {
	r.t.Helper()
	resp, err := http.Get(r.p.url + "/readyz")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status  string          `json:"status"`
		Servers []api.MCPServer `json:"mcp_servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		r.t.Fatalf("readyz: %d %v", resp.StatusCode, err)
	}
	return out.Servers
}

// waitServers polls /readyz (the servers are subprocesses) until each
// named server has the health wanted.
func (r *toolRig) waitServers(want map[string]string) {
	r.t.Helper()
	deadline := time.Now().Add(2 * testTimeout)
	for {
		got := map[string]string{}
		for _, s := range r.readyz() {
			got[s.Name] = s.Health
		}
		ok := true
		for name, h := range want {
			ok = ok && got[name] == h
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("MCP servers %v, want %v\n%s", got, want, r.p.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// goWorker runs a tool worker on the worker SDK (package client) for
// capability cap until the test ends; h answers each call.
func goWorker(t *testing.T, url, id, cap string, h pclient.HandlerFunc) {
	t.Helper()
	c, err := pclient.New(url, &pclient.Options{AgentID: id, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w, err := pclient.NewWorker(c, &pclient.WorkerOptions{Capabilities: []string{cap}, PollWait: 5 * time.Second, ShutdownTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx, h) }()
	t.Cleanup(func() { cancel(); <-done })
}

// pythonWorker runs examples/worker-python/worker.py against the daemon
// at url until the test ends.
func pythonWorker(t *testing.T, url, id string) *bytes.Buffer {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed")
		}
		t.Skip("python3 is not installed")
	}
	var out bytes.Buffer
	cmd := exec.Command(py, filepath.Join("..", "..", "examples", "worker-python", "worker.py"), "--url", url, "--id", id)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &out
}

// reverse is the Go worker's tool: {"text": "abc"} -> {"text": "cba"}.
func reverse(ctx context.Context, t *pclient.Task) (any, error) {
	var args struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(t.Metadata["arguments"], &args); err != nil {
		return nil, pclient.Permanent(fmt.Errorf("bad arguments: %w", err))
	}
	r := []rune(args.Text)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return map[string]string{"text": string(r)}, nil
}

const workerToolsConfig = `tools:
  - name: shout
    description: Upper-cases a text.
    parameters: {type: object, properties: {text: {type: string}}, required: [text]}
    capability: shout
  - name: reverse
    description: Reverses a text.
    parameters: {type: object, properties: {text: {type: string}}, required: [text]}
    capability: reverse
`

// modelConfig declares the scripted model as the default one.
func modelConfig(m *scriptedModel) string {
	return fmt.Sprintf("models:\n  - {name: scripted, baseUrl: %q, model: %s, maxAttempts: 1, default: true}\n", m.URL+"/v1", m.name)
}

// TestToolsEndToEnd: through a real daemon, the model asks for the tools
// of server-everything over stdio and over Streamable HTTP, of
// server-filesystem on a temporary folder, and of two tool workers, one in
// Go on the worker SDK and one in Python on its standard library; each
// call is recorded with its source, the tasks' results hold the tools'
// answers, pegasus-replay show renders where each ran, and verify is
// clean.
func TestToolsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	everything := npmServer(t, "mcp-server-everything")
	filesystem := npmServer(t, "mcp-server-filesystem")
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from the folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, _ = filepath.EvalSymlinks(root)

	// server-everything over Streamable HTTP, as its own process.
	webAddr := freeAddr(t)
	web := exec.Command(everything, "streamableHttp")
	_, port, _ := net.SplitHostPort(webAddr)
	web.Env = append(os.Environ(), "PORT="+port)
	if err := web.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = web.Process.Kill(); _ = web.Wait() })

	model := startScriptedModel(t, "scripted-1", 0)
	config := modelConfig(model) + fmt.Sprintf(`mcpServers:
  everything:
    command: %q
    args: [stdio]
  web:
    url: http://%s/mcp
  fs:
    command: %q
    args: [%q]
`, everything, webAddr, filesystem, root) + workerToolsConfig
	r := startRig(t, config)
	r.waitServers(map[string]string{"everything": "ok", "web": "ok", "fs": "ok"})
	goWorker(t, r.p.url, "go-reverser", "reverse", reverse)
	pyOut := pythonWorker(t, r.p.url, "py-shouter")

	cases := []struct {
		input, source, want string
		worker              bool
	}{
		{`call everything__echo {"message":"hi"}`, "mcp:everything", "Echo: hi", false},
		{`call web__echo {"message":"over http"}`, "mcp:web", "Echo: over http", false},
		{fmt.Sprintf(`call fs__read_text_file {"path":%q}`, filepath.Join(root, "hello.txt")), "mcp:fs", "hello from the folder", false},
		{`call shout {"text":"hello from python"}`, "worker:shout", `"text":"HELLO FROM PYTHON"`, true},
		{`call reverse {"text":"og olleh"}`, "worker:reverse", `"text":"hello go"`, true},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		ids[i] = r.submit(c.input)
	}
	for i, c := range cases {
		id := ids[i]
		task := r.wait(id)
		if task.State != api.StateCompleted || !strings.Contains(task.Result, c.want) {
			t.Errorf("%s: %s %q, want the result to hold %q\npython worker: %s", c.input, task.State, task.Result, c.want, pyOut)
			continue
		}
		started, done := r.toolEvent(id, "TOOL_CALL_STARTED"), r.toolEvent(id, "TOOL_CALL_COMPLETED")
		if started.Source != c.source || done.Source != c.source || !strings.Contains(done.Result, c.want) || done.IdempotencyKey == "" {
			t.Errorf("%s: started %+v, completed %+v", c.input, started, done)
		}
		show := r.replayCmd("--server", r.p.url, "show", id)
		if !strings.Contains(show, "source="+c.source) {
			t.Errorf("%s: show does not say source=%s:\n%s", c.input, c.source, show)
		}
		if !c.worker {
			continue
		}
		// A worker tool's call ran as one broker task, a child of the
		// agent task, whose result is the worker's answer.
		if done.Task == "" || started.Task != done.Task || !strings.Contains(show, "task="+done.Task) {
			t.Errorf("%s: broker task %q/%q, show:\n%s", c.input, started.Task, done.Task, show)
			continue
		}
		bt, err := r.c.GetDispatch(context.Background(), done.Task)
		if err != nil {
			t.Fatal(err)
		}
		if bt.ParentTaskID != id || bt.Status != "completed" || bt.Source != "tool" || !strings.Contains(string(bt.Result), c.want) {
			t.Errorf("%s: broker task %+v", c.input, bt)
		}
	}

	// A worker's final failure is the call's TOOL_CALL_FAILED, with the
	// broker's reason, which the model reads.
	id := r.submit(`call shout {"text":5}`)
	task := r.wait(id)
	failed := r.toolEvent(id, "TOOL_CALL_FAILED")
	want := `tool shout failed: dead-lettered after 1 failure (retry_eligible=false): bad arguments: "text" is missing or not a string`
	if failed.Error != want || failed.Source != "worker:shout" || task.State != api.StateCompleted || !strings.Contains(task.Result, want) {
		t.Errorf("a worker's failure: %+v; task %s %q", failed, task.State, task.Result)
	}
	r.stopAndVerify()
}

// e2eServerConfig declares this test binary as the MCP server name, in
// mode, with env added.
func e2eServerConfig(t *testing.T, name, mode string, env map[string]string) string {
	t.Helper()
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n    command: %q\n    env:\n      %s: %s\n", name, self, e2eMCPServerEnv, mode)
	for k, v := range env {
		fmt.Fprintf(&b, "      %s: %q\n", k, v)
	}
	return b.String()
}

// toolTasks are the broker tasks of worker tool calls whose parent is
// the agent task parent.
func (r *toolRig) toolTasks(parent string) []api.DispatchTask {
	r.t.Helper()
	page, err := r.c.ListDispatch(context.Background(), pclient.DispatchListOptions{Source: "tool", Limit: 1000})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []api.DispatchTask
	for _, bt := range page.Tasks {
		if bt.ParentTaskID == parent {
			out = append(out, bt)
		}
	}
	return out
}

// TestToolCallsSurviveKill9: the daemon is killed (SIGKILL) while an MCP
// call and a worker tool call are in flight. After the restart the MCP
// call is sent again with the same idempotency key, the worker's call is
// not duplicated (its agent task has one broker task, which the worker
// still holding it completes), both tasks end once, and verify is clean.
func TestToolCallsSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	hold := startHolder(t)
	model := startScriptedModel(t, "scripted-1", 0)
	config := modelConfig(model) + "mcpServers:\n" + e2eServerConfig(t, "slow", "tools", map[string]string{"HOLD_URL": hold.URL}) + `tools:
  - name: wait
    description: Answers once the worker is let go.
    capability: wait
`
	r := startRig(t, config)
	r.waitServers(map[string]string{"slow": "ok"})
	taken, letWorkerGo := make(chan string, 4), make(chan struct{})
	goWorker(t, r.p.url, "go-waiter", "wait", func(ctx context.Context, task *pclient.Task) (any, error) {
		taken <- task.TaskID
		select {
		case <-letWorkerGo:
			return map[string]string{"text": "the worker let go"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})

	mcpTask := r.submit(`call slow__hold {}`)
	workerTask := r.submit(`call wait {}`)
	key := hold.nextKey(t, "before the kill")
	var child string
	select {
	case child = <-taken:
	case <-time.After(testTimeout):
		t.Fatalf("the worker got no task\n%s", r.p.output())
	}
	r.p.kill(t)

	r.restart()
	select {
	case again := <-hold.keys:
		if again != key {
			t.Errorf("the MCP call ran again with key %q, first with %q", again, key)
		}
	case <-time.After(testTimeout):
		task, _ := r.c.Get(context.Background(), mcpTask)
		var evs []string
		for _, e := range r.events(mcpTask) {
			evs = append(evs, e.Type+" "+string(e.Data))
		}
		t.Fatalf("no call of the hold tool after the restart: task %s\n%s\n%s", task.State, strings.Join(evs, "\n"), r.p.output())
	}
	hold.letGo()
	close(letWorkerGo)

	if task := r.wait(mcpTask); task.State != api.StateCompleted || task.Result != "held "+key {
		t.Errorf("MCP task: %s %q, want held %s", task.State, task.Result, key)
	}
	if task := r.wait(workerTask); task.State != api.StateCompleted || !strings.Contains(task.Result, "the worker let go") {
		t.Errorf("worker task: %s %q", task.State, task.Result)
	}
	if bts := r.toolTasks(workerTask); len(bts) != 1 || bts[0].TaskID != child || bts[0].Status != "completed" {
		t.Errorf("the worker call's broker tasks: %+v, want one: %s, completed", bts, child)
	}
	select {
	case again := <-taken:
		t.Errorf("the worker was handed the call again: %s", again)
	default:
	}
	r.p.stop(t)
	checkLog(t, r.data, map[string]bool{mcpTask: true, workerTask: true})
	r.replayCmd("--data-dir", r.data, "verify")
}

// TestToolFailuresThroughTheDaemon: an MCP server that never answers
// initialize, one that crashes mid-call and one that answers a malformed
// result fail their calls with clear errors (TOOL_CALL_FAILED, which the
// model reads), nothing is lost, and the daemon keeps serving: /readyz
// shows the silent server down and the crashed one back, other tasks
// complete. A task type whose model answers 500 falls back to the next
// model, and the log has both calls.
func TestToolFailuresThroughTheDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	good := startScriptedModel(t, "scripted-1", 0)
	broken := startScriptedModel(t, "broken-1", http.StatusInternalServerError)
	config := modelConfig(good) + fmt.Sprintf(`  - {name: broken, baseUrl: %q, model: broken-1, maxAttempts: 1}
taskTypes:
  - name: resilient
    systemPrompt: You answer.
    model: broken
    fallback: [scripted]
mcpServers:
`, broken.URL+"/v1") + e2eServerConfig(t, "mute", "silent", nil) + "    initTimeout: 500ms\n" + e2eServerConfig(t, "shaky", "tools", nil)
	r := startRig(t, config)
	r.waitServers(map[string]string{"mute": "down", "shaky": "ok"})
	if s := r.readyz(); !strings.Contains(fmt.Sprint(s), "no answer to initialize within 500ms") {
		t.Errorf("readyz: %+v", s)
	}

	acked := map[string]bool{}
	failing := []struct{ input, want string }{
		{`call shaky__malformed {}`, "mcp: malformed result"},
		{`call shaky__crash {}`, "mcp: server went away during the call"},
		{`call mute__anything {}`, `tool "mute__anything" is unknown: mcp: server is not ready: server "mute" is down: no answer to initialize within 500ms`},
	}
	for _, c := range failing {
		id := r.submit(c.input)
		acked[id] = true
		task := r.wait(id)
		failed := r.toolEvent(id, "TOOL_CALL_FAILED")
		if !strings.Contains(failed.Error, c.want) {
			t.Errorf("%s: TOOL_CALL_FAILED %q, want %q", c.input, failed.Error, c.want)
		}
		// The model read the error and answered with it.
		if task.State != api.StateCompleted || !strings.Contains(task.Result, c.want) {
			t.Errorf("%s: %s %q", c.input, task.State, task.Result)
		}
	}
	// The crashed server is started again; other tasks go on meanwhile.
	id := r.submit("hello")
	acked[id] = true
	if task := r.wait(id); task.State != api.StateCompleted || task.Result != "done: hello" {
		t.Errorf("a plain task: %s %q", task.State, task.Result)
	}
	r.waitServers(map[string]string{"mute": "down", "shaky": "ok"})
	for _, s := range r.readyz() {
		if s.Name == "shaky" && s.Restarts < 1 {
			t.Errorf("shaky was not restarted: %+v", s)
		}
	}

	// Model fallback: broken answers 500, scripted answers.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	created, err := r.c.Submit(ctx, api.CreateTask{Input: "hello fallback", Type: "resilient"})
	if err != nil {
		t.Fatal(err)
	}
	acked[created.TaskID] = true
	if task := r.wait(created.TaskID); task.State != api.StateCompleted || task.Result != "done: hello fallback" {
		t.Errorf("fallback task: %s %q", task.State, task.Result)
	}
	var calls []string
	for _, e := range r.events(created.TaskID) {
		if e.Type != "MODEL_CALLED" {
			continue
		}
		var mc struct {
			Model  string `json:"model"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal(e.Data, &mc); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, fmt.Sprintf("%s %d", mc.Model, mc.Status))
	}
	if want := []string{"broken-1 500", "scripted-1 200"}; strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Errorf("MODEL_CALLED: %q, want %q", calls, want)
	}
	if broken.completions() != 1 {
		t.Errorf("the broken model was asked %d times, want 1", broken.completions())
	}
	r.p.stop(t)
	checkLog(t, r.data, acked)
	r.replayCmd("--data-dir", r.data, "verify")
}
