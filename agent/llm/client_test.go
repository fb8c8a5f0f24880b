package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

const testKey = "sk-test-0123456789abcdef"

// script serves the queued answers in order, recording each request.
type script struct {
	mu       sync.Mutex
	answers  []func(w http.ResponseWriter)
	requests []recorded
}

type recorded struct {
	auth string
	body map[string]any
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, "wrong route "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	data, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(data, &body)
	s.mu.Lock()
	s.requests = append(s.requests, recorded{auth: r.Header.Get("Authorization"), body: body})
	var answer func(http.ResponseWriter)
	if len(s.answers) > 0 {
		answer, s.answers = s.answers[0], s.answers[1:]
	}
	s.mu.Unlock()
	if answer == nil {
		http.Error(w, "script exhausted", http.StatusTeapot)
		return
	}
	answer(w)
}

func status(code int, body string, header ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

const okToolCall = `{"id":"x","model":"m-2024","choices":[{"index":0,"message":{"role":"assistant","content":null,
 "tool_calls":[{"id":"call_a","type":"function","function":{"name":"current_time","arguments":"{\"tz\":\"UTC\"}"}}]},
 "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`

const okText = `{"choices":[{"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`

type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func newTestClient(t *testing.T, srv *httptest.Server, sl *sleeps, mod func(*Options)) *Client {
	t.Helper()
	opts := Options{
		BaseURL: srv.URL + "/v1/", Model: "test-model", APIKey: testKey,
		HTTPClient: srv.Client(), Sleep: sl.sleep,
		Jitter: func(time.Duration) time.Duration { return 0 },
	}
	if mod != nil {
		mod(&opts)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCompleteSpeaksChatCompletions(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){status(200, okToolCall)}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newTestClient(t, srv, &sleeps{}, nil)

	req := Request{
		Messages: []fsm.Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Content: "what time is it?"},
			{Role: "assistant", ToolCalls: []fsm.ToolCall{{ID: "c1", Name: "current_time", Arguments: ""}}},
			{Role: "tool", ToolCallID: "c1", Content: "12:00"},
		},
		Tools: []ToolSpec{
			{Name: "current_time", Description: "now"},
			{Name: "memory_read", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
		},
		MaxTokens: 256,
	}
	var atts []Attempt
	resp, err := c.Complete(context.Background(), req, func(a Attempt) { atts = append(atts, a) })
	if err != nil {
		t.Fatal(err)
	}
	want := Response{Model: "m-2024", FinishReason: "tool_calls", Usage: Usage{12, 5},
		ToolCalls: []fsm.ToolCall{{ID: "call_a", Name: "current_time", Arguments: `{"tz":"UTC"}`}}}
	if fmt.Sprint(resp) != fmt.Sprint(want) {
		t.Fatalf("response = %+v, want %+v", resp, want)
	}
	if len(atts) != 1 || atts[0].Err != nil || atts[0].Status != 200 || atts[0].Response == nil || atts[0].Number != 1 || atts[0].Model != "test-model" {
		t.Fatalf("attempts = %+v", atts)
	}

	got := s.requests[0]
	if got.auth != "Bearer "+testKey {
		t.Errorf("Authorization = %q", got.auth)
	}
	enc, _ := json.Marshal(got.body)
	for _, frag := range []string{
		`"model":"test-model"`,
		`{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{}","name":"current_time"},"id":"c1","type":"function"}]}`,
		`{"content":"12:00","role":"tool","tool_call_id":"c1"}`,
		`{"function":{"description":"now","name":"current_time","parameters":{"properties":{},"type":"object"}},"type":"function"}`,
		`"required":["path"]`,
		`"max_tokens":256`,
	} {
		if !strings.Contains(string(enc), frag) {
			t.Errorf("request %s\nlacks %s", enc, frag)
		}
	}
}

func TestRetries429And5xxThenSucceeds(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){
		status(429, `{"error":{"message":"slow down"}}`, "Retry-After", "2"),
		status(503, `upstream down`),
		status(200, okText),
	}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	sl := &sleeps{}
	c := newTestClient(t, srv, sl, nil)
	var atts []Attempt
	resp, err := c.Complete(context.Background(), Request{Messages: []fsm.Message{{Role: "user", Content: "hi"}}}, func(a Attempt) { atts = append(atts, a) })
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "hello" {
		t.Fatalf("content = %q", resp.Content)
	}
	if len(atts) != 3 {
		t.Fatalf("got %d attempts, want 3", len(atts))
	}
	for i, want := range []struct {
		status int
		retry  bool
		msg    string
	}{{429, true, "slow down"}, {503, true, "upstream down"}, {200, false, ""}} {
		a := atts[i]
		if a.Number != i+1 || a.Status != want.status || a.WillRetry != want.retry {
			t.Errorf("attempt %d = %+v", i, a)
		}
		if want.msg != "" && (a.Err == nil || !strings.Contains(a.Err.Error(), want.msg)) {
			t.Errorf("attempt %d error = %v, want it to mention %q", i, a.Err, want.msg)
		}
	}
	// Retry-After wins for the first wait; the second is the exponential
	// backoff for attempt 2 (1s, half of it fixed, jitter 0).
	if fmt.Sprint(sl.d) != fmt.Sprint([]time.Duration{2 * time.Second, 500 * time.Millisecond}) {
		t.Fatalf("sleeps = %v", sl.d)
	}
}

func TestBadRequestIsNotRetried(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){status(400, `{"error":{"message":"unknown model"}}`)}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	sl := &sleeps{}
	c := newTestClient(t, srv, sl, nil)
	n := 0
	_, err := c.Complete(context.Background(), Request{}, func(Attempt) { n++ })
	var api *APIError
	if !errors.As(err, &api) || api.Status != 400 || api.Message != "unknown model" {
		t.Fatalf("err = %v", err)
	}
	if n != 1 || len(s.requests) != 1 || len(sl.d) != 0 {
		t.Fatalf("attempts %d, requests %d, sleeps %v", n, len(s.requests), sl.d)
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	var answers []func(http.ResponseWriter)
	for range 5 {
		answers = append(answers, status(500, `{"error":"boom"}`))
	}
	s := &script{answers: answers}
	srv := httptest.NewServer(s)
	defer srv.Close()
	sl := &sleeps{}
	c := newTestClient(t, srv, sl, func(o *Options) { o.MaxAttempts = 3; o.InitialBackoff = time.Second; o.MaxBackoff = 3 * time.Second })
	var atts []Attempt
	_, err := c.Complete(context.Background(), Request{}, func(a Attempt) { atts = append(atts, a) })
	if err == nil || !strings.Contains(err.Error(), "500: boom") {
		t.Fatalf("err = %v", err)
	}
	if len(s.requests) != 3 || len(atts) != 3 || atts[2].WillRetry || !atts[1].WillRetry {
		t.Fatalf("requests %d, attempts %+v", len(s.requests), atts)
	}
	if fmt.Sprint(sl.d) != fmt.Sprint([]time.Duration{500 * time.Millisecond, time.Second}) {
		t.Fatalf("sleeps = %v", sl.d)
	}
}

func TestBackoffDoublesUpToTheCap(t *testing.T) {
	c := &Client{opts: Options{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
		Jitter: func(n time.Duration) time.Duration { return n - 1 }}}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, c.backoff(n, 0))
	}
	// Full jitter taken: each wait is the whole step (100ms, 200ms, ...).
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("backoff = %v, want %v", got, want)
	}
	if d := c.backoff(1, time.Hour); d != time.Second {
		t.Fatalf("Retry-After is not capped: %v", d)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTransportErrorsAreRetried(t *testing.T) {
	calls := 0
	rt := roundTrip(func(r *http.Request) (*http.Response, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("connection reset by peer")
		}
		return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(okText)), Header: http.Header{}}, nil
	})
	c, err := New(Options{BaseURL: "http://model.invalid/v1", Model: "m", HTTPClient: &http.Client{Transport: rt}, Sleep: (&sleeps{}).sleep})
	if err != nil {
		t.Fatal(err)
	}
	var atts []Attempt
	resp, err := c.Complete(context.Background(), Request{}, func(a Attempt) { atts = append(atts, a) })
	if err != nil || resp.Content != "hello" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	if len(atts) != 2 || atts[0].Status != 0 || !strings.Contains(atts[0].Err.Error(), "connection reset") {
		t.Fatalf("attempts = %+v", atts)
	}
}

func TestCancelledContextStopsRetrying(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &script{answers: []func(http.ResponseWriter){status(503, "busy"), status(200, okText)}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newTestClient(t, srv, &sleeps{}, func(o *Options) {
		o.Sleep = func(ctx context.Context, d time.Duration) error { cancel(); return ctx.Err() }
	})
	_, err := c.Complete(ctx, Request{}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if len(s.requests) != 1 {
		t.Fatalf("%d requests after cancel", len(s.requests))
	}
}

func TestMalformedSuccessIsNotRetried(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){status(200, `{"choices":[]}`), status(200, okText)}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newTestClient(t, srv, &sleeps{}, nil)
	_, err := c.Complete(context.Background(), Request{}, nil)
	if !errors.Is(err, ErrNoChoices) || len(s.requests) != 1 {
		t.Fatalf("err %v after %d requests", err, len(s.requests))
	}
}

func TestLenientToolCallShapes(t *testing.T) {
	// llama.cpp-style: arguments as an object, and no call ids.
	body := `{"choices":[{"message":{"content":"","tool_calls":[
	  {"type":"function","function":{"name":"memory_read","arguments":{"path":"facts/a.md"}}},
	  {"type":"function","function":{"name":"current_time","arguments":""}}]},"finish_reason":"tool_calls"}]}`
	r, err := decodeResponse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []fsm.ToolCall{{ID: "call_0", Name: "memory_read", Arguments: `{"path":"facts/a.md"}`}, {ID: "call_1", Name: "current_time", Arguments: "{}"}}
	if fmt.Sprint(r.ToolCalls) != fmt.Sprint(want) {
		t.Fatalf("tool calls = %+v", r.ToolCalls)
	}
	if _, err := decodeResponse([]byte(`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":"{}"}}]}}]}`)); err == nil {
		t.Fatal("a tool call without a name was accepted")
	}
}

func TestAPIKeyNeverLeaks(t *testing.T) {
	// A hostile or buggy server echoes the Authorization header back.
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
		fmt.Fprintf(w, `{"error":{"message":"bad credentials %s"}}`, r.Header.Get("Authorization"))
	})
	srv := httptest.NewServer(echo)
	defer srv.Close()
	opts := Options{BaseURL: srv.URL, Model: "m", APIKey: testKey, HTTPClient: srv.Client()}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var atts []Attempt
	_, err = c.Complete(context.Background(), Request{}, func(a Attempt) { atts = append(atts, a) })
	if err == nil {
		t.Fatal("want an error")
	}

	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "opts", opts, "key", opts.APIKey)
	js, jerr := json.Marshal(struct{ Key Secret }{opts.APIKey})
	if jerr != nil || string(js) != `{"Key":"[REDACTED]"}` {
		t.Errorf("json = %s, %v", js, jerr)
	}
	outputs := []string{
		err.Error(), atts[0].Err.Error(),
		fmt.Sprintf("%v %+v %#v %s", opts, opts, opts, opts.APIKey),
		logs.String(), string(js),
	}
	for _, out := range outputs {
		if strings.Contains(out, testKey) || strings.Contains(out, testKey[3:]) {
			t.Errorf("key leaked: %s", out)
		}
	}
	if !strings.Contains(err.Error(), "[REDACTED]") {
		t.Errorf("error %q does not show the scrubbed key", err)
	}
}

func TestValidate(t *testing.T) {
	for _, o := range []Options{{Model: "m"}, {BaseURL: "localhost:11434", Model: "m"}, {BaseURL: "http://x/v1"}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// TestPoolKeepsConnectionsForEveryConcurrentCall runs many calls, n at a
// time, against a fake model that counts the connections it accepts. With
// Go's default transport (two idle connections per host) most calls would
// open a connection of their own; the client's pool keeps one per call
// that may run at once.
func TestPoolKeepsConnectionsForEveryConcurrentCall(t *testing.T) {
	const n, calls = 8, 200
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, okText)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c, err := New(Options{BaseURL: srv.URL + "/v1", Model: "m", MaxConns: n})
	if err != nil {
		t.Fatal(err)
	}
	defer c.opts.HTTPClient.CloseIdleConnections()
	work := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			for range work {
				if _, err := c.Complete(context.Background(), Request{Messages: []fsm.Message{{Role: "user", Content: "hi"}}}, nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range calls {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A call may finish a moment before its connection is back in the
	// pool, so the next call dials; the pool then keeps both. Allow that
	// slack, far below the one-connection-per-call of an unsized pool.
	if got := opened.Load(); got > 2*n {
		t.Fatalf("%d calls, %d at a time, opened %d connections; want at most %d", calls, n, got, 2*n)
	}
}
