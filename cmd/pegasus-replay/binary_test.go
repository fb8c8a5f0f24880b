package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildBinary builds pegasus-replay once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	buildOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "pegasus-replay-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "pegasus-replay")
		out, err := exec.Command(gobin, "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return binPath
}

// runBinary runs the built binary with a clean environment plus env.
func runBinary(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(buildBinary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// daemonTasks are the tasks runDaemon submitted.
type daemonTasks struct {
	hello, clock, clarified, cancelled string
}

// runDaemon runs the agent (the daemon's code, with its offline model) on a
// fresh data directory, submits tasks, and stops it the way pegasusd stops.
func runDaemon(t *testing.T, dir string) daemonTasks {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(l, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	submit := func(text string) string {
		id, err := a.Submit(ctx, text, "test", "general")
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	wait := func(id string, want fsm.State) {
		task, err := a.WaitUntil(ctx, id, func(t *fsm.Task) bool { return t.State == want })
		if err != nil {
			t.Fatalf("task %s: waiting for %s: %v (state %s)", id, want, err, task.State)
		}
	}
	var d daemonTasks
	d.hello = submit("hello there")
	d.clock = submit("what time is it?")
	d.clarified = submit("?")
	d.cancelled = submit("?")
	wait(d.hello, fsm.StateCompleted)
	wait(d.clock, fsm.StateCompleted)
	wait(d.clarified, fsm.StateSuspended)
	if _, err := a.SendMessage(ctx, d.clarified, "what time is it?", "test"); err != nil {
		t.Fatal(err)
	}
	wait(d.clarified, fsm.StateCompleted)
	wait(d.cancelled, fsm.StateSuspended)
	if _, err := a.Cancel(ctx, d.cancelled, "no answer"); err != nil {
		t.Fatal(err)
	}
	wait(d.cancelled, fsm.StateFailed)
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBinaryOnDaemonData builds the binary and runs it against a data
// directory written by the agent, as an operator would after stopping
// pegasusd.
func TestBinaryOnDaemonData(t *testing.T) {
	buildBinary(t)
	dir := filepath.Join(t.TempDir(), "pegasus-data")
	d := runDaemon(t, dir)
	before := hashTree(t, dir)
	env := []string{"PEGASUS_DATA_DIR=" + dir}

	r := runBinary(t, env, "tasks", "--json")
	var page struct {
		Tasks []struct {
			ID    string `json:"task_id"`
			State string `json:"state"`
			Error string `json:"error"`
		} `json:"tasks"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil {
		t.Fatalf("tasks: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	states := map[string]string{}
	for _, task := range page.Tasks {
		states[task.ID] = task.State
	}
	want := map[string]string{d.hello: "completed", d.clock: "completed", d.clarified: "completed", d.cancelled: "failed"}
	for id, s := range want {
		if states[id] != s {
			t.Errorf("task %s is %q, want %q (all: %v)", id, states[id], s, states)
		}
	}

	r = runBinary(t, env, "show", d.clarified)
	for _, s := range []string{"NEED_MORE_INFO", "reasoning -> suspended", "MESSAGE_RECEIVED", "suspended -> reasoning", "TOOL_CALL_COMPLETED", "acting -> completed"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("show %s lacks %q:\n%s", d.clarified, s, r.stdout)
		}
	}

	r = runBinary(t, env, "why", d.clock, "--json")
	if r.code != 0 || !json.Valid([]byte(r.stdout)) {
		t.Fatalf("why: exit %d %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, `"type": "MESSAGE_RECEIVED"`) || !strings.Contains(r.stdout, `"type": "TASK_CREATED"`) {
		t.Errorf("why %s does not reach the input:\n%s", d.clock, r.stdout)
	}

	if r := runBinary(t, env, "verify"); r.code != 0 || !strings.Contains(r.stdout, "ok: ") {
		t.Errorf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, env, "stats", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"reason": "cancelled"`) || !strings.Contains(r.stdout, `"failed": 1`) {
		t.Errorf("stats: exit %d\n%s", r.code, r.stdout)
	}
	r = runBinary(t, env, "fork", d.cancelled, "--at", "1000000")
	if r.code != 0 || !strings.Contains(r.stdout, "the machine would be in failed; it accepts nothing more") {
		t.Errorf("fork: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Export, import elsewhere, same answers.
	bundle := filepath.Join(t.TempDir(), "bundle.ndjson")
	copyDir := filepath.Join(t.TempDir(), "copy")
	if r := runBinary(t, env, "export", "-o", bundle); r.code != 0 {
		t.Fatalf("export: %d %s", r.code, r.stderr)
	}
	if r := runBinary(t, nil, "-f", bundle, "import", copyDir); r.code != 0 {
		t.Fatalf("import: %d %s", r.code, r.stderr)
	}
	a := runBinary(t, env, "tasks", "--json")
	b := runBinary(t, nil, "-d", copyDir, "tasks", "--json")
	if a.stdout != b.stdout {
		t.Errorf("tasks differ after export and import:\n%s\n%s", a.stdout, b.stdout)
	}

	// Exit codes of the real process.
	if r := runBinary(t, env, "show", "01JPAF8WNT0000000001FET0ZZ"); r.code != exitNotFound {
		t.Errorf("unknown task: exit %d", r.code)
	}
	if r := runBinary(t, nil, "tasks"); r.code != exitUsage {
		t.Errorf("no source: exit %d", r.code)
	}

	if after := hashTree(t, dir); after != before {
		t.Errorf("the daemon's data directory changed under pegasus-replay")
	}

	// While a daemon holds the directory (another process: this one), the
	// binary refuses it with exit code 4 and the way out.
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r = runBinary(t, env, "tasks")
	if r.code != exitSource || !strings.Contains(r.stderr, "checkpoint") || !strings.Contains(r.stderr, "--server") {
		t.Errorf("locked directory: exit %d %q", r.code, r.stderr)
	}
}

// buildPegasusd builds the daemon next to pegasus-replay. The end-to-end
// test needs it; if the daemon does not build, that test is skipped (with
// the compiler's output), since cmd/pegasusd is not this package's.
func buildPegasusd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(buildBinary(t)), "pegasusd")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	out, err := exec.Command("go", "build", "-o", bin, "../pegasusd").CombinedOutput()
	if err != nil {
		t.Skipf("cmd/pegasusd does not build, skipping the end-to-end test: %s", out)
	}
	return bin
}

// TestBinaryAgainstPegasusd runs the real daemon as a subprocess and points
// pegasus-replay at it: --server folds what the API serves, tail waits for
// the tasks to finish, the live directory is refused, a checkpoint taken
// through the API is readable, and after the daemon stops its directory
// gives the same answers.
func TestBinaryAgainstPegasusd(t *testing.T) {
	daemonBin := buildPegasusd(t)
	dir := filepath.Join(t.TempDir(), "pegasus-data")
	const token = "s3cret-token"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	daemon := exec.CommandContext(ctx, daemonBin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir,
		"--token", token, "--no-reflection", "--log-format", "json")
	daemon.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	logs, err := daemon.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		daemon.Process.Signal(syscall.SIGTERM)
		if err := daemon.Wait(); err != nil {
			t.Errorf("pegasusd did not stop cleanly: %v", err)
		}
	}
	defer stop()

	// The daemon logs its URL once it listens.
	url := ""
	sc := bufio.NewScanner(logs)
	for url == "" && sc.Scan() {
		var line struct {
			Msg string `json:"msg"`
			URL string `json:"url"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "pegasusd listening" {
			url = line.URL
		}
	}
	if url == "" {
		t.Fatalf("pegasusd did not start: %v", sc.Err())
	}
	go io.Copy(io.Discard, logs)

	post := func(path, body string) []byte {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %s %s", path, resp.Status, b)
		}
		return b
	}
	post("/v1/tasks", `{"input":"what time is it?","source":"e2e"}`)
	post("/v1/tasks", `{"input":"hello there","source":"e2e"}`)

	env := []string{"PEGASUS_SERVER=" + url, "PEGASUS_TOKEN=" + token}
	// tail waits for both tasks to complete: no polling.
	r := runBinary(t, env, "tail", "--from-start", "--type", "TASK_COMPLETED", "--count", "2", "--json")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("tail: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	live := runBinary(t, env, "tasks", "--json")
	if live.code != 0 || strings.Count(live.stdout, `"state": "completed"`) != 2 {
		t.Fatalf("--server tasks: exit %d\n%s%s", live.code, live.stdout, live.stderr)
	}
	if r := runBinary(t, env, "verify"); r.code != 0 {
		t.Errorf("--server verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBinary(t, []string{"PEGASUS_SERVER=" + url}, "tasks"); r.code != exitSource || !strings.Contains(r.stderr, "--token") {
		t.Errorf("no token: exit %d %q", r.code, r.stderr)
	}

	// The running daemon's directory is refused; its checkpoint is not.
	r = runBinary(t, nil, "-d", dir, "tasks")
	if r.code != exitSource || !strings.Contains(r.stderr, "POST /v1/admin/checkpoint") {
		t.Errorf("live directory: exit %d %q", r.code, r.stderr)
	}
	var cp struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(post("/v1/admin/checkpoint", `{}`), &cp); err != nil || cp.Path == "" {
		t.Fatalf("checkpoint: %v %+v", err, cp)
	}
	if r := runBinary(t, nil, "-d", cp.Path, "tasks", "--json"); r.stdout != live.stdout {
		t.Errorf("checkpoint and --server disagree:\n%s\n%s%s", r.stdout, live.stdout, r.stderr)
	}

	stop()
	if r := runBinary(t, nil, "-d", dir, "tasks", "--json"); r.code != 0 || r.stdout != live.stdout {
		t.Errorf("stopped daemon's directory and --server disagree:\n%s\n%s%s", r.stdout, live.stdout, r.stderr)
	}
	if r := runBinary(t, nil, "-d", dir, "verify"); r.code != 0 {
		t.Errorf("verify after stop: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
