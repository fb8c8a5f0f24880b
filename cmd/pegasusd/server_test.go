package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/server"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

const testTimeout = 30 * time.Second

func testConfig(t testing.TB) *config {
	t.Helper()
	dir := t.TempDir()
	return &config{
		addr: "127.0.0.1:0", llmTimeout: time.Minute, llmAttempts: 1, shutdownTimeout: 10 * time.Second, logLevel: "error", logFormat: "text",
		engine: engine.Options{DataDir: filepath.Join(dir, "data"), MaxActiveTasks: 5, MaxConcurrentLLM: 3, MaxConcurrentTools: 3,
			ToolTimeout: time.Minute, MaxIterations: 10, ShutdownTimeout: 10 * time.Second},
		server: server.Options{CheckpointDir: filepath.Join(dir, "checkpoints"), MaxBodyBytes: 4096},
	}
}

// testDaemon runs a daemon in-process on a random loopback port.
type testDaemon struct {
	t     testing.TB
	d     *daemon // nil for a subprocess
	url   string
	token string // sent as a bearer token on every request, if set
}

func startDaemon(t testing.TB, cfg *config) *testDaemon {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	d, err := start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	td := &testDaemon{t: t, d: d, url: "http://" + d.ln.Addr().String()}
	t.Cleanup(func() {
		if td.d != nil {
			if err := td.d.shutdown(); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		}
	})
	return td
}

// stop shuts td's in-process daemon down, leaving its data directory for
// the test to read, damage or start again.
func (td *testDaemon) stop() {
	td.t.Helper()
	if err := td.d.shutdown(); err != nil {
		td.t.Fatalf("shutdown: %v", err)
	}
	td.d = nil
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r response) errorCode(t testing.TB) string {
	t.Helper()
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || env.Error.Code == "" || env.Error.Message == "" {
		t.Fatalf("not an error envelope: %s", r.body)
	}
	return env.Error.Code
}

func (td *testDaemon) do(method, path, body string, header ...string) response {
	td.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, td.url+path, rd)
	if err != nil {
		td.t.Fatal(err)
	}
	if td.token != "" {
		req.Header.Set("Authorization", "Bearer "+td.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		td.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

func (td *testDaemon) submit(input string) string {
	td.t.Helper()
	r := td.do("POST", "/v1/tasks", fmt.Sprintf(`{"input":%q}`, input))
	if r.status != 201 {
		td.t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var c server.CreatedJSON
	r.json(td.t, &c)
	return c.TaskID
}

func (td *testDaemon) waitTask(id string) server.TaskJSON {
	td.t.Helper()
	for range 20 {
		r := td.do("GET", "/v1/tasks/"+id+"?wait=10s", "")
		var tj server.TaskJSON
		r.json(td.t, &tj)
		if tj.State == fsm.StateCompleted || tj.State == fsm.StateFailed || tj.State == fsm.StateSuspended {
			return tj
		}
	}
	td.t.Fatalf("task %s never settled", id)
	return server.TaskJSON{}
}

func TestHTTPTaskLifecycle(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	r := td.do("POST", "/v1/tasks", `{"input":"what time is it?","source":"test","type":"general","priority":2,"metadata":{"k":"v"}}`)
	if r.status != 201 || r.header.Get("Location") == "" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created server.CreatedJSON
	r.json(t, &created)
	// The input is committed and the task exists in idle, waiting for (or
	// just given) an admission slot.
	if created.State != fsm.StateIdle || len(created.TaskID) != 26 {
		t.Fatalf("created = %+v", created)
	}
	task := td.waitTask(created.TaskID)
	if task.State != fsm.StateCompleted || !strings.HasPrefix(task.Result, "The current time is ") || task.Priority != 2 ||
		task.Metadata["k"] != "v" || task.Source != "test" || task.Plan == nil || len(task.History) != 5 || task.Context == nil {
		t.Fatalf("task = %+v", task)
	}

	var list struct {
		Tasks []struct {
			ID    string    `json:"task_id"`
			State fsm.State `json:"state"`
		} `json:"tasks"`
	}
	td.do("GET", "/v1/tasks?state=completed&type=general&limit=10", "").json(t, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].ID != created.TaskID {
		t.Fatalf("list = %+v", list)
	}
	td.do("GET", "/v1/tasks?state=failed", "").json(t, &list)
	if len(list.Tasks) != 0 {
		t.Fatalf("failed list = %+v", list)
	}

	var evs struct {
		Events []replay.EventJSON `json:"events"`
	}
	td.do("GET", "/v1/tasks/"+created.TaskID+"/events", "").json(t, &evs)
	if len(evs.Events) < 10 || evs.Events[0].Type != "MESSAGE_RECEIVED" || evs.Events[1].Type != "TASK_CREATED" || evs.Events[1].Causation != created.TaskID || evs.Events[0].Correlation == "" || evs.Events[0].Body == nil {
		t.Fatalf("events = %s", td.do("GET", "/v1/tasks/"+created.TaskID+"/events", "").body)
	}
	td.do("GET", "/v1/tasks/"+created.TaskID+"/events?after_version=8&limit=1", "").json(t, &evs)
	if len(evs.Events) != 1 || evs.Events[0].Version != 9 {
		t.Fatalf("paged events = %+v", evs.Events)
	}
	var prog struct {
		Complete  bool     `json:"complete"`
		ToolsUsed []string `json:"tools_used"`
	}
	td.do("GET", "/v1/tasks/"+created.TaskID+"/progress", "").json(t, &prog)
	if !prog.Complete || len(prog.ToolsUsed) != 1 || prog.ToolsUsed[0] != "current_time" {
		t.Fatalf("progress = %+v", prog)
	}

	// Webhook: the body is the input.
	r = td.do("POST", "/v1/webhooks/deploy?type=explore&priority=1", `{"service":"api","status":"green"}`, "Content-Type", "application/json")
	if r.status != 201 {
		t.Fatalf("webhook: %d %s", r.status, r.body)
	}
	r.json(t, &created)
	hook := td.waitTask(created.TaskID)
	if hook.Type != "explore" || hook.Source != "webhook:deploy" || hook.Input != `{"service":"api","status":"green"}` {
		t.Fatalf("webhook task = %+v", hook)
	}
	var global struct {
		Events []replay.EventJSON `json:"events"`
		Next   uint64             `json:"next_after_seq"`
		Head   uint64             `json:"head"`
	}
	td.do("GET", "/v1/events?limit=3", "").json(t, &global)
	if len(global.Events) != 3 || global.Events[0].Seq != 1 || global.Next != 3 || global.Head < 10 {
		t.Fatalf("global events = %+v", global)
	}
	sawWebhook := false
	for after := uint64(0); ; {
		td.do("GET", fmt.Sprintf("/v1/events?after_seq=%d&limit=1000", after), "").json(t, &global)
		for _, e := range global.Events {
			sawWebhook = sawWebhook || (e.Type == "WEBHOOK_TRIGGERED" && e.Version == 1 && e.Stream == e.ID)
		}
		if len(global.Events) == 0 {
			break
		}
		after = global.Next
	}
	if !sawWebhook {
		t.Fatal("no WEBHOOK_TRIGGERED input")
	}

	var stats struct {
		Tasks struct {
			Completed int `json:"completed"`
		} `json:"tasks"`
		Runtime struct {
			MaxActive int `json:"max_active_tasks"`
		} `json:"runtime"`
		Memory struct {
			Tasks int64 `json:"tasks_bytes"`
		} `json:"memory"`
	}
	td.do("GET", "/v1/stats", "").json(t, &stats)
	if stats.Tasks.Completed != 2 || stats.Runtime.MaxActive != 5 || stats.Memory.Tasks <= 0 {
		t.Fatalf("stats = %+v", stats)
	}

	r = td.do("POST", "/v1/admin/checkpoint", "")
	var cp struct {
		Path string `json:"path"`
		Seq  uint64 `json:"seq"`
	}
	r.json(t, &cp)
	if r.status != 201 || cp.Seq == 0 {
		t.Fatalf("checkpoint: %d %s", r.status, r.body)
	}
	// The copy opens as a log on its own, read-only, up to the head.
	cl, err := eventlog.Open(cp.Path, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("checkpoint does not open: %v", err)
	}
	if cl.Head() < cp.Seq {
		t.Errorf("checkpoint head %d < %d", cl.Head(), cp.Seq)
	}
	cl.Close()

	if r := td.do("GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("healthz %d", r.status)
	}
	if r := td.do("GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("readyz %d", r.status)
	}
}

// isMultiStep is the is_multi_step of a task's progress view, nil if absent.
func isMultiStep(t *testing.T, td *testDaemon, id string) *bool {
	t.Helper()
	var prog struct {
		IsMultiStep *bool `json:"is_multi_step"`
	}
	td.do("GET", "/v1/tasks/"+id+"/progress", "").json(t, &prog)
	return prog.IsMultiStep
}

func TestHTTPSuspendResumeCancelAndMessages(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	id := td.submit("?")
	task := td.waitTask(id)
	if task.State != fsm.StateSuspended || task.Question != "What would you like me to do?" {
		t.Fatalf("task = %+v", task)
	}
	if got := isMultiStep(t, td, id); got == nil || !*got { // started, not ended: waits for the user
		t.Fatalf("is_multi_step of a suspended task = %v", got)
	}
	if r := td.do("POST", "/v1/tasks/"+id+"/suspend", ""); r.status != 409 || r.errorCode(t) != "conflict" {
		t.Fatalf("suspend a suspended task: %d %s", r.status, r.body)
	}
	r := td.do("POST", "/v1/tasks/"+id+"/messages", `{"text":"hello again"}`)
	if r.status != 200 {
		t.Fatalf("message: %d %s", r.status, r.body)
	}
	if task = td.waitTask(id); task.State != fsm.StateCompleted || !strings.Contains(task.Result, "hello again") {
		t.Fatalf("after message: %+v", task)
	}
	if got := isMultiStep(t, td, id); got == nil || *got {
		t.Fatalf("is_multi_step of a completed task = %v", got)
	}
	if r := td.do("POST", "/v1/tasks/"+id+"/cancel", `{"reason":"late"}`); r.status != 409 {
		t.Fatalf("cancel a completed task: %d %s", r.status, r.body)
	}

	id = td.submit("?")
	td.waitTask(id)
	r = td.do("POST", "/v1/tasks/"+id+"/cancel", `{"reason":"no longer needed"}`)
	var tj server.TaskJSON
	r.json(t, &tj)
	if r.status != 200 || tj.State != fsm.StateFailed || tj.Error != "cancelled: no longer needed" {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
}

func TestHTTPBadInputIsRefusedAndChangesNothing(t *testing.T) {
	cfg := testConfig(t)
	cfg.server.MaxBodyBytes = 2048
	td := startDaemon(t, cfg)
	done := td.submit("hello")
	td.waitTask(done)
	unknown := "01JABCDEFGHJKMNPQRSTVWXYZ0"
	big := `{"input":"` + strings.Repeat("x", 4000) + `"}`
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/tasks", `{"input":`, 400, "bad_request"},
		{"POST", "/v1/tasks", `{"input":"x","bogus":1}`, 400, "bad_request"},
		// Field names match exactly: encoding/json alone takes these.
		{"POST", "/v1/tasks", `{"INPUT":"x"}`, 400, "bad_request"},
		{"POST", "/v1/tasks", `{"input":"x","Priority":1}`, 400, "bad_request"},
		{"POST", "/v1/tasks", `{"input":"x","input":"y"}`, 400, "bad_request"},
		{"POST", "/v1/tasks", `{"source":"x"}`, 400, "bad_request"},
		{"POST", "/v1/tasks", `{"input":3}`, 400, "bad_request"},
		{"POST", "/v1/tasks", `{"input":"x"} {"input":"y"}`, 400, "bad_request"},
		{"POST", "/v1/tasks", ``, 400, "bad_request"},
		{"POST", "/v1/tasks", `[]`, 400, "bad_request"},
		{"POST", "/v1/tasks", `{"input":"x","type":"nope"}`, 400, "bad_request"},
		{"POST", "/v1/tasks", `{"input":"x","priority":99999999}`, 400, "bad_request"},
		{"POST", "/v1/tasks", big, 413, "payload_too_large"},
		{"GET", "/v1/tasks?state=bogus", "", 400, "bad_request"},
		{"GET", "/v1/tasks?limit=0", "", 400, "bad_request"},
		{"GET", "/v1/tasks?limit=many", "", 400, "bad_request"},
		{"GET", "/v1/tasks?cursor=zzz", "", 400, "bad_request"},
		{"GET", "/v1/tasks?order=sideways", "", 400, "bad_request"},
		{"GET", "/v1/tasks?colour=red", "", 400, "bad_request"},
		{"GET", "/v1/tasks/" + unknown, "", 404, "not_found"},
		{"GET", "/v1/tasks/not-an-id", "", 404, "not_found"},
		{"GET", "/v1/tasks/" + done + "?wait=soon", "", 400, "bad_request"},
		{"GET", "/v1/tasks/" + unknown + "/events", "", 404, "not_found"},
		{"GET", "/v1/tasks/" + done + "/events?after_version=-1", "", 400, "bad_request"},
		{"GET", "/v1/tasks/" + unknown + "/progress", "", 404, "not_found"},
		{"POST", "/v1/tasks/" + unknown + "/messages", `{"text":"x"}`, 404, "not_found"},
		{"POST", "/v1/tasks/" + done + "/messages", `{}`, 400, "bad_request"},
		{"POST", "/v1/tasks/" + done + "/messages", `{"Text":"x"}`, 400, "bad_request"},
		{"POST", "/v1/tasks/" + done + "/cancel", `{"REASON":"x"}`, 400, "bad_request"},
		{"POST", "/v1/tasks/" + done + "/messages", `{"text":"x"}`, 409, "conflict"},
		{"POST", "/v1/tasks/" + done + "/messages", big, 413, "payload_too_large"},
		{"POST", "/v1/tasks/" + unknown + "/suspend", ``, 404, "not_found"},
		{"POST", "/v1/tasks/" + done + "/suspend", `{"why":"x"}`, 400, "bad_request"},
		{"POST", "/v1/tasks/" + done + "/suspend", ``, 409, "conflict"},
		{"POST", "/v1/tasks/" + done + "/resume", `{}`, 409, "conflict"},
		{"POST", "/v1/tasks/" + unknown + "/cancel", `{}`, 404, "not_found"},
		{"POST", "/v1/tasks/" + done + "/cancel", `{"reason":` + `"` + strings.Repeat("r", 1500) + `"}`, 400, "bad_request"},
		{"POST", "/v1/tasks/" + done + "/cancel", `{}`, 409, "conflict"},
		{"POST", "/v1/webhooks/bad%20name", `{}`, 400, "bad_request"},
		{"POST", "/v1/webhooks/ok?priority=x", `{}`, 400, "bad_request"},
		{"POST", "/v1/webhooks/ok?type=nope", `{}`, 400, "bad_request"},
		{"POST", "/v1/webhooks/ok", "\x00\xff\xfe", 400, "bad_request"},
		{"POST", "/v1/webhooks/ok", big, 413, "payload_too_large"},
		{"GET", "/v1/events?after_seq=-1", "", 400, "bad_request"},
		{"GET", "/v1/events?limit=5000", "", 400, "bad_request"},
		{"GET", "/v1/events/stream?after_seq=x", "", 400, "bad_request"},
		{"POST", "/v1/admin/checkpoint", `{"dir":"/tmp"}`, 400, "bad_request"},
		{"DELETE", "/v1/tasks", "", 405, "method_not_allowed"},
		{"GET", "/v1/tasks/" + done + "/cancel", "", 405, "method_not_allowed"},
		{"GET", "/v2/tasks", "", 404, "not_found"},
	} {
		head := td.d.engine.Log().Head()
		r := td.do(c.method, c.path, c.body)
		if r.status != c.status || r.errorCode(t) != c.code {
			t.Errorf("%s %s %.40q: %d %s, want %d %s", c.method, c.path, c.body, r.status, r.body, c.status, c.code)
		}
		if r.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: content type %q", c.method, c.path, r.header.Get("Content-Type"))
		}
		if h := td.d.engine.Log().Head(); h != head {
			t.Errorf("%s %s changed the log: head %d -> %d", c.method, c.path, head, h)
		}
	}
}

func TestHTTPTokenAuth(t *testing.T) {
	cfg := testConfig(t)
	cfg.server.Token = "s3cret-token"
	td := startDaemon(t, cfg)
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret-token"}, {"Authorization", "Basic s3cret-token"},
		{"Authorization", "Bearers3cret-token"}, {"Authorization", "Bearer"}} {
		if r := td.do("GET", "/v1/tasks", "", h...); r.status != 401 || r.errorCode(t) != "unauthorized" || r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("with %v: %d %s", h, r.status, r.body)
		}
	}
	if r := td.do("POST", "/v1/tasks", `{"input":"x"}`); r.status != 401 {
		t.Errorf("unauthenticated submit: %d", r.status)
	}
	// RFC 7235: the scheme is case-insensitive.
	for _, auth := range []string{"Bearer s3cret-token", "bearer s3cret-token", "BEARER  s3cret-token"} {
		if r := td.do("GET", "/v1/tasks", "", "Authorization", auth); r.status != 200 {
			t.Errorf("with %q: %d %s", auth, r.status, r.body)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := td.do("GET", p, ""); r.status != 200 {
			t.Errorf("%s without a token: %d", p, r.status)
		}
	}
}

// A token that no header can carry is refused at start, before anything is
// opened.
func TestBlankTokenRefused(t *testing.T) {
	for token, want := range map[string]string{
		"   ":     "only whitespace",
		"\t\n":    "only whitespace",
		" s3cret": "whitespace",
		"s3cret ": "whitespace",
		"s3cret":  "",
	} {
		err := checkToken(token)
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("checkToken(%q) = %v", token, err)
		}
	}
	// On an address in use, so that a daemon that took the token would
	// fail to start rather than serve for ever.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := filepath.Join(t.TempDir(), "data")
	var stderr bytes.Buffer
	code := run([]string{"pegasusd", "serve", "--addr", ln.Addr().String(), "--token", "   ", "--data-dir", data}, nil, io.Discard, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), "--token (PEGASUS_TOKEN) is only whitespace") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("data directory created: %v", err)
	}
}

func TestBindRefusedBeyondLoopbackWithoutToken(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7070": true, "localhost:7070": true, "[::1]:7070": true,
		"0.0.0.0:7070": false, ":7070": false, "192.168.1.10:7070": false, "[::]:7070": false, "example.com:80": false,
	} {
		if err := checkBind(addr, ""); (err == nil) != ok {
			t.Errorf("checkBind(%q, no token) = %v", addr, err)
		}
		if err := checkBind(addr, "tok"); err != nil {
			t.Errorf("checkBind(%q, token) = %v", addr, err)
		}
	}
	var stderr bytes.Buffer
	code := run([]string{"pegasusd", "serve", "--addr", "0.0.0.0:0", "--data-dir", t.TempDir()}, nil, io.Discard, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), "without --token") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	t.Setenv("PEGASUS_ADDR", "0.0.0.0:0")
	stderr.Reset()
	if code := run([]string{"pegasusd", "serve", "--data-dir", t.TempDir()}, nil, io.Discard, &stderr); code != exitError {
		t.Fatalf("PEGASUS_ADDR ignored: exit %d: %s", code, stderr.String())
	}
}

func TestShuttingDownAnswers503(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	td.d.server.Drain()
	if r := td.do("POST", "/v1/tasks", `{"input":"x"}`); r.status != 503 || r.errorCode(t) != "shutting_down" {
		t.Fatalf("submit while draining: %d %s", r.status, r.body)
	}
	if r := td.do("GET", "/readyz", ""); r.status != 503 {
		t.Fatalf("readyz while draining: %d", r.status)
	}
	if r := td.do("GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("healthz while draining: %d", r.status)
	}
}

// sseEvent is one event read from a stream.
type sseEvent struct {
	id, typ, data string
}

func readSSE(t *testing.T, br *bufio.Reader) sseEvent {
	t.Helper()
	var ev sseEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && ev.id != "":
			return ev
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
}

func TestEventStreamResumesWithLastEventID(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	open := func(lastID string, query string) (*bufio.Reader, func()) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		req, _ := http.NewRequestWithContext(ctx, "GET", td.url+"/v1/events/stream"+query, nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		return bufio.NewReader(resp.Body), func() { resp.Body.Close(); cancel() }
	}
	br, closeStream := open("", "")
	id := td.submit("hello")
	var seen []sseEvent
	for {
		ev := readSSE(t, br)
		seen = append(seen, ev)
		if ev.typ == "TASK_COMPLETED" {
			break
		}
	}
	closeStream()
	if seen[0].id != "1" || seen[0].typ != "SYSTEM_STARTED" {
		t.Fatalf("first event = %+v", seen[0])
	}
	var body replay.EventJSON
	if err := json.Unmarshal([]byte(seen[len(seen)-1].data), &body); err != nil || body.Stream != id {
		t.Fatalf("data = %s", seen[len(seen)-1].data)
	}
	// Reconnect after the third event: the stream goes on from the fourth.
	br, closeStream = open(seen[2].id, "")
	defer closeStream()
	if ev := readSSE(t, br); ev.id != seen[3].id || ev.typ != seen[3].typ {
		t.Fatalf("resumed at %+v, want %+v", ev, seen[3])
	}
	// A filtered stream keeps one stream.
	br2, close2 := open("", "?stream="+id)
	defer close2()
	if ev := readSSE(t, br2); ev.typ != "MESSAGE_RECEIVED" {
		t.Fatalf("filtered stream starts with %+v", ev)
	}
}

// head opens an event stream and returns its status, with the body only
// when it is an error: a stream that started is closed at once.
func (td *testDaemon) head(path, lastEventID string) response {
	td.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", td.url+path, nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		td.t.Fatal(err)
	}
	defer resp.Body.Close()
	r := response{status: resp.StatusCode, header: resp.Header}
	if r.status != 200 {
		r.body, _ = io.ReadAll(resp.Body)
	}
	return r
}

// TestResumeBeyondHeadIsRefused: a position past the head (up to 2^64-1,
// which once wrapped to 0 and replayed everything) is an explicit error,
// for the paged log and, before the stream starts, for SSE.
func TestResumeBeyondHeadIsRefused(t *testing.T) {
	// No task: nothing appends after the start, so the head stays put.
	td := startDaemon(t, testConfig(t))
	head := td.d.engine.Log().Head()
	if head == 0 {
		t.Fatal("empty log")
	}
	var page struct {
		Events []replay.EventJSON `json:"events"`
		Next   uint64             `json:"next_after_seq"`
	}
	r := td.do("GET", fmt.Sprintf("/v1/events?after_seq=%d", head), "")
	r.json(t, &page)
	if r.status != 200 || len(page.Events) != 0 || page.Next != head {
		t.Fatalf("at the head: %d %s", r.status, r.body)
	}
	for _, after := range []string{fmt.Sprint(head + 1), "18446744073709551615", "18446744073709551614"} {
		r := td.do("GET", "/v1/events?after_seq="+after, "")
		if r.status != 409 || r.errorCode(t) != api.CodeBeyondHead || !strings.Contains(string(r.body), "beyond the log's head") {
			t.Errorf("after_seq=%s: %d %s", after, r.status, r.body)
		}
		r = td.head("/v1/events/stream?after_seq="+after, "")
		if r.status != 409 || r.errorCode(t) != api.CodeBeyondHead || !strings.Contains(string(r.body), "after_seq") {
			t.Errorf("stream after_seq=%s: %d %s", after, r.status, r.body)
		}
		r = td.head("/v1/events/stream", after)
		if r.status != 409 || r.errorCode(t) != api.CodeBeyondHead || !strings.Contains(string(r.body), "Last-Event-ID") {
			t.Errorf("stream Last-Event-ID %s: %d %s", after, r.status, r.body)
		}
	}
}

// TestDaemonUsesTheConfiguredModel wires an OpenAI-compatible fake server
// through the --llm-* configuration.
func TestDaemonUsesTheConfiguredModel(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" { // the start-up check (probe.go)
			io.WriteString(w, `{"data":[{"id":"fake-9"}]}`)
			return
		}
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, `{"model":"fake-9","choices":[{"message":{"role":"assistant","content":"hello from the fake"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":4}}`)
	}))
	defer fake.Close()
	cfg := testConfig(t)
	cfg.llmBaseURL, cfg.llmModel, cfg.llmKey = fake.URL+"/v1", "fake-9", "sk-daemon-test-key-0001"
	td := startDaemon(t, cfg)
	id := td.submit("hi")
	task := td.waitTask(id)
	if task.Result != "hello from the fake" {
		t.Fatalf("result = %q", task.Result)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auth) != 1 || auth[0] != "Bearer sk-daemon-test-key-0001" {
		t.Fatalf("authorization headers = %q", auth)
	}
	var evs struct {
		Events []replay.EventJSON `json:"events"`
	}
	r := td.do("GET", "/v1/events?limit=1000", "")
	r.json(t, &evs)
	if strings.Contains(string(r.body), "sk-daemon-test-key") {
		t.Fatal("the API key is in the event log")
	}
	found := false
	for _, e := range evs.Events {
		found = found || e.Type == "MODEL_CALLED"
	}
	if !found {
		t.Fatal("no MODEL_CALLED recorded")
	}
	if r := td.do("GET", "/v1/stats", ""); !strings.Contains(string(r.body), `"model":"fake-9"`) {
		t.Fatalf("stats: %s", r.body)
	}
}

// An address in use fails the start before the data directory is created or
// anything is recovered or written.
func TestAddressInUseTouchesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := testConfig(t)
	cfg.addr = ln.Addr().String()
	d, err := start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		d.http.Close()
		t.Fatal("the daemon started on an address in use")
	}
	if _, err := os.Stat(cfg.engine.DataDir); !os.IsNotExist(err) {
		t.Fatalf("data directory %s exists after a failed start (%v)", cfg.engine.DataDir, err)
	}
}
