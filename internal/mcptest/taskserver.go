package mcptest

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The task server, agent/mcp/testdata/taskserver, is an SDK server whose
// tool work answers with a durable task and keeps its tasks in a
// directory; its files there say what it was asked (see its doc).

// listenTimeout bounds the wait for the task server to listen.
const listenTimeout = time.Minute

// TaskServerHTTP runs the task server binary bin, keeping its tasks in
// dir, over Streamable HTTP as a process of the test's until the test
// ends, and returns the address it listens on once it does.
func TaskServerHTTP(t testing.TB, bin, dir string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "-dir", dir, "-http", addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// A process: polled, with a deadline.
	for deadline := time.Now().Add(listenTimeout); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task server does not listen on %s: %v", addr, err)
		}
	}
}

// TaskServerLines are the lines of the task server's file in dir (created,
// polls, cancels), none if it has not written it.
func TaskServerLines(t testing.TB, dir, file string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if errors.Is(err, os.ErrNotExist) || len(b) == 0 {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// ReleaseTasks lets the task server's tasks in dir complete.
func ReleaseTasks(t testing.TB, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
