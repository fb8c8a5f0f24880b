package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/mcptest"
)

// The tests run real MCP servers: the npm packages pinned in testdata/npm
// (installed by `npm ci` there, as .ci/run does) and a small server built
// with the SDK, which is this test binary started with testServerEnv set.

const testServerEnv = "PEGASUS_MCP_TEST_SERVER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(testServerEnv); mode != "" {
		if err := runTestServer(mode); err != nil {
			fmt.Fprintln(os.Stderr, "test server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// npmBin returns the path of an npm binary of testdata/npm. Without it the
// test skips, or fails when CI=true.
func npmBin(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "npm", "node_modules", ".bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		msg := fmt.Sprintf("%s is not installed: run `npm ci` in agent/mcp/testdata/npm", name)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is not installed")
		}
		t.Skip("node is not installed")
	}
	return p
}

// goServer configures the test binary as a stdio server in the given mode.
func goServer(name, mode string, env map[string]string) ServerConfig {
	e := map[string]string{testServerEnv: mode}
	for k, v := range env {
		e[k] = v
	}
	return ServerConfig{Name: name, Command: os.Args[0], Env: e}
}

func testOptions() *Options {
	return &Options{InitTimeout: 20 * time.Second, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		TerminateTimeout: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond}
}

func start(t testing.TB, opts *Options, servers ...ServerConfig) *Manager {
	t.Helper()
	m := Start(context.Background(), servers, opts)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// eventually polls cond until it holds or 30s pass (the servers are
// subprocesses: there is no event to wait on).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func status(m *Manager, name string) ServerStatus {
	for _, s := range m.Servers() {
		if s.Name == name {
			return s
		}
	}
	return ServerStatus{}
}

func waitReady(t testing.TB, m *Manager, name string) {
	t.Helper()
	eventually(t, name+" ready", func() bool { return status(m, name).State == StateReady })
}

func findTool(t testing.TB, m *Manager, name string) tools.PartsTool {
	t.Helper()
	for _, tl := range m.Tools() {
		if tl.Name() == name {
			return tl.(tools.PartsTool)
		}
	}
	var names []string
	for _, tl := range m.Tools() {
		names = append(names, tl.Name())
	}
	t.Fatalf("no tool %s among %v", name, names)
	return nil
}

func call(ctx context.Context, tl tools.PartsTool, key, args string) (tools.Result, error) {
	return tl.CallParts(ctx, tools.Call{TaskID: "t1", IdempotencyKey: key, Arguments: json.RawMessage(args)})
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The test server's modes.
const (
	modeTools  = "tools"  // the tools below
	modeSilent = "silent" // never answers initialize
	modeTasks  = "tasks"  // the tools below, and tasks of the 2026-07-28 extension
)

// runTestServer serves on stdio. Its tools:
//
//	meta       answers with the idempotency key in the request's _meta
//	block      writes "started" to the file $MARK_FILE, waits until the
//	           call is cancelled, then writes "cancelled" there
//	crash      exits the process during the call
//	malformed  answers with content that is a string, not a list
//	add        adds the tool "added" (the server sends tools/list_changed)
//	pid        answers with the process id
func runTestServer(mode string) error {
	var opts *mcp.ServerOptions
	if mode == modeTasks {
		caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}
		caps.AddExtension(taskExtension, map[string]any{})
		opts = &mcp.ServerOptions{Capabilities: caps}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "pegasus-test", Version: "1"}, opts)
	if mode == modeTasks {
		addTaskTools(s)
	}
	if mode == modeSilent {
		mcptest.Silent(s)
	}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	obj := map[string]any{"type": "object"}
	s.AddTool(&mcp.Tool{Name: "meta", Description: "Answers with the idempotency key.", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			key, _ := req.Params.Meta[MetaIdempotencyKey].(string)
			return text("key=" + key), nil
		})
	s.AddTool(&mcp.Tool{Name: "block", Description: "Waits to be cancelled.", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			_ = os.WriteFile(os.Getenv("MARK_FILE"), []byte("started"), 0o644)
			<-ctx.Done()
			_ = os.WriteFile(os.Getenv("MARK_FILE"), []byte("cancelled"), 0o644)
			return nil, ctx.Err()
		})
	s.AddTool(&mcp.Tool{Name: "crash", Description: "Exits mid-call.", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "malformed", Description: "Answers with a malformed result.", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(malformedMarker), nil
		})
	s.AddTool(&mcp.Tool{Name: "fail", Description: "Answers with isError.", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r := text("the disk is full")
			r.IsError = true
			return r, nil
		})
	s.AddTool(&mcp.Tool{Name: "add", Description: "Adds a tool.", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			s.AddTool(&mcp.Tool{Name: "added", Description: "Was added.", InputSchema: obj},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("here"), nil })
			return text("added"), nil
		})
	s.AddTool(&mcp.Tool{Name: "pid", Description: "Answers with the process id.", InputSchema: obj},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(strconv.Itoa(os.Getpid())), nil
		})
	// Two answers the SDK cannot make: the malformed tool's content
	// becomes a string, and a result whose _meta has testTaskMeta becomes
	// the task answer of the 2026-07-28 tasks extension.
	w := mcptest.Malformer{W: os.Stdout, Rewrite: func(q []byte) []byte {
		if bytes.Contains(q, []byte(testTaskMeta)) {
			return taskAnswerOnWire(q)
		}
		return q
	}}
	return s.Run(context.Background(), &mcp.IOTransport{Reader: os.Stdin, Writer: w})
}

const malformedMarker = mcptest.MalformedText

type fsmPart = fsm.ToolPart
