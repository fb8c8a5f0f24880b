package main

import (
	"bytes"
	"encoding/json"
	"github.com/pegasus-engine/pegasus/server"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

func runClient(t *testing.T, stdin string, interactive bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &client{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, interactive: &interactive}
	app := newApp(c)
	code = exitCode(app.Run(cliconv.Interspersed(app, append([]string{"pegasusd"}, args...))), &errb)
	return code, out.String(), errb.String()
}

func TestClientQuickStart(t *testing.T) {
	cfg := testConfig(t)
	// No post-task reflection: its events, appended after a task
	// completed, would race the comparison of the client's fold with the
	// daemon's below.
	cfg.engine.DisableReflection = true
	td := startDaemon(t, cfg)
	code, out, errs := runClient(t, "", false, "submit", "--server", td.url, "what", "time", "is", "it?")
	if code != 0 || !strings.HasPrefix(out, "The current time is ") || !strings.Contains(errs, "submitted") {
		t.Fatalf("submit: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}

	// A question without a terminal: exit 4 with the way to answer.
	code, _, errs = runClient(t, "", false, "submit", "--server", td.url, "?")
	if code != exitNeedInput || !strings.Contains(errs, "asks: What would you like me to do?") || !strings.Contains(errs, "pegasusd reply ") {
		t.Fatalf("question: exit %d, stderr %q", code, errs)
	}
	id := strings.Fields(errs[strings.Index(errs, "pegasusd reply ")+len("pegasusd reply "):])[0]

	// On a terminal, the question is asked and the answer sent.
	code, out, errs = runClient(t, "tell me a joke\n", true, "submit", "--server", td.url, "?")
	if code != 0 || !strings.Contains(out, `I received "tell me a joke"`) || !strings.Contains(errs, "What would you like me to do?\n> ") {
		t.Fatalf("interactive: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}

	code, out, _ = runClient(t, "", false, "reply", "--server", td.url, id, "hello", "there")
	if code != 0 || !strings.Contains(out, "is reasoning") && !strings.Contains(out, "is acting") && !strings.Contains(out, "is completed") {
		t.Fatalf("reply: exit %d %q", code, out)
	}
	td.waitTask(id)

	code, out, _ = runClient(t, "", false, "tasks", "--server", td.url)
	if code != 0 || !strings.HasPrefix(out, "TASK ") || strings.Count(out, "\n") != 4 || !strings.Contains(out, id) {
		t.Fatalf("tasks: exit %d\n%s", code, out)
	}
	code, out, _ = runClient(t, "", false, "task", "--server", td.url, id)
	// The one renderer: what the client folds from the API is what the
	// daemon holds, printed by fsm.Describe as pegasus-replay prints it.
	held, err := td.d.engine.Agent().Task(id)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 || out != fsm.Describe(held) || !strings.Contains(out, "state=completed") || !strings.Contains(out, "NEED_MORE_INFO") {
		t.Fatalf("task: exit %d\n%s\nwant\n%s", code, out, fsm.Describe(held))
	}
	code, out, _ = runClient(t, "", false, "task", "--server", td.url, "--json", id)
	var tj server.TaskJSON
	if code != 0 || json.Unmarshal([]byte(out), &tj) != nil || tj.TaskID != id {
		t.Fatalf("task --json: exit %d\n%s", code, out)
	}
	code, out, _ = runClient(t, "", false, "submit", "--server", td.url, "--no-wait", "hello")
	if code != 0 || len(strings.TrimSpace(out)) != 26 {
		t.Fatalf("--no-wait: exit %d %q", code, out)
	}
}

func TestClientErrors(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	if code, _, errs := runClient(t, "", false, "submit", "--server", td.url); code != exitUsage || !strings.Contains(errs, "needs the task's text") {
		t.Fatalf("no text: exit %d %q", code, errs)
	}
	if code, _, errs := runClient(t, "", false, "task", "--server", td.url, "01JABCDEFGHJKMNPQRSTVWXYZ0"); code != exitNotFound || !strings.Contains(errs, "no such task") {
		t.Fatalf("unknown task: exit %d %q", code, errs)
	}
	if code, _, errs := runClient(t, "", false, "submit", "--server", "http://127.0.0.1:1", "x"); code != exitDown || !strings.Contains(errs, "cannot reach the daemon") {
		t.Fatalf("no daemon: exit %d %q", code, errs)
	}
	if code, _, errs := runClient(t, "", false, "submit", "--server", td.url, "--type", "nope", "x"); code != exitError || !strings.Contains(errs, "unknown task type") || strings.Contains(errs, "agent:") {
		t.Fatalf("bad type: exit %d %q", code, errs)
	}
	if code, _, _ := runClient(t, "", false, "tasks", "--server", "ftp://localhost:7070"); code != exitUsage {
		t.Fatalf("bad server URL: exit %d", code)
	}
	if code, _, errs := runClient(t, "", false, "nosuchcommand"); code != exitUsage || !strings.Contains(errs, `unknown command "nosuchcommand"`) {
		t.Fatalf("unknown command: exit %d %q", code, errs)
	}
}
