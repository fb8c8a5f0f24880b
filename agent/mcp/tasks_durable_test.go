package mcp

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/internal/mcptest"
)

// The tests of durable tasks run testdata/taskserver, an SDK server whose
// tool work answers with a task of the 2026-07-28 extension and keeps its
// tasks in a directory: a new process of it knows the tasks an old one
// created, and its files say what it was asked (created, polls, cancels).

// buildTaskServer builds testdata/taskserver.
func buildTaskServer(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "taskserver")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/taskserver").CombinedOutput(); err != nil {
		t.Fatalf("go build taskserver: %v\n%s", err, out)
	}
	return bin
}

// taskServerConfigs are the task server over stdio (a process of the
// manager's) and over Streamable HTTP (a process of the test's, which
// outlives the managers).
func taskServerConfigs(t *testing.T) map[string]func(dir string) ServerConfig {
	bin := buildTaskServer(t)
	return map[string]func(string) ServerConfig{
		"stdio": func(dir string) ServerConfig {
			return ServerConfig{Name: "ts", Command: bin, Args: []string{"-dir", dir}}
		},
		"http": func(dir string) ServerConfig {
			return ServerConfig{Name: "ts", URL: "http://" + mcptest.TaskServerHTTP(t, bin, dir) + "/mcp"}
		},
	}
}

// TestDurableTaskResumedAfterRestart: the manager that recorded a task's
// handle goes away (closed in RecordHandle, as a daemon killed there: a
// stdio server's process ends with it); a new manager, with a new process
// of a stdio server or the same HTTP server, resumes the call from the
// handle: it polls the task, sends no tools/call, and returns the task's
// result once it completes. The server created one task and cancelled
// none.
func TestDurableTaskResumedAfterRestart(t *testing.T) {
	for transport, config := range taskServerConfigs(t) {
		t.Run(transport, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config(dir)
			first := Start(context.Background(), []ServerConfig{cfg}, testOptions())
			t.Cleanup(func() { _ = first.Close() })
			waitReady(t, first, "ts")
			var handle string
			_, err := findTool(t, first, "ts__work").CallParts(context.Background(), tools.Call{IdempotencyKey: "key-1",
				Arguments: []byte(`{}`), RecordHandle: func(_ context.Context, h string) error {
					handle = h
					return first.Close() // the daemon dies once the handle is recorded
				}})
			if err == nil || handle == "" {
				t.Fatalf("the first run: handle %q, err %v", handle, err)
			}

			m := start(t, testOptions(), cfg)
			waitReady(t, m, "ts")
			done := make(chan error, 1)
			var r tools.Result
			go func() {
				var err error
				r, err = findTool(t, m, "ts__work").CallParts(context.Background(), tools.Call{IdempotencyKey: "key-1",
					Arguments: []byte(`{}`), Handle: handle, RecordHandle: func(context.Context, string) error {
						return errors.New("a resumed call recorded a new handle")
					}})
				done <- err
			}()
			eventually(t, "polling to resume", func() bool { return len(mcptest.TaskServerLines(t, dir, "polls")) > 0 })
			mcptest.ReleaseTasks(t, dir)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the resumed call did not return")
			}
			if want := "done " + handle + " key=key-1"; r.Text != want {
				t.Errorf("result %q, want %q", r.Text, want)
			}
			if created := mcptest.TaskServerLines(t, dir, "created"); len(created) != 1 || created[0] != handle+" key-1" {
				t.Errorf("tasks created: %q, want one: %s", created, handle)
			}
			for _, p := range mcptest.TaskServerLines(t, dir, "polls") {
				if p != handle {
					t.Errorf("polled %s, want only %s", p, handle)
				}
			}
			if c := mcptest.TaskServerLines(t, dir, "cancels"); len(c) != 0 {
				t.Errorf("tasks cancelled: %q", c)
			}
			if n := wireCalls(t, m, "ts"); n != 0 {
				t.Errorf("the resumed call sent %d tools/call", n)
			}
			// A plain call on the same session is answered as usual.
			if r, err := call(context.Background(), findTool(t, m, "ts__echo"), "key-2", `{}`); err != nil || r.Text != "echo key-2" {
				t.Errorf("echo: %q, %v", r.Text, err)
			}
		})
	}
}

// TestCancelSendsTasksCancel: a call waiting on its task whose context is
// cancelled (the agent task was cancelled) or times out sends tasks/cancel
// for the task; the server sees it and the task is cancelled, so a later
// poll says so. A call whose handle could not be recorded cancels its task
// too: nobody would poll it.
func TestCancelSendsTasksCancel(t *testing.T) {
	for transport, config := range taskServerConfigs(t) {
		t.Run(transport, func(t *testing.T) {
			dir := t.TempDir()
			m := start(t, testOptions(), config(dir))
			waitReady(t, m, "ts")
			tl := findTool(t, m, "ts__work")

			ctx, cancel := context.WithCancel(context.Background())
			var handle string
			done := make(chan error, 1)
			go func() {
				_, err := tl.CallParts(ctx, tools.Call{IdempotencyKey: "k1", RecordHandle: func(_ context.Context, h string) error {
					handle = h
					return nil
				}})
				done <- err
			}()
			eventually(t, "the call to poll its task", func() bool { return len(mcptest.TaskServerLines(t, dir, "polls")) > 0 })
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the cancelled call: %v", err)
			}
			if c := mcptest.TaskServerLines(t, dir, "cancels"); len(c) != 1 || c[0] != handle {
				t.Fatalf("tasks cancelled: %q, want %s", c, handle)
			}
			_, err := tl.CallParts(context.Background(), tools.Call{IdempotencyKey: "k1", Handle: handle})
			if !errors.Is(err, ErrTask) || !strings.Contains(err.Error(), handle+" was cancelled") {
				t.Errorf("polling the cancelled task: %v", err)
			}

			// The call times out.
			tctx, tcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer tcancel()
			var second string
			_, err = tl.CallParts(tctx, tools.Call{IdempotencyKey: "k2", RecordHandle: func(_ context.Context, h string) error {
				second = h
				return nil
			}})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the call that timed out: %v", err)
			}
			// The handle is not recorded.
			_, err = tl.CallParts(context.Background(), tools.Call{IdempotencyKey: "k3", RecordHandle: func(context.Context, string) error {
				return errors.New("the task moved")
			}})
			if err == nil {
				t.Fatal("a call whose handle was not recorded succeeded")
			}
			created := mcptest.TaskServerLines(t, dir, "created")
			if c := mcptest.TaskServerLines(t, dir, "cancels"); len(c) != 3 || c[1] != second || len(created) != 3 || !strings.HasPrefix(created[2], c[2]+" ") {
				t.Errorf("tasks cancelled: %q, created %q", c, created)
			}

			// The daemon stops: a call cancelled then keeps its task, which
			// the next start polls again.
			m.Stopping()
			sctx, scancel := context.WithCancel(context.Background())
			_, err = tl.CallParts(sctx, tools.Call{IdempotencyKey: "k4", RecordHandle: func(context.Context, string) error {
				scancel()
				return nil
			}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the call cancelled at stop: %v", err)
			}
			if c, created := mcptest.TaskServerLines(t, dir, "cancels"), mcptest.TaskServerLines(t, dir, "created"); len(c) != 3 || len(created) != 4 {
				t.Errorf("at stop: tasks cancelled %q, created %q", c, created)
			}
		})
	}
}
