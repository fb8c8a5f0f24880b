package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

// testTimeout bounds every wait of a test: a hang is a failure, not a
// stuck CI job.
const testTimeout = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// harness is an agent over a log in an in-memory file system.
type harness struct {
	t    *testing.T
	fs   vfs.FS
	log  *eventlog.Log
	a    *Agent
	opts Options
}

func openLog(t testing.TB, fs vfs.FS) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open("data", &eventlog.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	h := &harness{t: t, fs: vfs.NewMem(), opts: opts}
	h.start()
	t.Cleanup(func() { h.stop() })
	return h
}

func (h *harness) start() {
	h.t.Helper()
	h.log = openLog(h.t, h.fs)
	a, err := New(h.log, h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := a.Start(testCtx(h.t)); err != nil {
		h.t.Fatal(err)
	}
	h.a = a
}

func (h *harness) stop() {
	if h.a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := h.a.Stop(ctx); err != nil {
		h.t.Errorf("stop: %v", err)
	}
	h.a = nil
}

func (h *harness) submit(text string) string {
	h.t.Helper()
	id, err := h.a.Submit(testCtx(h.t), text, "test", "")
	if err != nil {
		h.t.Fatal(err)
	}
	return id
}

func (h *harness) wait(id string) fsm.Task {
	h.t.Helper()
	task, err := h.a.WaitForTask(testCtx(h.t), id)
	if err != nil {
		h.t.Fatalf("waiting for %s: %v (state %s)", id, err, task.State)
	}
	return task
}

func (h *harness) waitState(id string, s fsm.State) fsm.Task {
	h.t.Helper()
	task, err := h.a.WaitUntil(testCtx(h.t), id, func(t *fsm.Task) bool { return t.State == s })
	if err != nil {
		h.t.Fatalf("waiting for %s to be %s: %v (state %s)", id, s, err, task.State)
	}
	return task
}

// events returns the decoded events of a stream.
func (h *harness) events(stream string) []fsm.Event {
	h.t.Helper()
	it := h.log.ReadStream(stream, 0)
	defer it.Close()
	var out []fsm.Event
	for it.Next() {
		ev, err := replay.Decode(it.Event())
		if err != nil {
			h.t.Fatalf("decode %s: %v", it.Event().Type, err)
		}
		out = append(out, ev)
	}
	if err := it.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

func types(evs []fsm.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, string(e.Type))
	}
	return strings.Join(s, " ")
}

func path(task fsm.Task) string {
	s := []string{string(fsm.StateIdle)}
	for _, h := range task.History {
		s = append(s, string(h.To))
	}
	return strings.Join(s, " > ")
}

// ---- a fake OpenAI-compatible server

type chatReq struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role       string `json:"role"`
		Content    *string
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func (r *chatReq) last() (role, content string) {
	m := r.Messages[len(r.Messages)-1]
	if m.Content != nil {
		content = *m.Content
	}
	return m.Role, content
}

// firstUser is the task's input: the first user message that is not the
// memory index.
func (r *chatReq) firstUser() string {
	for _, m := range r.Messages {
		if m.Role == "user" && m.Content != nil && !strings.HasPrefix(*m.Content, memoryIndexHeader) {
			return *m.Content
		}
	}
	return ""
}

type reply struct {
	status  int
	content string
	calls   [][2]string // name, arguments
	// pieces, when set, are the chunks a streamed reply's content is
	// sent in (else one chunk per word); with breakAfter > 0 the stream
	// drops after that many pieces, before its end.
	pieces     []string
	breakAfter int
}

func text(s string) reply { return reply{content: s} }

func calls(nameArgs ...string) reply {
	r := reply{}
	for i := 0; i+1 < len(nameArgs); i += 2 {
		r.calls = append(r.calls, [2]string{nameArgs[i], nameArgs[i+1]})
	}
	return r
}

// fakeModel is an httptest server speaking Chat Completions. script
// decides each answer from the request; it may block. It counts
// concurrent calls.
type fakeModel struct {
	srv    *httptest.Server
	script func(r *chatReq) reply

	mu       sync.Mutex
	inflight int
	maxIn    int
	calls    int
	arrived  chan int // inflight count at each arrival, if not nil
	// gate, if not nil, is received from before each piece of a
	// streamed reply's content is sent (and before a break).
	gate chan struct{}
}

func newFakeModel(t *testing.T, script func(r *chatReq) reply) *fakeModel {
	f := &fakeModel{script: script}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req chatReq
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request", 400)
		return
	}
	f.mu.Lock()
	f.inflight++
	f.calls++
	f.maxIn = max(f.maxIn, f.inflight)
	n := f.inflight
	arrived := f.arrived
	f.mu.Unlock()
	if arrived != nil {
		arrived <- n
	}
	f.mu.Lock()
	script := f.script
	f.mu.Unlock()
	rep := script(&req)
	f.mu.Lock()
	f.inflight--
	f.mu.Unlock()
	if rep.status != 0 && rep.status != 200 {
		w.WriteHeader(rep.status)
		fmt.Fprintf(w, `{"error":{"message":%q}}`, rep.content)
		return
	}
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type tc struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	msg := map[string]any{"role": "assistant", "content": rep.content}
	finish := "stop"
	if len(rep.calls) > 0 {
		var tcs []tc
		for i, c := range rep.calls {
			tcs = append(tcs, tc{ID: fmt.Sprintf("call_%d_%d", len(req.Messages), i), Type: "function", Function: fn{c[0], c[1]}})
		}
		msg["tool_calls"] = tcs
		msg["content"] = nil
		finish = "tool_calls"
	}
	if req.Stream {
		f.stream(w, &req, rep, msg, finish)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"model":   req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 2},
	})
}

// stream sends a reply as OpenAI chat.completion.chunk events: the
// content in pieces, each tool call in two (its name, then its
// arguments), the finish reason, the usage and [DONE].
func (f *fakeModel) stream(w http.ResponseWriter, req *chatReq, rep reply, msg map[string]any, finish string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	delta := func(d map[string]any, finish any) map[string]any {
		return map[string]any{"model": req.Model, "choices": []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish}}}
	}
	pieces := rep.pieces
	if pieces == nil && rep.content != "" && len(rep.calls) == 0 {
		pieces = strings.SplitAfter(rep.content, " ")
	}
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	for i, p := range pieces {
		if gate != nil {
			<-gate
		}
		if rep.breakAfter > 0 && i == rep.breakAfter {
			panic(http.ErrAbortHandler) // the connection drops mid-stream
		}
		send(delta(map[string]any{"content": p}, nil))
	}
	if tcs, ok := msg["tool_calls"]; ok {
		b, _ := json.Marshal(tcs)
		var calls []struct {
			ID       string `json:"id"`
			Function struct{ Name, Arguments string }
		}
		_ = json.Unmarshal(b, &calls)
		for i, c := range calls {
			send(delta(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Function.Name, "arguments": ""}}}}, nil))
			send(delta(map[string]any{"tool_calls": []any{map[string]any{"index": i,
				"function": map[string]any{"arguments": c.Function.Arguments}}}}, nil))
		}
	}
	send(delta(map[string]any{}, finish))
	send(map[string]any{"model": req.Model, "choices": []any{}, "usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 2}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (f *fakeModel) setScript(s func(r *chatReq) reply) {
	f.mu.Lock()
	f.script = s
	f.mu.Unlock()
}

// counts returns the number of calls and the most that ran at once.
func (f *fakeModel) counts() (calls, maxInflight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.maxIn
}

func (f *fakeModel) client(t *testing.T, mod func(*llm.Options)) llm.Model {
	t.Helper()
	o := llm.Options{BaseURL: f.srv.URL + "/v1", Model: "fake-1", APIKey: "sk-fake-key-123456",
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() }}
	if mod != nil {
		mod(&o)
	}
	c, err := llm.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
