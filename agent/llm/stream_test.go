package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

// chunk is one chat.completion.chunk carrying content text.
func chunk(text string) string {
	return fmt.Sprintf(`{"model":"m-2024","choices":[{"index":0,"delta":{"content":%q}}]}`, text)
}

const (
	stopChunk  = `{"model":"m-2024","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	usageChunk = `{"model":"m-2024","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}`
)

// events answers with a Server-Sent Events stream of the given data
// lines, flushed one by one; before each one it waits for gate, when
// gate is not nil, so a test can see the pieces arrive live.
func events(gate <-chan struct{}, data ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, d := range data {
			if gate != nil {
				<-gate
			}
			fmt.Fprintf(w, "data: %s\n\n", d)
			w.(http.Flusher).Flush()
		}
	}
}

// abort sends the data lines, then drops the connection mid-stream.
func abort(data ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		events(nil, data...)(w)
		panic(http.ErrAbortHandler)
	}
}

// TestStreamDeltasArriveLiveAndInOrder: each chunk's text reaches
// Request.Deltas while the stream is still open (the server waits for
// the test before sending the next one), and the assembled reply is
// what a whole response would have been, usage included.
func TestStreamDeltasArriveLiveAndInOrder(t *testing.T) {
	gate := make(chan struct{})
	s := &script{answers: []func(http.ResponseWriter){
		events(gate, chunk("Hel"), chunk("lo, "), chunk("world"), stopChunk, usageChunk, "[DONE]"),
	}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newTestClient(t, srv, &sleeps{}, nil)
	got := make(chan string)
	type result struct {
		r   Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.Complete(context.Background(), Request{Messages: []fsm.Message{{Role: "user", Content: "hi"}},
			Deltas: func(text string) { got <- text }}, nil)
		done <- result{r, err}
	}()
	for _, want := range []string{"Hel", "lo, ", "world"} {
		gate <- struct{}{}
		if d := <-got; d != want {
			t.Fatalf("delta %q, want %q", d, want)
		}
	}
	for range 3 { // the finish, the usage and [DONE]
		gate <- struct{}{}
	}
	res := <-done
	want := Response{Model: "m-2024", Content: "Hello, world", FinishReason: "stop", Usage: Usage{7, 3}}
	if res.err != nil || fmt.Sprint(res.r) != fmt.Sprint(want) {
		t.Fatalf("response %+v, %v; want %+v", res.r, res.err, want)
	}
	body := s.requests[0].body
	if body["stream"] != true || fmt.Sprint(body["stream_options"]) != "map[include_usage:true]" {
		t.Fatalf("request stream fields: %v %v", body["stream"], body["stream_options"])
	}
}

// TestStreamAssemblesToolCallsByIndex: tool call pieces, interleaved
// between two calls, are put together by their index.
func TestStreamAssemblesToolCallsByIndex(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){events(nil,
		`{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"current_time","arguments":""}}]}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"memory_read","arguments":"{\"pa"}}]}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"tz\":"}}]}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"th\":\"a.md\"}"}}]}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"UTC\"}"}}]}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":5}}`,
		"[DONE]")}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newTestClient(t, srv, &sleeps{}, nil)
	r, err := c.Complete(context.Background(), Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []fsm.ToolCall{{ID: "call_a", Name: "current_time", Arguments: `{"tz":"UTC"}`}, {ID: "call_b", Name: "memory_read", Arguments: `{"path":"a.md"}`}}
	if fmt.Sprint(r.ToolCalls) != fmt.Sprint(want) || r.FinishReason != "tool_calls" || r.Usage != (Usage{12, 5}) || r.Content != "" {
		t.Fatalf("response = %+v", r)
	}
}

// TestBrokenStreamIsRetried: a stream that stops mid-way (the body ends
// early, or the connection drops) is a failed attempt, retried; the
// deltas of the failed attempt are followed by its report before the
// next attempt's first delta.
func TestBrokenStreamIsRetried(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){
		events(nil, chunk("Hel")),        // ends without a finish
		abort(chunk("Hel"), chunk("lo")), // connection dropped
		events(nil, chunk("Hel"), chunk("lo"), stopChunk, usageChunk, "[DONE]"),
	}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	sl := &sleeps{}
	c := newTestClient(t, srv, sl, nil)
	var seen []string
	r, err := c.Complete(context.Background(), Request{Deltas: func(text string) { seen = append(seen, text) }},
		func(a Attempt) {
			seen = append(seen, fmt.Sprintf("[attempt %d retry=%v err=%v]", a.Number, a.WillRetry, a.Err != nil))
		})
	if err != nil || r.Content != "Hello" || r.Usage != (Usage{7, 3}) {
		t.Fatalf("response %+v, %v", r, err)
	}
	want := "Hel|[attempt 1 retry=true err=true]|Hel|lo|[attempt 2 retry=true err=true]|Hel|lo|[attempt 3 retry=false err=false]"
	if got := strings.Join(seen, "|"); got != want {
		t.Fatalf("sequence\n got %s\nwant %s", got, want)
	}
	if len(sl.d) != 2 {
		t.Fatalf("sleeps = %v", sl.d)
	}
}

// TestStreamErrorChunkIsRetried: an error sent inside the stream fails
// the attempt, retried.
func TestStreamErrorChunkIsRetried(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){
		events(nil, chunk("x"), `{"error":{"message":"overloaded"}}`),
		events(nil, chunk("ok"), stopChunk, "[DONE]"),
	}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newTestClient(t, srv, &sleeps{}, nil)
	var atts []Attempt
	r, err := c.Complete(context.Background(), Request{}, func(a Attempt) { atts = append(atts, a) })
	if err != nil || r.Content != "ok" {
		t.Fatalf("response %+v, %v", r, err)
	}
	if len(atts) != 2 || !errors.Is(atts[0].Err, ErrStreamBroken) || !strings.Contains(atts[0].Err.Error(), "overloaded") {
		t.Fatalf("attempts = %+v", atts)
	}
}

// TestMalformedChunkIsNotRetried: a chunk that is not JSON is an answer
// that is not a completion, final as for a whole response.
func TestMalformedChunkIsNotRetried(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){events(nil, "{nope"), events(nil, chunk("ok"), stopChunk, "[DONE]")}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newTestClient(t, srv, &sleeps{}, nil)
	if _, err := c.Complete(context.Background(), Request{}, nil); err == nil || len(s.requests) != 1 {
		t.Fatalf("err %v after %d requests", err, len(s.requests))
	}
}

// TestNoStream: a model configured not to stream asks for one JSON body
// and gets the same reply; its text reaches Deltas once, whole. A server
// that ignores "stream": true and answers JSON is read the same way.
func TestNoStream(t *testing.T) {
	for _, noStream := range []bool{true, false} {
		s := &script{answers: []func(http.ResponseWriter){status(200, okText)}}
		srv := httptest.NewServer(s)
		c := newTestClient(t, srv, &sleeps{}, func(o *Options) { o.NoStream = noStream })
		var seen []string
		r, err := c.Complete(context.Background(), Request{Deltas: func(text string) { seen = append(seen, text) }}, nil)
		srv.Close()
		if err != nil || r.Content != "hello" || r.Usage != (Usage{3, 1}) || fmt.Sprint(seen) != "[hello]" {
			t.Fatalf("NoStream=%v: response %+v, %v, deltas %q", noStream, r, err, seen)
		}
		_, streamed := s.requests[0].body["stream"]
		_, opts := s.requests[0].body["stream_options"]
		if streamed == noStream || opts == noStream {
			t.Fatalf("NoStream=%v: request %v", noStream, s.requests[0].body)
		}
	}
}

// TestStreamLargerThanTheLimit: a stream is bounded like a body.
func TestStreamLargerThanTheLimit(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter){events(nil, chunk(strings.Repeat("x", 300)), stopChunk, "[DONE]")}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := newTestClient(t, srv, &sleeps{}, func(o *Options) { o.MaxResponseBytes = 100 })
	_, err := c.Complete(context.Background(), Request{}, nil)
	if err == nil || !strings.Contains(err.Error(), "larger than 100 bytes") || len(s.requests) != 1 {
		t.Fatalf("err %v after %d requests", err, len(s.requests))
	}
}
