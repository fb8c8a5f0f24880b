package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/urfave/cli/v2"

	papi "github.com/pegasus-engine/pegasus/api"
	pclient "github.com/pegasus-engine/pegasus/client"
	"github.com/pegasus-engine/pegasus/internal/syncbuf"
)

// streamingModel is a fake OpenAI-compatible server that streams each
// reply as chat.completion.chunk events, one piece of text per chunk,
// waiting on gate before each piece (and before dropping a connection),
// so a test sees every piece arrive. replies[i] answers request i; a
// reply ending in "!" drops the connection before that piece instead.
type streamingModel struct {
	gate    chan struct{}
	mu      sync.Mutex
	replies [][]string
	asked   []bool // whether request i asked for a stream
}

func (m *streamingModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" { // the start's probe of /v1/models
		http.NotFound(w, r)
		return
	}
	body := make([]byte, 1<<16)
	n, _ := r.Body.Read(body)
	m.mu.Lock()
	i := len(m.asked)
	m.asked = append(m.asked, strings.Contains(string(body[:n]), `"stream":true`))
	pieces := m.replies[min(i, len(m.replies)-1)]
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	for _, p := range pieces {
		<-m.gate
		if p == "!" {
			panic(http.ErrAbortHandler)
		}
		fmt.Fprintf(w, "data: {\"model\":\"fake-s\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", p)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: {\"model\":\"fake-s\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	fmt.Fprint(w, "data: {\"model\":\"fake-s\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// release lets the model send its next piece (or drop the connection).
func (m *streamingModel) release(t *testing.T) {
	t.Helper()
	select {
	case m.gate <- struct{}{}:
	case <-testCtx(t).Done():
		t.Fatal("the model was not asked")
	}
}

// follower reads a task's stream on its own goroutine and hands each
// frame and event over, rendered: "delta 1 Hel", "restart 2",
// "event MODEL_CALLED".
type follower struct {
	got  chan string
	done chan error
}

func follow(t *testing.T, api *pclient.Client, id string) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{got: make(chan string), done: make(chan error, 1)}
	t.Cleanup(func() { cancel(); <-f.done })
	send := func(s string) error {
		select {
		case f.got <- s:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	go func() {
		f.done <- api.FollowTask(ctx, id, 0, func(fr pclient.TextFrame) error {
			if fr.Restart {
				return send(fmt.Sprintf("restart %d", fr.Attempt))
			}
			return send(fmt.Sprintf("delta %d %s", fr.Attempt, fr.Text))
		}, func(ev papi.Event) error { return send("event " + ev.Type) })
	}()
	return f
}

// next returns the next frame or event that is not an event outside
// keep.
func (f *follower) next(t *testing.T, keep ...string) string {
	t.Helper()
	ctx := testCtx(t)
	for {
		select {
		case s := <-f.got:
			if !strings.HasPrefix(s, "event ") {
				return s
			}
			for _, k := range keep {
				if s == "event "+k {
					return s
				}
			}
		case err := <-f.done:
			t.Fatalf("the stream ended: %v", err)
		case <-ctx.Done():
			t.Fatal("nothing arrived on the stream")
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestTaskStreamSendsDeltasAndRestarts runs a task against a model that
// streams: its first attempt drops mid-way, the second answers. A client
// following the task gets the pieces as they come, tagged with their
// attempt, "attempt_restarted" before the second attempt's text, and the
// committed events in between; a client that joins in the middle of the
// second attempt gets its text so far first. The log records the usage
// the stream ended with.
func TestTaskStreamSendsDeltasAndRestarts(t *testing.T) {
	m := &streamingModel{gate: make(chan struct{}), replies: [][]string{{"Hel", "lo", "!"}, {"Hel", "lo", " there"}}}
	fake := httptest.NewServer(m)
	defer fake.Close()
	defer close(m.gate) // after a failure, lets the model's handlers end before the daemon stops
	cfg := testConfig(t)
	cfg.llmBaseURL, cfg.llmModel, cfg.llmAttempts = fake.URL+"/v1", "fake-s", 2
	td := startDaemon(t, cfg)
	api, err := pclient.New(td.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := td.submit("hi")
	first := follow(t, api, id)
	keep := []string{"MODEL_CALLED", "TASK_COMPLETED"}
	step := func(f *follower, want string) {
		t.Helper()
		if got := f.next(t, keep...); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	m.release(t)
	step(first, "delta 1 Hel")
	m.release(t)
	step(first, "delta 1 lo")
	m.release(t) // the connection drops
	step(first, "restart 2")
	step(first, "event MODEL_CALLED") // the failed attempt, committed
	m.release(t)
	step(first, "delta 2 Hel")
	late := follow(t, api, id)
	step(late, "delta 2 Hel")        // the attempt so far, first
	step(late, "event MODEL_CALLED") // then the log from the start
	m.release(t)
	step(first, "delta 2 lo")
	step(late, "delta 2 lo")
	m.release(t)
	step(first, "delta 2  there")
	step(late, "delta 2  there")
	step(first, "event MODEL_CALLED")
	step(first, "event TASK_COMPLETED")

	if task := td.waitTask(id); task.Result != "Hello there" {
		t.Fatalf("result = %q", task.Result)
	}
	r := td.do("GET", "/v1/tasks/"+id+"/events", "")
	if !strings.Contains(string(r.body), `"prompt_tokens":9`) || !strings.Contains(string(r.body), `"completion_tokens":3`) {
		t.Fatalf("the usage is not recorded: %s", r.body)
	}
	if fmt.Sprint(m.asked) != "[true true]" {
		t.Fatalf("requests asked for a stream: %v", m.asked)
	}
	// A task that does not exist has no stream.
	var e *pclient.Error
	if err := api.FollowTask(testCtx(t), "01ARZ3NDEKTSV4RRFFQ69G5FAV", 0, nil, nil); !errors.As(err, &e) || e.Status != 404 {
		t.Fatalf("unknown task: %v", err)
	}
}

// chanWriter hands every write over on a channel.
type chanWriter chan string

func (w chanWriter) Write(p []byte) (int, error) { w <- string(p); return len(p), nil }

// TestSubmitPrintsTheAnswerAsItStreams: on a terminal, submit prints
// each piece of the answer as it arrives; when an attempt breaks, it
// ends the line and says on stderr that the model starts over; the
// answer is not printed a second time at the end. With --no-stream it
// prints the answer once, as before.
func TestSubmitPrintsTheAnswerAsItStreams(t *testing.T) {
	m := &streamingModel{gate: make(chan struct{}), replies: [][]string{{"Hel", "lo", "!"}, {"Hel", "lo", " there"}}}
	fake := httptest.NewServer(m)
	defer fake.Close()
	defer close(m.gate)
	cfg := testConfig(t)
	cfg.llmBaseURL, cfg.llmModel, cfg.llmAttempts = fake.URL+"/v1", "fake-s", 2
	cfg.engine.DisableReflection = true
	td := startDaemon(t, cfg)

	out := make(chanWriter)
	var errb syncbuf.Buffer
	yes := true
	c := &client{stdin: strings.NewReader(""), stdout: out, stderr: &errb, interactive: new(bool), streamOut: &yes}
	code := make(chan int, 1)
	go func() {
		app := newApp(c)
		code <- exitCode(app.Run([]string{"pegasusd", "submit", "--server", td.url, "hi"}), &errb)
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-out:
			if got != want {
				t.Fatalf("stdout got %q, want %q (stderr %q)", got, want, errb.String())
			}
		case <-testCtx(t).Done():
			t.Fatalf("stdout: nothing; stderr %q", errb.String())
		}
	}
	gate := func() { m.release(t) }
	// The third piece of the first attempt drops the connection: the
	// line ends. The answer ends its line once the task completed.
	for _, want := range []string{"Hel", "lo", "\n", "Hel", "lo", " there"} {
		gate()
		expect(want)
	}
	expect("\n")
	if c := <-code; c != 0 {
		t.Fatalf("exit %d, stderr %q", c, errb.String())
	}
	if !strings.Contains(errb.String(), "attempt 2 starts over") {
		t.Fatalf("stderr %q", errb.String())
	}

	go func() {
		app := newApp(c)
		code <- exitCode(app.Run([]string{"pegasusd", "submit", "--server", td.url, "--no-stream", "hi"}), &errb)
	}()
	for range 3 {
		gate()
	}
	expect("Hello there\n")
	if c := <-code; c != 0 {
		t.Fatalf("exit %d, stderr %q", c, errb.String())
	}
}

// TestLLMStreamFlagAndConfig: the --llm-* model streams unless
// --llm-stream=false; the configuration's default model's stream: false
// applies unless the flag is given.
func TestLLMStreamFlagAndConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pegasus.yaml")
	if err := os.WriteFile(file, []byte("models:\n  - name: local\n    baseUrl: http://127.0.0.1:1/v1\n    model: m\n    default: true\n    stream: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args     []string
		noStream bool
	}{
		{[]string{"--llm-base-url", "http://127.0.0.1:1/v1", "--llm-model", "m"}, false},
		{[]string{"--llm-base-url", "http://127.0.0.1:1/v1", "--llm-model", "m", "--llm-stream=false"}, true},
		{[]string{"--config", file}, true},
		{[]string{"--config", file, "--llm-stream"}, false},
	} {
		var cfg *config
		app := newApp(&client{stdout: io.Discard, stderr: io.Discard})
		app.Commands = nil
		app.Action = func(cc *cli.Context) (err error) {
			cfg, err = configFrom(cc)
			return err
		}
		if err := app.Run(append([]string{"pegasusd", "--data-dir", t.TempDir()}, c.args...)); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if got := cfg.llmOptions().NoStream; got != c.noStream {
			t.Errorf("%v: NoStream = %v, want %v", c.args, got, c.noStream)
		}
	}
}
