package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/api"
)

// Options configure a Client. The zero value is ready to use: New fills
// in the defaults (EnsureDefaults).
type Options struct {
	// Token is sent as "Authorization: Bearer" on every request (the
	// daemon's --token), unless AgentToken or AdminToken applies. The
	// default value is "" (no Authorization header).
	Token string
	// AgentToken is sent instead of Token on the worker routes of
	// /api/v1 (register, poll, progress, complete, fail): the daemon's
	// --agent-token. The default value is Token.
	AgentToken string
	// AdminToken is sent instead of Token on the admin routes of /api/v1
	// (agents, drain, stats, DLQ, requeue): the daemon's --admin-token.
	// The default value is Token.
	AdminToken string
	// AgentID is the X-Agent-ID of every /api/v1 request: a worker's id,
	// or whoever creates and inspects broker tasks. The default value is
	// "go-client".
	AgentID string
	// HTTPClient sends the requests. Its Timeout, if any, should exceed
	// the longest long poll (60 s); event streams ignore it. The default
	// value is a client without a timeout over http.DefaultTransport.
	HTTPClient *http.Client
	// MaxAttempts bounds the attempts of one retryable request (and the
	// consecutive reconnections of an event stream); 1 disables retries
	// and the automatic idempotency keys. The default value is 5.
	MaxAttempts int
	// MinBackoff is the wait before the first retry; each retry doubles
	// it, up to MaxBackoff, with a random jitter of up to half of it. A
	// Retry-After header of the server is honoured instead, when longer.
	// The default value is 100ms.
	MinBackoff time.Duration
	// MaxBackoff bounds the wait between two attempts. The default value
	// is 5s.
	MaxBackoff time.Duration
}

// EnsureDefaults fills in the default of every field left zero and
// returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.AgentToken == "" {
		o.AgentToken = o.Token
	}
	if o.AdminToken == "" {
		o.AdminToken = o.Token
	}
	if o.AgentID == "" {
		o.AgentID = "go-client"
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 5 * time.Second
	}
	return o
}

// Validate refuses options no request could work with.
func (o *Options) Validate() error {
	switch {
	case o.MaxAttempts < 1:
		return fmt.Errorf("client: MaxAttempts %d: want at least 1", o.MaxAttempts)
	case o.MinBackoff < 0 || o.MaxBackoff < o.MinBackoff:
		return fmt.Errorf("client: backoff from %s to %s: want 0 <= MinBackoff <= MaxBackoff", o.MinBackoff, o.MaxBackoff)
	case strings.TrimSpace(o.AgentID) != o.AgentID:
		return fmt.Errorf("client: AgentID %q: no white space around it", o.AgentID)
	}
	return nil
}

// Client talks to a pegasusd over HTTP. It is safe for concurrent use.
type Client struct {
	base *url.URL
	opts Options
}

// New returns a client of the daemon at server: a URL
// (http://127.0.0.1:7070) or HOST:PORT. opts may be nil.
func New(server string, opts *Options) (*Client, error) {
	raw := server
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("client: server %q: want a URL like http://127.0.0.1:7070 (or 127.0.0.1:7070)", raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	var o Options
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Client{base: u, opts: o}, nil
}

// BaseURL is the daemon's address, as New normalised it.
func (c *Client) BaseURL() string { return c.base.String() }

// AgentID is the X-Agent-ID of the client's /api/v1 requests.
func (c *Client) AgentID() string { return c.opts.AgentID }

// auth says which token a route takes.
type auth int

const (
	authToken auth = iota
	authAgent
	authAdmin
)

// request is one call of the API.
type request struct {
	method, path string
	query        url.Values
	body         any // marshalled to JSON; nil: no body
	auth         auth
	// idempotent: sending it twice does what sending it once does
	// (GET, PUT, a worker's report, which the broker answers as the
	// first when repeated), so it is retried.
	idempotent bool
	key        string // Idempotency-Key; a keyed POST is retried
}

// CallOption changes one request.
type CallOption func(*request)

// WithIdempotencyKey sends key as the request's Idempotency-Key: a retry,
// by this client or after a crash of the caller, then does the request
// once (docs/api.md#retries-idempotency-key). Submit, CreateDispatch and
// Reply take it; without it, and with retries enabled, they send a
// random key of their own, so that their own retries are safe.
func WithIdempotencyKey(key string) CallOption { return func(r *request) { r.key = key } }

// keyed sends a POST that takes an Idempotency-Key: the caller's
// (opts), or else, when it may be retried, a random one, as Stripe's
// clients do.
func (c *Client) keyed(ctx context.Context, r request, opts []CallOption, out any) error {
	for _, o := range opts {
		o(&r)
	}
	if r.key == "" && c.opts.MaxAttempts > 1 {
		r.key = crand.Text()
	}
	_, err := c.do(ctx, r, out)
	return err
}

// Do sends one request to path (with query) and decodes a 2xx answer into
// out (nil: ignore it; a *json.RawMessage: the answer's bytes as they
// came), for a route this package has no method for. in, if not nil, is
// the JSON body. A GET, PUT or DELETE is retried as the typed methods'
// requests are; a POST only with WithIdempotencyKey.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, in, out any, opts ...CallOption) error {
	r := request{method: method, path: path, query: query, body: in}
	if strings.HasPrefix(path, "/api/") {
		r.auth = authAgent
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
		r.idempotent = true
	}
	for _, o := range opts {
		o(&r)
	}
	_, err := c.do(ctx, r, out)
	return err
}

// do sends r, retrying it when it may be, and decodes a 2xx answer into
// out. It returns the answer's header.
func (c *Client) do(ctx context.Context, r request, out any) (http.Header, error) {
	var body []byte
	if r.body != nil {
		var err error
		if body, err = json.Marshal(r.body); err != nil {
			return nil, fmt.Errorf("client: encoding the request: %w", err)
		}
	}
	retryable := r.idempotent || r.key != ""
	for attempt := 1; ; attempt++ {
		hdr, wait, err := c.once(ctx, r, body, out)
		if err == nil {
			return hdr, nil
		}
		if wait < 0 || !retryable || attempt >= c.opts.MaxAttempts || ctx.Err() != nil {
			return nil, err
		}
		if cerr := sleep(ctx, max(wait, c.backoff(attempt))); cerr != nil {
			return nil, fmt.Errorf("%w; the last attempt: %w", cerr, err)
		}
	}
}

// once sends r a single time. wait is negative when the error may not be
// retried, else at least the server's Retry-After.
func (c *Client) once(ctx context.Context, r request, body []byte, out any) (http.Header, time.Duration, error) {
	u, err := c.url(r.path, r.query)
	if err != nil {
		return nil, -1, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), rd)
	if err != nil {
		return nil, -1, fmt.Errorf("client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.headers(req, r)
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, -1, ctx.Err()
		}
		return nil, 0, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		if ctx.Err() != nil {
			return nil, -1, ctx.Err()
		}
		return nil, 0, fmt.Errorf("%w: reading the answer: %w", ErrUnreachable, err)
	}
	if resp.StatusCode/100 != 2 {
		e := errorOf(resp.StatusCode, data)
		switch resp.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return nil, retryAfter(resp.Header), e
		}
		return nil, -1, e
	}
	switch o := out.(type) {
	case nil:
	case *json.RawMessage:
		*o = data
	default:
		if err := json.Unmarshal(data, out); err != nil {
			return nil, -1, fmt.Errorf("client: %s %s: decoding the answer: %w", r.method, r.path, err)
		}
	}
	return resp.Header, 0, nil
}

// url is the address of path (escaped already: pathf) with query. The
// path is appended as it is, never cleaned, so that a task id such as
// ".." names no other route.
func (c *Client) url(path string, query url.Values) (*url.URL, error) {
	u, err := url.Parse(c.base.String() + path)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	u.RawQuery = query.Encode()
	return u, nil
}

// headers sets the authentication, the agent id and the key of r.
func (c *Client) headers(req *http.Request, r request) {
	token := c.opts.Token
	switch r.auth {
	case authAgent:
		token = c.opts.AgentToken
	case authAdmin:
		token = c.opts.AdminToken
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if strings.HasPrefix(r.path, "/api/") {
		req.Header.Set(api.HeaderAgentID, c.opts.AgentID)
	}
	if r.key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, r.key)
	}
}

// errorOf reads an error answer: the API's envelope, or only the status
// when the body is something else (a proxy's page).
func errorOf(status int, data []byte) *Error {
	e := &Error{Status: status}
	var env api.ErrorBody
	if json.Unmarshal(data, &env) == nil {
		e.Code, e.Message, e.Items = env.Error.Code, env.Error.Message, env.Error.Items
	}
	return e
}

// retryAfter reads Retry-After (seconds or an HTTP date); 0 when absent.
func retryAfter(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// backoff is the wait before attempt+1: MinBackoff doubled per attempt,
// at most MaxBackoff, of which the upper half is random (jitter, so that
// many clients do not retry in step).
func (c *Client) backoff(attempt int) time.Duration {
	return backoff(c.opts.MinBackoff, c.opts.MaxBackoff, attempt)
}

func backoff(lo, hi time.Duration, attempt int) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// sleep waits d, or until ctx ends (its error).
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

// pathf builds a path from a format whose arguments are path segments
// (escaped).
func pathf(format string, segs ...string) string {
	args := make([]any, len(segs))
	for i, s := range segs {
		args[i] = url.PathEscape(s)
	}
	return fmt.Sprintf(format, args...)
}
