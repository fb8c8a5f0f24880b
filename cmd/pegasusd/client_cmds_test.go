package main

import (
	"encoding/json"
	"github.com/pegasus-engine/pegasus/server"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestClientCommands: the operator's commands without curl, with flags
// after arguments, and the exit codes of the shared table.
func TestClientCommands(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	first := td.submit("what time is it?")
	td.waitTask(first)
	asking := td.submit("?") // the offline model asks a question
	if tj := td.waitTask(asking); tj.State != "suspended" {
		t.Fatalf("want a suspended task, got %s", tj.State)
	}

	// tasks: oldest first, the shared columns, a cursor for the next page
	// (and the limit from its PEGASUS_* variable).
	t.Setenv("PEGASUS_TASKS_LIMIT", "1")
	code, out, errs := runClient(t, "", false, "tasks", "-s", strings.TrimPrefix(td.url, "http://"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "TASK  ") || !strings.HasPrefix(lines[1], first) ||
		!strings.HasPrefix(lines[2], "more: --cursor ") {
		t.Fatalf("tasks: exit %d\n%s%s", code, out, errs)
	}
	cursor := strings.Fields(lines[2])[2]
	if code, out, _ := runClient(t, "", false, "tasks", "--server", td.url, "--cursor", cursor); code != 0 || !strings.Contains(out, asking) {
		t.Fatalf("tasks --cursor: exit %d\n%s", code, out)
	}
	// --machine filters by machine: both tasks run the current one.
	if code, out, _ := runClient(t, "", false, "tasks", "--server", td.url, "--machine", "pegasus.task@0"); code != 0 || strings.Contains(out, first) {
		t.Fatalf("tasks --machine pegasus.task@0: exit %d\n%s", code, out)
	}
	if code, out, _ := runClient(t, "", false, "tasks", "--server", td.url, "--machine", fsm.CurrentMachine.String(), "--limit", "5"); code != 0 ||
		!strings.Contains(out, first) || !strings.Contains(out, asking) {
		t.Fatalf("tasks --machine %s: exit %d\n%s", fsm.CurrentMachine, code, out)
	}

	// A flag after the argument.
	code, out, _ = runClient(t, "", false, "task", first, "--server", td.url, "--json")
	var tj server.TaskJSON
	if code != 0 || json.Unmarshal([]byte(out), &tj) != nil || tj.TaskID != first {
		t.Fatalf("task ID --json: exit %d\n%s", code, out)
	}

	code, out, _ = runClient(t, "", false, "events", first, "--server", td.url)
	if code != 0 || !strings.HasPrefix(out, "SEQ ") || !strings.Contains(out, "TASK_CREATED") {
		t.Fatalf("events: exit %d\n%s", code, out)
	}

	// follow on a finished task prints it and its result at once.
	code, out, _ = runClient(t, "", false, "task", first, "--follow", "--server", td.url)
	if code != 0 || !strings.Contains(out, "result: \"The current time is") {
		t.Fatalf("task --follow: exit %d\n%s", code, out)
	}

	if code, out, errs := runClient(t, "", false, "cancel", asking, "--reason", "not needed", "--server", td.url); code != 0 || !strings.Contains(out, "is failed") {
		t.Fatalf("cancel: exit %d %q %q", code, out, errs)
	}
	// A task that failed: follow exits 5.
	if code, _, errs := runClient(t, "", false, "task", asking, "-f", "--server", td.url); code != exitFailed || !strings.Contains(errs, "not needed") {
		t.Fatalf("task --follow on a failed task: exit %d %q", code, errs)
	}
	// A 409 in the user's terms.
	code, _, errs = runClient(t, "", false, "cancel", first, "--server", td.url)
	if code != exitError || !strings.Contains(errs, "the task is already completed: it can no longer be cancelled") {
		t.Fatalf("cancel of a completed task: exit %d %q", code, errs)
	}
	code, _, errs = runClient(t, "", false, "resume", first, "--server", td.url)
	if code != exitError || !strings.Contains(errs, "can no longer be resumed") {
		t.Fatalf("resume of a completed task: exit %d %q", code, errs)
	}
}

// TestClientUsage: usage errors are one line with exit code 2; an unknown
// command suggests the nearest.
func TestClientUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"taks"}, `unknown command "taks" (did you mean "tasks"?)`},
		{[]string{"tasks", "--nope"}, "flag provided but not defined: -nope (see pegasusd tasks --help)"},
		{[]string{"task"}, "task takes one task id"},
		{[]string{"completion", "fish"}, `unknown shell "fish"`},
	} {
		code, out, errs := runClient(t, "", false, tc.args...)
		if code != exitUsage || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d\nstdout %q\nstderr %q\nwant one line with %q", tc.args, code, out, errs, tc.want)
		}
	}
	if code, out, _ := runClient(t, "", false, "completion", "bash"); code != 0 || !strings.Contains(out, "-F _pegasusd_complete pegasusd") {
		t.Errorf("completion bash: exit %d\n%s", code, out)
	}
	if code, out, _ := runClient(t, "", false, "--version"); code != 0 || !strings.Contains(out, "  go:            go1.") ||
		!strings.Contains(out, "pebble format: ") || !strings.Contains(out, "log format:    ") {
		t.Errorf("--version: exit %d\n%s", code, out)
	}
}

// TestAddressInUse: a busy address names --addr.
func TestAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, errs := runClient(t, "", false, "serve", "--addr", ln.Addr().String(), "--data-dir", t.TempDir())
	if code != exitError || !strings.Contains(errs, "is already in use") || !strings.Contains(errs, "--addr") {
		t.Fatalf("exit %d %q", code, errs)
	}
}

// TestOneTaskRenderer: pegasusd task and pegasus-replay state print a task
// through the same renderer, byte for byte, for each machine.
func TestOneTaskRenderer(t *testing.T) {
	bin := buildReplay(t)
	td := startDaemon(t, testConfig(t))
	var ids []string
	for _, m := range []string{"pegasus.task@1", "pegasus.task@0"} {
		code, out, errs := runClient(t, "", false, "submit", "--server", td.url, "--no-wait", "--machine", m, "what time is it?")
		if code != 0 {
			t.Fatalf("submit --machine %s: exit %d %s", m, code, errs)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	r := td.as("client", "POST", "/api/v1/tasks", `{"title":"crawl","required_capabilities":["web"]}`)
	mustStatus(t, r, 201)
	ids = append(ids, dtask(t, r).TaskID)
	settle(t, td)
	for _, id := range ids {
		code, got, errs := runClient(t, "", false, "task", "--server", td.url, id)
		if code != 0 {
			t.Fatalf("task %s: exit %d %s", id, code, errs)
		}
		out, err := exec.Command(filepath.Join(bin, "pegasus-replay"), "--server", td.url, "state", id).CombinedOutput()
		want, ok := strings.CutPrefix(string(out), "as of head\n")
		if err != nil || !ok || got != want {
			t.Errorf("task %s: pegasusd task printed\n%s\npegasus-replay state printed (%v)\n%s", id, got, err, out)
		}
	}
}
