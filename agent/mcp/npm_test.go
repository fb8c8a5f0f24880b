package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

func everythingStdio(t testing.TB, name string) ServerConfig {
	return ServerConfig{Name: name, Command: npmBin(t, "mcp-server-everything"), Args: []string{"stdio"}}
}

// TestEverythingStdio lists and calls the tools of server-everything over
// stdio, one of each kind of content.
func TestEverythingStdio(t *testing.T) {
	m := start(t, testOptions(), everythingStdio(t, "everything"))
	waitReady(t, m, "everything")
	checkEverything(t, m, "everything")

	ctx := context.Background()
	r, err := call(ctx, findTool(t, m, "everything__get-tiny-image"), "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(r.Parts, func(p fsmPart) bool { return p.Type == "image" })
	if i < 0 || r.Parts[i].MIMEType != "image/png" || r.Parts[i].Size == 0 || r.Parts[i].Data == "" || r.Parts[i].Truncated {
		t.Errorf("image parts: %+v", r.Parts)
	}
	if !strings.Contains(r.Text, "[image image/png, ") {
		t.Errorf("the text does not mention the image: %q", r.Text)
	}

	r, err = call(ctx, findTool(t, m, "everything__get-structured-content"), "k", `{"location":"New York"}`)
	if err != nil {
		t.Fatal(err)
	}
	i = slices.IndexFunc(r.Parts, func(p fsmPart) bool { return p.Type == "structured" })
	if i < 0 || !json.Valid([]byte(r.Parts[i].Text)) || !strings.Contains(r.Parts[i].Text, "temperature") {
		t.Errorf("structured parts: %+v", r.Parts)
	}

	r, err = call(ctx, findTool(t, m, "everything__get-resource-links"), "k", `{"count":2}`)
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	for _, p := range r.Parts {
		if p.Type == "resource_link" && p.URI != "" {
			links++
		}
	}
	if links != 2 {
		t.Errorf("resource links: %+v", r.Parts)
	}

	r, err = call(ctx, findTool(t, m, "everything__get-resource-reference"), "k", `{"resourceType":"Text","resourceId":1}`)
	if err != nil {
		t.Fatal(err)
	}
	i = slices.IndexFunc(r.Parts, func(p fsmPart) bool { return p.Type == "resource" })
	if i < 0 || r.Parts[i].URI == "" || r.Parts[i].Text == "" {
		t.Errorf("resource parts: %+v", r.Parts)
	}

	// A small bound cuts the image and says so.
	m.opts.MaxResultBytes = 64
	r, err = call(ctx, findTool(t, m, "everything__get-tiny-image"), "k", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	i = slices.IndexFunc(r.Parts, func(p fsmPart) bool { return p.Type == "image" })
	if i < 0 || !r.Parts[i].Truncated || len(r.Parts[i].Data) >= r.Parts[i].Size {
		t.Errorf("bounded image: %+v", r.Parts)
	}
}

// TestEverythingHTTP runs server-everything in its Streamable HTTP mode.
func TestEverythingHTTP(t *testing.T) {
	bin := npmBin(t, "mcp-server-everything")
	port := freePort(t)
	run := func() *exec.Cmd {
		cmd := exec.Command(bin, "streamableHttp")
		cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	cmd := run()
	// The manager retries until the server listens.
	m := start(t, testOptions(), ServerConfig{Name: "web", URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)})
	waitReady(t, m, "web")
	checkEverything(t, m, "web")

	// A tool that requires a task (2025-11-25 tasks, over HTTP): the handle
	// is recorded, then polled until the result comes.
	var handles []string
	r, err := findTool(t, m, "web__simulate-research-query").CallParts(context.Background(), tools.Call{IdempotencyKey: "k",
		Arguments: []byte(`{"topic":"http tasks"}`), RecordHandle: func(_ context.Context, h string) error {
			handles = append(handles, h)
			return nil
		}})
	if err != nil || len(handles) != 1 || !strings.Contains(r.Text, "# Research Report: http tasks") {
		t.Fatalf("task over HTTP: handles %q, %q, %v", handles, r.Text, err)
	}

	// The server goes away: the session ends, calls fail, and the manager
	// connects again once the server is back.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	eventually(t, "not ready", func() bool { return status(m, "web").State != StateReady })
	if _, err := call(context.Background(), findTool(t, m, "web__echo"), "k", `{"message":"x"}`); err == nil {
		t.Error("a call to a server that is gone succeeded")
	}
	run()
	eventually(t, "ready again", func() bool { s := status(m, "web"); return s.State == StateReady && s.Restarts >= 1 })
	r, err = call(context.Background(), findTool(t, m, "web__echo"), "k", `{"message":"back"}`)
	if err != nil || r.Text != "Echo: back" {
		t.Fatalf("%q, %v", r.Text, err)
	}
}

// checkEverything checks the listing and calls echo.
func checkEverything(t *testing.T, m *Manager, name string) {
	t.Helper()
	var names []string
	for _, tl := range m.Tools() {
		names = append(names, tl.Name())
		if got := tools.SourceOf(tl); got != (tools.Source{Kind: tools.SourceMCP, Server: name}) {
			t.Errorf("%s: source %+v", tl.Name(), got)
		}
	}
	if len(names) < 12 || !slices.IsSorted(names) {
		t.Errorf("tools: %v", names)
	}
	echo := findTool(t, m, name+"__echo")
	if echo.Description() != "Echoes back the input string" || !strings.Contains(string(echo.Parameters()), `"message"`) {
		t.Errorf("echo: %q %s", echo.Description(), echo.Parameters())
	}
	r, err := call(context.Background(), echo, "k", `{"message":"hello"}`)
	if err != nil || r.Text != "Echo: hello" || len(r.Parts) != 0 {
		t.Fatalf("echo: %+v, %v", r, err)
	}
	if s := status(m, name); s.Tools != len(names) || s.Error != "" {
		t.Errorf("status: %+v", s)
	}
}

// TestEverythingRestart kills server-everything's process: the manager
// starts it again and its tools work again.
func TestEverythingRestart(t *testing.T) {
	m := start(t, testOptions(), everythingStdio(t, "everything"))
	waitReady(t, m, "everything")
	m.servers[0].mu.Lock()
	pid := m.servers[0].pid
	m.servers[0].mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a restart", func() bool {
		s := status(m, "everything")
		return s.State == StateReady && s.Restarts == 1
	})
	r, err := call(context.Background(), findTool(t, m, "everything__echo"), "k", `{"message":"again"}`)
	if err != nil || r.Text != "Echo: again" {
		t.Fatalf("%q, %v", r.Text, err)
	}
}

// TestFilesystem reads and lists a temporary folder with server-filesystem.
func TestFilesystem(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("buy milk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := start(t, testOptions(), ServerConfig{Name: "fs", Command: npmBin(t, "mcp-server-filesystem"), Args: []string{dir}, Dir: dir})
	waitReady(t, m, "fs")
	ctx := context.Background()
	args, _ := json.Marshal(map[string]string{"path": filepath.Join(dir, "notes.txt")})
	r, err := call(ctx, findTool(t, m, "fs__read_text_file"), "k", string(args))
	if err != nil || !strings.Contains(r.Text, "buy milk") {
		t.Fatalf("read: %q, %v", r.Text, err)
	}
	args, _ = json.Marshal(map[string]string{"path": dir})
	r, err = call(ctx, findTool(t, m, "fs__list_directory"), "k", string(args))
	if err != nil || !strings.Contains(r.Text, "notes.txt") {
		t.Fatalf("list: %q, %v", r.Text, err)
	}
	// Outside the folder: the server's error text comes back as the error.
	args, _ = json.Marshal(map[string]string{"path": "/etc/hostname"})
	_, err = call(ctx, findTool(t, m, "fs__read_text_file"), "k", string(args))
	if _, ok := err.(*ToolError); !ok || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("outside the folder: %v", err)
	}
}
