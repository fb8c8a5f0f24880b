package mcp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

// ServerConfig is one MCP server. Exactly one of Command (stdio) and URL
// (Streamable HTTP) is set.
type ServerConfig struct {
	// Name prefixes the server's tools: "<Name>__<tool>".
	Name string
	// Command, Args, Env and Dir start a stdio server. Env is added to the
	// daemon's environment; Dir "" is the daemon's working directory.
	Command string
	Args    []string
	Env     map[string]string
	Dir     string
	// URL and Headers reach a Streamable HTTP server; Headers are sent with
	// every request (an Authorization header, for example).
	URL     string
	Headers map[string]string
	// InitTimeout is this server's Options.InitTimeout; 0 is the
	// manager's.
	InitTimeout time.Duration
}

// Transport returns "stdio" or "http".
func (c ServerConfig) Transport() string {
	if c.URL != "" {
		return "http"
	}
	return "stdio"
}

// Options configure a Manager.
type Options struct {
	// Logger receives the servers' state changes and their standard error
	// (at debug level). The default value is a logger that discards.
	Logger *slog.Logger
	// InitTimeout bounds connecting to a server, its initialize handshake
	// and its first tools/list. The default value is 30s.
	InitTimeout time.Duration
	// MinBackoff is the wait before starting a server again after it went
	// down; it doubles on each failure up to MaxBackoff, and comes back to
	// MinBackoff once a server stayed ready for a minute. The default values
	// are 500ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// MaxResultBytes bounds a call's result: its text, then the data and
	// text of its parts, in order; what does not fit is cut and marked. The
	// default value is 1 MiB (an event holds at most 4 MiB by default).
	MaxResultBytes int
	// PollInterval is the wait between two tasks/get of a task whose server
	// suggests none. The default value is 1s.
	PollInterval time.Duration
	// TerminateTimeout is how long closing a stdio server waits for it to
	// exit after its standard input closed, before it is sent SIGTERM. The
	// default value is 2s.
	TerminateTimeout time.Duration
}

// EnsureDefaults fills the zero fields of o with their default values.
func (o *Options) EnsureDefaults() *Options {
	if o == nil {
		o = &Options{}
	}
	c := *o
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.InitTimeout <= 0 {
		c.InitTimeout = 30 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 500 * time.Millisecond
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(30*time.Second, c.MinBackoff)
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = 1 << 20
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.TerminateTimeout <= 0 {
		c.TerminateTimeout = 2 * time.Second
	}
	return &c
}

// The states of a server.
const (
	StateStarting = "starting" // connecting, initializing or listing its tools
	StateReady    = "ready"    // its tools can be called
	StateDown     = "down"     // not running; it is started again after a backoff
)

// ServerStatus is a server's state now.
type ServerStatus struct {
	Name      string
	Transport string // stdio or http
	State     string // StateStarting, StateReady or StateDown
	Error     string // why the server is down (or was, while it starts again)
	Tools     int
	Restarts  int       // starts after the first one
	Since     time.Time // when State began
}

var (
	// ErrServerDown is wrapped by the error of a call to a tool whose server
	// is not ready.
	ErrServerDown = errors.New("mcp: server is not ready")
	// ErrServerExited is wrapped by the error of a call during which the
	// server's session ended (a stdio server exited, a connection broke).
	// The call may or may not have run on the server.
	ErrServerExited = errors.New("mcp: server went away during the call")
	// ErrMalformedResult is wrapped by the error of a call whose answer does
	// not decode as a tool result.
	ErrMalformedResult = errors.New("mcp: malformed result")
	// ErrTask is wrapped by the error of a call whose task failed, was
	// cancelled, needs input, or is unknown to the server.
	ErrTask = errors.New("mcp: task failed")
	// ErrClosed is wrapped by the error of a call after Close.
	ErrClosed = errors.New("mcp: manager closed")
)

// Manager runs MCP servers and offers their tools. It is safe for
// concurrent use.
type Manager struct {
	opts     *Options
	servers  []*server
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closing  atomic.Bool
	stopping atomic.Bool

	mu      sync.Mutex
	changed chan struct{}
	tools   []tools.Tool
}

// Start starts a goroutine per server and returns at once: servers connect
// in the background, and a server that cannot start is retried with
// backoff (see Servers). Close stops them.
func Start(ctx context.Context, servers []ServerConfig, opts *Options) *Manager {
	ctx, cancel := context.WithCancel(ctx)
	m := &Manager{opts: opts.EnsureDefaults(), cancel: cancel, changed: make(chan struct{})}
	for _, c := range servers {
		s := &server{m: m, cfg: c, log: m.opts.Logger.With("mcp_server", c.Name),
			state: StateStarting, since: time.Now(), relist: make(chan struct{}, 1), settled: make(chan struct{})}
		s.stderr = &lineLogger{log: s.log}
		m.servers = append(m.servers, s)
	}
	for _, s := range m.servers {
		m.wg.Go(func() { s.run(ctx) })
	}
	return m
}

// Tools returns every tool of every server now: the servers in their
// configured order, each one's tools by name. A server that is down keeps
// the tools it last listed (they fail at once until it is back).
func (m *Manager) Tools() []tools.Tool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]tools.Tool(nil), m.tools...)
}

// Changed returns a channel closed when the set of tools changes.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// AwaitTool returns once the tool named name is known, if it is one of a
// server's (its name begins with "<server>__"): at once when the server
// finished its first start (it listed its tools, or it went down), else
// when it does or ctx ends. A call that a restarted daemon resumes asks
// for its tool before the server listed it again; it waits for it
// instead of failing as unknown. The error, wrapping ErrServerDown, says
// why a server that is not ready is not (nil when it is, or when no
// server has the name's prefix).
func (m *Manager) AwaitTool(ctx context.Context, name string) error {
	for _, s := range m.servers {
		if !strings.HasPrefix(name, s.cfg.Name+"__") {
			continue
		}
		select {
		case <-s.settled:
		case <-ctx.Done():
		}
		if _, err := s.current(); err != nil {
			return err
		}
	}
	return nil
}

// Servers returns each server's state, in the configured order.
func (m *Manager) Servers() []ServerStatus {
	out := make([]ServerStatus, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.status())
	}
	return out
}

// Close stops every server and waits for their loops to end. Calls in
// flight fail.
func (m *Manager) Close() error {
	m.closing.Store(true)
	m.cancel()
	m.wg.Wait()
	return nil
}

func (m *Manager) closed() bool { return m.closing.Load() }

// Stopping tells the manager that the daemon stops: from now on, a call
// that waits on a server's task and whose context ends leaves the task
// running, so that the next start polls it again, instead of sending
// tasks/cancel for it. Close implies it. Call it before the agent cancels
// its running stages at stop.
func (m *Manager) Stopping() { m.stopping.Store(true) }

// publish rebuilds the tool list from the servers' listings and closes
// Changed if it differs.
func (m *Manager) publish() {
	var all []tools.Tool
	for _, s := range m.servers {
		s.mu.Lock()
		all = append(all, s.tools...)
		s.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if sameTools(m.tools, all) {
		return
	}
	m.tools = all
	close(m.changed)
	m.changed = make(chan struct{})
}

func sameTools(a, b []tools.Tool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i].(*tool), b[i].(*tool)
		if x.name != y.name || x.description != y.description || string(x.params) != string(y.params) {
			return false
		}
	}
	return true
}

// server is one configured server and its loop.
type server struct {
	m      *Manager
	cfg    ServerConfig
	log    *slog.Logger
	relist chan struct{} // a tools/list_changed arrived
	stderr *lineLogger   // a stdio server's standard error
	// settled is closed when the server's first start ended: it listed its
	// tools, or it went down (AwaitTool).
	settled     chan struct{}
	settledOnce sync.Once

	calls, errs atomic.Int64

	mu       sync.Mutex
	state    string
	err      string
	since    time.Time
	restarts int
	sess     *session // nil unless ready
	tools    []tools.Tool
	pid      int // the stdio process, for tests
}

// session is one connection to a server.
type session struct {
	cs     *mcp.ClientSession
	tasks  *taskState
	done   chan struct{}
	direct *stdioConn // a stdio server's connection, which sends plain calls itself (direct.go)
}

func (s *server) status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServerStatus{Name: s.cfg.Name, Transport: s.cfg.Transport(), State: s.state, Error: s.err,
		Tools: len(s.tools), Restarts: s.restarts, Since: s.since}
}

func (s *server) setState(state, errText string) {
	s.mu.Lock()
	changed := s.state != state
	s.state, s.err = state, errText
	if changed {
		s.since = time.Now()
	}
	s.mu.Unlock()
	if changed {
		s.log.Info("mcp server "+state, "error", errText)
	}
	if state != StateStarting {
		s.settledOnce.Do(func() { close(s.settled) })
	}
}

// current returns the ready session, or an error wrapping ErrServerDown.
func (s *server) current() (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		why := ""
		if s.err != "" {
			why = ": " + s.err
		}
		return nil, fmt.Errorf("%w: server %q is %s%s", ErrServerDown, s.cfg.Name, s.state, why)
	}
	return s.sess, nil
}

func (s *server) run(ctx context.Context) {
	backoff := s.m.opts.MinBackoff
	for first := true; ; first = false {
		if !first {
			s.mu.Lock()
			s.restarts++
			s.mu.Unlock()
		}
		s.setState(StateStarting, s.status().Error)
		readyAt, err := s.serve(ctx)
		if ctx.Err() != nil {
			s.setState(StateDown, "closed")
			return
		}
		why := err.Error()
		if last := s.stderr.lastLine(); last != "" {
			why += " (its last line on standard error: " + last + ")"
		}
		s.setState(StateDown, why)
		if !readyAt.IsZero() && time.Since(readyAt) >= time.Minute {
			backoff = s.m.opts.MinBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			s.setState(StateDown, "closed")
			return
		case <-t.C:
		}
		backoff = min(2*backoff, s.m.opts.MaxBackoff)
	}
}

// serve runs one session: it connects, lists the tools, and relists them on
// list_changed until the session ends. It returns when the server became
// ready (zero if it never did) and why the session ended.
func (s *server) serve(ctx context.Context) (readyAt time.Time, err error) {
	opts := s.m.opts
	initTimeout := cmp.Or(s.cfg.InitTimeout, opts.InitTimeout)
	initCtx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	sess, err := s.connect(initCtx)
	if err != nil {
		if initCtx.Err() != nil && ctx.Err() == nil {
			return time.Time{}, fmt.Errorf("no answer to initialize within %s", initTimeout)
		}
		return time.Time{}, fmt.Errorf("connect: %v", err)
	}
	defer func() {
		s.mu.Lock()
		s.sess = nil
		s.mu.Unlock()
		_ = sess.cs.Close()
	}()
	go func() {
		_ = sess.cs.Wait()
		close(sess.done)
	}()
	if err := s.list(initCtx, sess); err != nil {
		return time.Time{}, err
	}
	cancel()
	s.mu.Lock()
	s.sess = sess
	s.mu.Unlock()
	s.setState(StateReady, "")
	readyAt = time.Now()
	for {
		select {
		case <-ctx.Done():
			return readyAt, ctx.Err()
		case <-sess.done:
			if s.cfg.Transport() == "stdio" {
				return readyAt, errors.New("the server exited")
			}
			return readyAt, errors.New("the session ended")
		case <-s.relist:
			lctx, cancel := context.WithTimeout(ctx, initTimeout)
			err := s.list(lctx, sess)
			cancel()
			if err != nil {
				return readyAt, err
			}
		}
	}
}

// list lists the session's tools and publishes them.
func (s *server) list(ctx context.Context, sess *session) error {
	var listed []*mcp.Tool
	for t, err := range sess.cs.Tools(ctx, nil) {
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("no answer to tools/list within %s", cmp.Or(s.cfg.InitTimeout, s.m.opts.InitTimeout))
			}
			return fmt.Errorf("tools/list: %v", err)
		}
		listed = append(listed, t)
	}
	sort.Slice(listed, func(i, j int) bool { return listed[i].Name < listed[j].Name })
	made := make([]tools.Tool, 0, len(listed))
	used := map[string]bool{}
	for _, t := range listed {
		tl, err := newTool(s, t, used)
		if err != nil {
			s.log.Warn("mcp tool left out", "tool", t.Name, "error", err)
			continue
		}
		made = append(made, tl)
	}
	s.mu.Lock()
	s.tools = made
	s.mu.Unlock()
	s.m.publish()
	return nil
}

// connect starts a session over the configured transport.
func (s *server) connect(ctx context.Context) (*session, error) {
	sess := &session{done: make(chan struct{}), tasks: &taskState{pending: map[any]string{}}}
	var transport mcp.Transport
	var stdio *stdioTransport
	caps := &mcp.ClientCapabilities{}
	caps.AddExtension(taskExtension, map[string]any{})
	if s.cfg.URL != "" {
		transport = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, MaxRetries: -1,
			HTTPClient: &http.Client{Transport: taskHTTP{sess.tasks, headerTransport{s.cfg.Headers, http.DefaultTransport}}}}
	} else {
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Dir = s.cfg.Dir
		cmd.Env = os.Environ()
		for k, v := range s.cfg.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		s.stderr.reset()
		cmd.Stderr = s.stderr
		stdio = &stdioTransport{cmd: cmd, terminate: s.m.opts.TerminateTimeout}
		transport = &taskTransport{inner: stdio, st: sess.tasks}
		defer func() {
			if cmd.Process != nil {
				s.mu.Lock()
				s.pid = cmd.Process.Pid
				s.mu.Unlock()
			}
		}()
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "pegasus", Version: "1"}, &mcp.ClientOptions{
		Logger:       s.log,
		Capabilities: caps,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.relist <- struct{}{}:
			default:
			}
		},
	})
	registerTaskMethods(client)
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, err
	}
	sess.cs = cs
	if stdio != nil {
		sess.direct = stdio.conn
	}
	return sess, nil
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.headers {
			r.Header.Set(k, v)
		}
	}
	return h.next.RoundTrip(r)
}

// lineLogger logs a stdio server's standard error, line by line, and
// keeps the last line, which often says why a server exited.
type lineLogger struct {
	log  *slog.Logger
	mu   sync.Mutex
	buf  []byte
	last string
}

func (l *lineLogger) reset() {
	l.mu.Lock()
	l.buf, l.last = nil, ""
	l.mu.Unlock()
}

func (l *lineLogger) lastLine() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.last
	if len(l.buf) > 0 {
		last = string(l.buf)
	}
	return cut(strings.TrimSpace(last), 200)
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := string(l.buf[:i])
		l.log.Debug("mcp server stderr", "line", line)
		if strings.TrimSpace(line) != "" {
			l.last = line
		}
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 {
		l.log.Debug("mcp server stderr", "line", string(l.buf))
		l.buf = nil
	}
	return len(p), nil
}
