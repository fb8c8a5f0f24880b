package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// ErrNoChoices is returned when the server answers 200 without a choice.
var ErrNoChoices = errors.New("llm: response has no choices")

// APIError is a non-2xx answer from the server.
type APIError struct {
	Status  int    // HTTP status code
	Message string // the server's error message, scrubbed of the API key
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("llm: server answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("llm: server answered %d: %s", e.Status, e.Message)
}

// Retryable reports whether the status is worth retrying: 408, 429 and
// every 5xx.
func (e *APIError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status == http.StatusRequestTimeout || e.Status >= 500
}

// Options configure a Client.
type Options struct {
	// BaseURL is the root of the OpenAI-compatible API, including its
	// version path: "https://api.openai.com/v1", "http://localhost:11434/v1"
	// (Ollama), "http://localhost:8080/v1" (llama.cpp server). Requests go
	// to BaseURL + "/chat/completions". Required.
	BaseURL string
	// Model is the model name sent with every request. Required.
	Model string
	// APIKey is sent as "Authorization: Bearer <key>" when not empty.
	// Local servers usually need none. The default value is empty.
	APIKey Secret
	// HTTPClient sends the requests. The default value is a client with no
	// overall timeout (Timeout below bounds each attempt) whose transport
	// keeps MaxConns idle connections to the server, so that every call
	// that may run at once finds a warm connection instead of opening one
	// (a TLS handshake per call against a hosted model).
	HTTPClient *http.Client
	// MaxConns is the number of calls that may run at once, the size of
	// the default HTTPClient's connection pool. The daemon sets it to its
	// model-call concurrency. Ignored when HTTPClient is set. The default
	// value is 16.
	MaxConns int
	// Timeout bounds one attempt, from sending the request to reading the
	// whole response. The default value is 120s.
	Timeout time.Duration
	// MaxAttempts is the number of attempts per Complete call, counting the
	// first one. The default value is 4.
	MaxAttempts int
	// InitialBackoff is the wait before the second attempt; it doubles for
	// each further attempt up to MaxBackoff, with jitter. The default value
	// is 500ms.
	InitialBackoff time.Duration
	// MaxBackoff caps one wait, including a server's Retry-After. The
	// default value is 20s.
	MaxBackoff time.Duration
	// MaxResponseBytes bounds the size of a response body. The default value
	// is 16 MiB.
	MaxResponseBytes int64
	// Temperature is sent when not nil. The default value is nil (the
	// server's default).
	Temperature *float64
	// NoStream asks for the whole reply in one JSON body instead of a
	// stream of Server-Sent Events, for a server that cannot stream. The
	// default value (false) streams: "stream": true with
	// "stream_options": {"include_usage": true}, the text given to
	// Request.Deltas as it arrives. Either way Complete returns the same
	// assembled Response.
	NoStream bool
	// Sleep waits between attempts; tests replace it. It returns early with
	// ctx's error. The default value waits on a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now reads the clock for latencies; tests replace it. The default
	// value is time.Now.
	Now func() time.Time
	// Jitter returns a random duration in [0, n); tests replace it. The
	// default value is math/rand/v2's Int64N.
	Jitter func(n time.Duration) time.Duration
}

// EnsureDefaults fills in every unset field with its default value.
func (o *Options) EnsureDefaults() {
	if o.MaxConns <= 0 {
		o.MaxConns = 16
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Transport: pooledTransport(o.MaxConns)}
	}
	if o.Timeout <= 0 {
		o.Timeout = 120 * time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 4
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = 500 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 20 * time.Second
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = 16 << 20
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Jitter == nil {
		o.Jitter = func(n time.Duration) time.Duration {
			if n <= 0 {
				return 0
			}
			return time.Duration(rand.Int64N(int64(n)))
		}
	}
}

// Validate reports a missing or malformed required field.
func (o *Options) Validate() error {
	if o.BaseURL == "" {
		return errors.New("llm: base URL is required")
	}
	if !strings.HasPrefix(o.BaseURL, "http://") && !strings.HasPrefix(o.BaseURL, "https://") {
		return fmt.Errorf("llm: base URL %q must start with http:// or https://", o.BaseURL)
	}
	if o.Model == "" {
		return errors.New("llm: model is required")
	}
	return nil
}

// pooledTransport is http.DefaultTransport's configuration with an idle
// pool sized to n connections per host. The default transport keeps two,
// so with more calls in flight most of them would open a new connection
// and close it again after the response.
func pooledTransport(n int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = max(t.MaxIdleConns, n)
	t.MaxIdleConnsPerHost = n
	return t
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Client is an OpenAI-compatible Chat Completions client. It is safe for
// concurrent use.
type Client struct {
	opts     Options
	endpoint string
}

// New returns a client for opts.
func New(opts Options) (*Client, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Client{opts: opts, endpoint: strings.TrimRight(opts.BaseURL, "/") + "/chat/completions"}, nil
}

// Name returns the configured model name.
func (c *Client) Name() string { return c.opts.Model }

// Complete sends req, retrying 429, 5xx and transport errors up to
// MaxAttempts times. A 4xx other than 408 and 429 is final at once: a
// bad request does not get better by repeating it.
func (c *Client) Complete(ctx context.Context, req Request, report func(Attempt)) (Response, error) {
	body, err := json.Marshal(c.wireRequest(req))
	if err != nil {
		return Response{}, fmt.Errorf("llm: encode request: %w", err)
	}
	var lastErr error
	for n := 1; n <= c.opts.MaxAttempts; n++ {
		resp, status, retryAfter, err := c.attempt(ctx, body, req.Deltas)
		att := Attempt{Number: n, Model: c.opts.Model, Status: status, Latency: resp.latency, Err: err, RetryAfter: retryAfter}
		if err == nil {
			r := resp.Response
			att.Response = &r
			if report != nil {
				report(att)
			}
			return r, nil
		}
		lastErr = err
		retry := n < c.opts.MaxAttempts && ctx.Err() == nil && retryable(err)
		att.WillRetry = retry
		if report != nil {
			report(att)
		}
		if !retry {
			break
		}
		if err := c.opts.Sleep(ctx, c.backoff(n, retryAfter)); err != nil {
			return Response{}, err
		}
	}
	if ctx.Err() != nil {
		return Response{}, ctx.Err()
	}
	return Response{}, lastErr
}

// backoff is the wait after failed attempt n: the server's Retry-After when
// it sent one, else InitialBackoff*2^(n-1) with "equal jitter" (half fixed,
// half random) so that many tasks throttled together do not retry in step.
// Both are capped at MaxBackoff.
func (c *Client) backoff(n int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, c.opts.MaxBackoff)
	}
	d := c.opts.InitialBackoff
	for i := 1; i < n && d < c.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.opts.MaxBackoff)
	return d/2 + c.opts.Jitter(d/2+1)
}

func retryable(err error) bool {
	var api *APIError
	if errors.As(err, &api) {
		return api.Retryable()
	}
	var dec *decodeError
	if errors.As(err, &dec) {
		return false
	}
	// Transport errors (refused, reset, attempt timeout) are worth another try.
	return true
}

// decodeError is a 2xx response that is not a chat completion: retrying
// would get the same answer.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return "llm: decode response: " + e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

type attemptResult struct {
	Response
	latency time.Duration
}

func (c *Client) attempt(ctx context.Context, body []byte, deltas func(string)) (attemptResult, int, time.Duration, error) {
	actx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	start := c.opts.Now()
	var res attemptResult
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return res, 0, 0, fmt.Errorf("llm: %s", c.opts.APIKey.scrub(err.Error()))
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.opts.NoStream {
		hreq.Header.Set("Accept", "application/json")
	} else {
		hreq.Header.Set("Accept", "text/event-stream, application/json")
	}
	if c.opts.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.opts.APIKey.Reveal())
	}
	hresp, err := c.opts.HTTPClient.Do(hreq)
	if err != nil {
		res.latency = c.opts.Now().Sub(start)
		// url.Error texts name the URL, never headers, but scrub anyway.
		return res, 0, 0, errors.New("llm: " + c.opts.APIKey.scrub(err.Error()))
	}
	defer hresp.Body.Close()
	if hresp.StatusCode >= 200 && hresp.StatusCode <= 299 && isEventStream(hresp.Header.Get("Content-Type")) {
		r, err := c.readStream(actx, hresp.Body, deltas)
		res.latency = c.opts.Now().Sub(start)
		res.Response = r
		return res, hresp.StatusCode, 0, err
	}
	data, err := io.ReadAll(io.LimitReader(hresp.Body, c.opts.MaxResponseBytes+1))
	res.latency = c.opts.Now().Sub(start)
	if err != nil {
		return res, hresp.StatusCode, 0, errors.New("llm: read response: " + c.opts.APIKey.scrub(err.Error()))
	}
	if int64(len(data)) > c.opts.MaxResponseBytes {
		return res, hresp.StatusCode, 0, &decodeError{fmt.Errorf("body larger than %d bytes", c.opts.MaxResponseBytes)}
	}
	if hresp.StatusCode < 200 || hresp.StatusCode > 299 {
		return res, hresp.StatusCode, parseRetryAfter(hresp.Header.Get("Retry-After")),
			&APIError{Status: hresp.StatusCode, Message: c.opts.APIKey.scrub(errorMessage(data))}
	}
	r, err := decodeResponse(data)
	if err != nil {
		if msg := c.opts.APIKey.scrub(err.Error()); msg != err.Error() {
			err = errors.New(msg)
		}
		return res, hresp.StatusCode, 0, &decodeError{err}
	}
	res.Response = r
	if deltas != nil && r.Content != "" {
		deltas(r.Content) // a server that does not stream: the whole text at once
	}
	return res, hresp.StatusCode, 0, nil
}

// parseRetryAfter reads a Retry-After header given in seconds; the HTTP-date
// form is rare for model servers and is ignored (the usual backoff applies).
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	return 0
}

// errorMessage extracts the message of an OpenAI-style error body
// ({"error": {"message": ...}} or {"error": "..."}), else a bounded prefix
// of the body.
func errorMessage(data []byte) string {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &env) == nil && len(env.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(env.Error, &obj) == nil && obj.Message != "" {
			return obj.Message
		}
		var s string
		if json.Unmarshal(env.Error, &s) == nil && s != "" {
			return s
		}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}

// ---- wire format (OpenAI Chat Completions)

type wireRequest struct {
	Model         string             `json:"model"`
	Messages      []wireMessage      `json:"messages"`
	Tools         []wireTool         `json:"tools,omitempty"`
	Temperature   *float64           `json:"temperature,omitempty"`
	MaxTokens     int                `json:"max_tokens,omitempty"`
	Stream        bool               `json:"stream,omitempty"`
	StreamOptions *wireStreamOptions `json:"stream_options,omitempty"`
}

type wireStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireMessage struct {
	Role string `json:"role"`
	// Content is a pointer so that an assistant message carrying only tool
	// calls sends "content": null, as the protocol expects.
	Content    *string        `json:"content"`
	Name       string         `json:"name,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name string `json:"name"`
	// Arguments is a JSON string holding a JSON object. A few servers send
	// the object itself; decodeResponse accepts both.
	Arguments json.RawMessage `json:"arguments"`
}

type wireTool struct {
	Type     string          `json:"type"`
	Function wireFunctionDef `json:"function"`
}

type wireFunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

type wireResponse struct {
	Model   string       `json:"model"`
	Choices []wireChoice `json:"choices"`
	Usage   wireUsage    `json:"usage"`
}

type wireChoice struct {
	Message      wireReply `json:"message"`
	FinishReason string    `json:"finish_reason"`
}

type wireReply struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	ToolCalls []wireToolCall `json:"tool_calls"`
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

var emptyObjectSchema = json.RawMessage(`{"type":"object","properties":{}}`)

func (c *Client) wireRequest(req Request) wireRequest {
	w := wireRequest{Model: c.opts.Model, Temperature: c.opts.Temperature, MaxTokens: req.MaxTokens,
		Messages: make([]wireMessage, 0, len(req.Messages))}
	if !c.opts.NoStream {
		w.Stream, w.StreamOptions = true, &wireStreamOptions{IncludeUsage: true}
	}
	for _, m := range req.Messages {
		wm := wireMessage{Role: m.Role, Name: m.Name, ToolCallID: m.ToolCallID}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			content := m.Content
			wm.Content = &content
		}
		for _, tc := range m.ToolCalls {
			args := tc.Arguments
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			quoted, _ := json.Marshal(args)
			wm.ToolCalls = append(wm.ToolCalls, wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: quoted}})
		}
		w.Messages = append(w.Messages, wm)
	}
	for _, t := range req.Tools {
		params := t.Parameters
		if len(params) == 0 {
			params = emptyObjectSchema
		}
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireFunctionDef{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	return w
}

func decodeResponse(data []byte) (Response, error) {
	var w wireResponse
	if err := json.Unmarshal(data, &w); err != nil {
		return Response{}, err
	}
	return w.response()
}

// response is the Response of a decoded (or, for a stream, assembled)
// completion.
func (w *wireResponse) response() (Response, error) {
	if len(w.Choices) == 0 {
		return Response{}, ErrNoChoices
	}
	ch := w.Choices[0]
	r := Response{
		Model:        w.Model,
		FinishReason: ch.FinishReason,
		Usage:        Usage{PromptTokens: w.Usage.PromptTokens, CompletionTokens: w.Usage.CompletionTokens},
	}
	if ch.Message.Content != nil {
		r.Content = *ch.Message.Content
	}
	for i, tc := range ch.Message.ToolCalls {
		if tc.Function.Name == "" {
			return Response{}, fmt.Errorf("tool call %d has no function name", i)
		}
		id := tc.ID
		if id == "" { // some local servers omit ids; the conversation needs one
			id = fmt.Sprintf("call_%d", i)
		}
		r.ToolCalls = append(r.ToolCalls, fsm.ToolCall{ID: id, Name: tc.Function.Name, Arguments: argumentsText(tc.Function.Arguments)})
	}
	return r, nil
}

// argumentsText turns the arguments field into the JSON object text: a JSON
// string is unquoted, an object is kept as it is, null becomes "{}".
func argumentsText(raw json.RawMessage) string {
	if s := argumentsPiece(raw); strings.TrimSpace(s) != "" {
		return s
	}
	return "{}"
}
