package mcp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

func TestIdempotencyKeyInMeta(t *testing.T) {
	m := start(t, testOptions(), goServer("go", modeTools, nil))
	waitReady(t, m, "go")
	tl := findTool(t, m, "go__meta")
	if got := tools.SourceOf(tl).String(); got != "mcp:go" {
		t.Errorf("source = %q, want mcp:go", got)
	}
	r, err := call(context.Background(), tl, "task-1/step-3", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "key=task-1/step-3" {
		t.Errorf("the server saw %q, want key=task-1/step-3", r.Text)
	}
}

func TestToolErrorCarriesServerText(t *testing.T) {
	m := start(t, testOptions(), goServer("go", modeTools, nil))
	waitReady(t, m, "go")
	_, err := call(context.Background(), findTool(t, m, "go__fail"), "k", `{}`)
	var te *ToolError
	if !errors.As(err, &te) || err.Error() != "the disk is full" || te.Server != "go" || te.Tool != "fail" {
		t.Fatalf("err = %#v, want a ToolError with the server's text", err)
	}
}

func TestListChanged(t *testing.T) {
	m := start(t, testOptions(), goServer("go", modeTools, nil))
	waitReady(t, m, "go")
	changed := m.Changed()
	if _, err := call(context.Background(), findTool(t, m, "go__add"), "k", `{}`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("Changed was not closed after tools/list_changed")
	}
	r, err := call(context.Background(), findTool(t, m, "go__added"), "k", `{}`)
	if err != nil || r.Text != "here" {
		t.Fatalf("added tool: %q, %v", r.Text, err)
	}
}

func TestCancelSendsNotification(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mark")
	m := start(t, testOptions(), goServer("go", modeTools, map[string]string{"MARK_FILE": mark}))
	waitReady(t, m, "go")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, findTool(t, m, "go__block"), "k", `{}`)
		done <- err
	}()
	eventually(t, "the call to reach the server", func() bool {
		b, _ := os.ReadFile(mark)
		return string(b) == "started"
	})
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled call did not return")
	}
	// notifications/cancelled reached the server: its handler's context ended.
	eventually(t, "the server to see the cancellation", func() bool {
		b, _ := os.ReadFile(mark)
		return string(b) == "cancelled"
	})
}

func TestCrashMidCall(t *testing.T) {
	m := start(t, testOptions(), goServer("go", modeTools, nil))
	waitReady(t, m, "go")
	_, err := call(context.Background(), findTool(t, m, "go__crash"), "k", `{}`)
	if !errors.Is(err, ErrServerExited) {
		t.Fatalf("err = %v, want ErrServerExited", err)
	}
	// It is started again.
	eventually(t, "a restart", func() bool { s := status(m, "go"); return s.State == StateReady && s.Restarts >= 1 })
	if _, err := call(context.Background(), findTool(t, m, "go__meta"), "k", `{}`); err != nil {
		t.Fatal(err)
	}
}

func TestMalformedResult(t *testing.T) {
	m := start(t, testOptions(), goServer("go", modeTools, nil))
	waitReady(t, m, "go")
	_, err := call(context.Background(), findTool(t, m, "go__malformed"), "k", `{}`)
	if !errors.Is(err, ErrMalformedResult) {
		t.Fatalf("err = %v, want ErrMalformedResult", err)
	}
	// The session survives a bad answer.
	if _, err := call(context.Background(), findTool(t, m, "go__meta"), "k", `{}`); err != nil {
		t.Fatal(err)
	}
}

func TestNeverInitialising(t *testing.T) {
	opts := testOptions()
	opts.InitTimeout = 300 * time.Millisecond
	m := start(t, opts, goServer("mute", modeSilent, nil))
	eventually(t, "down", func() bool { return status(m, "mute").State == StateDown })
	s := status(m, "mute")
	if !strings.Contains(s.Error, "no answer to initialize within 300ms") {
		t.Errorf("error = %q", s.Error)
	}
	if len(m.Tools()) != 0 {
		t.Errorf("tools = %d", len(m.Tools()))
	}
}

func TestDownServerFailsAtOnce(t *testing.T) {
	opts := testOptions()
	opts.MinBackoff, opts.MaxBackoff = time.Hour, time.Hour // it stays down
	m := start(t, opts, goServer("go", modeTools, nil))
	waitReady(t, m, "go")
	tl := findTool(t, m, "go__meta")
	r, err := call(context.Background(), findTool(t, m, "go__pid"), "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(r.Text)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "down", func() bool { return status(m, "go").State == StateDown })
	if s := status(m, "go"); s.Error != "the server exited" || s.Tools != 7 {
		t.Errorf("status = %+v", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	_, err = call(ctx, tl, "k", `{}`)
	if !errors.Is(err, ErrServerDown) || !strings.Contains(err.Error(), `server "go" is down: the server exited`) {
		t.Fatalf("err = %v, want ErrServerDown", err)
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("the call took %s", d)
	}
}

func TestRestartAfterKill(t *testing.T) {
	m := start(t, testOptions(), goServer("go", modeTools, nil))
	waitReady(t, m, "go")
	first := m.servers[0].status()
	m.servers[0].mu.Lock()
	pid := m.servers[0].pid
	m.servers[0].mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a restart", func() bool { s := status(m, "go"); return s.State == StateReady && s.Restarts == 1 })
	r, err := call(context.Background(), findTool(t, m, "go__pid"), "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if r.Text == strconv.Itoa(pid) {
		t.Errorf("the same process %d answered", pid)
	}
	if s := status(m, "go"); !s.Since.After(first.Since) {
		t.Errorf("Since did not move: %v then %v", first.Since, s.Since)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collector())
	want := `
# HELP pegasus_mcp_server_restarts_total Starts of each MCP server after its first one.
# TYPE pegasus_mcp_server_restarts_total counter
pegasus_mcp_server_restarts_total{server="go"} 1
# HELP pegasus_mcp_server_state Each MCP server's state: 1 for the state it is in (starting, ready, down), 0 for the others.
# TYPE pegasus_mcp_server_state gauge
pegasus_mcp_server_state{server="go",state="down"} 0
pegasus_mcp_server_state{server="go",state="ready"} 1
pegasus_mcp_server_state{server="go",state="starting"} 0
# HELP pegasus_mcp_tool_calls_total Tool calls sent to each MCP server, including those that failed.
# TYPE pegasus_mcp_tool_calls_total counter
pegasus_mcp_tool_calls_total{server="go"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "pegasus_mcp_server_restarts_total",
		"pegasus_mcp_server_state", "pegasus_mcp_tool_calls_total"); err != nil {
		t.Error(err)
	}
}

// TestHTTPHeaders runs the test server's tools over Streamable HTTP and
// checks that the configured headers reach it.
func TestHTTPHeaders(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "pegasus-test", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "meta", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			key, _ := req.Params.Meta[MetaIdempotencyKey].(string)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "key=" + key}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	var mu sync.Mutex
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close) // after the manager's Close, which start registers next
	m := start(t, testOptions(), ServerConfig{Name: "web", URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer s3cret"}})
	waitReady(t, m, "web")
	if st := status(m, "web"); st.Transport != "http" {
		t.Errorf("transport = %q", st.Transport)
	}
	r, err := call(context.Background(), findTool(t, m, "web__meta"), "k-9", `{}`)
	if err != nil || r.Text != "key=k-9" {
		t.Fatalf("%q, %v", r.Text, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range auth {
		if a != "Bearer s3cret" {
			t.Fatalf("a request had Authorization %q", a)
		}
	}
}

// TestExitAtStart: a server that exits at once is down with the last line
// it wrote on standard error.
func TestExitAtStart(t *testing.T) {
	m := start(t, testOptions(), ServerConfig{Name: "bad", Command: "sh",
		Args: []string{"-c", "echo starting >&2; echo 'fatal: no such config file' >&2; exit 2"}})
	eventually(t, "down", func() bool { return status(m, "bad").State == StateDown })
	if s := status(m, "bad"); !strings.Contains(s.Error, "(its last line on standard error: fatal: no such config file)") {
		t.Errorf("error = %q", s.Error)
	}
}
