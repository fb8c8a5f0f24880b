package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/cluster"
	cfgfile "github.com/pegasus-engine/pegasus/config"
	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/server"
)

// The engine's catalog also reports its MCP servers (GET /v1/tools'
// servers, /readyz's details).
var _ server.MCPServers = (*engine.Catalog)(nil)

func serveFlags() []cli.Flag {
	env := func(name string) []string { return []string{"PEGASUS_" + name} }
	return append(append(append(append(brokerFlags(), retentionFlags()...), publishFlags()...), append(clusterFlags(), tracesFlags()...)...),
		&cli.StringFlag{Name: "config", EnvVars: env("CONFIG"), Usage: "configuration `FILE` (YAML or JSON): models, task types, MCP servers, worker tools, schedules (docs/config.md); flags and PEGASUS_* variables override its default model"},
		&cli.StringFlag{Name: "addr", Value: "127.0.0.1:7070", EnvVars: env("ADDR"), Usage: "address to listen on"},
		&cli.StringFlag{Name: "data-dir", Value: "./pegasus-data", EnvVars: env("DATA_DIR"), Usage: "directory of the event log (created 0700)"},
		&cli.StringFlag{Name: "token", EnvVars: env("TOKEN"), Usage: "bearer token required on every route but /healthz and /readyz; required to listen beyond loopback"},
		&cli.StringFlag{Name: "llm-base-url", EnvVars: env("LLM_BASE_URL"), Usage: "OpenAI-compatible API root, e.g. https://api.openai.com/v1 or http://localhost:11434/v1; empty: the built-in offline demo model"},
		&cli.StringFlag{Name: "llm-model", EnvVars: env("LLM_MODEL"), Usage: "model name"},
		&cli.StringFlag{Name: "llm-api-key", EnvVars: env("LLM_API_KEY"), Usage: "API key (never logged, never recorded)"},
		&cli.DurationFlag{Name: "llm-timeout", Value: 120 * time.Second, EnvVars: env("LLM_TIMEOUT"), Usage: "timeout of one model call attempt"},
		&cli.BoolFlag{Name: "llm-strict", EnvVars: env("LLM_STRICT"), Usage: "refuse to start when the model endpoint does not answer GET /models (default: warn)"},
		&cli.BoolFlag{Name: "llm-stream", Value: true, EnvVars: env("LLM_STREAM"), Usage: "stream the model's replies (--llm-stream=false for a server that cannot)"},
		&cli.IntFlag{Name: "llm-max-attempts", Value: 4, EnvVars: env("LLM_MAX_ATTEMPTS"), Usage: "attempts per model call (retries on 429, 5xx and network errors)"},
		&cli.IntFlag{Name: "max-active-tasks", Value: 5, EnvVars: env("MAX_ACTIVE_TASKS"), Usage: "tasks reasoning or acting at once; others wait, by priority then age"},
		&cli.IntFlag{Name: "max-concurrent-llm", Value: 3, EnvVars: env("MAX_CONCURRENT_LLM"), Usage: "concurrent model calls"},
		&cli.IntFlag{Name: "max-concurrent-tools", Value: 3, EnvVars: env("MAX_CONCURRENT_TOOLS"), Usage: "concurrent tool calls"},
		&cli.DurationFlag{Name: "tool-timeout", Value: 60 * time.Second, EnvVars: env("TOOL_TIMEOUT"), Usage: "timeout of one tool call"},
		&cli.IntFlag{Name: "max-iterations", Value: 10, EnvVars: env("MAX_ITERATIONS"), Usage: "reason/act iterations before a task fails"},
		&cli.BoolFlag{Name: "no-reflection", EnvVars: env("NO_REFLECTION"), Usage: "turn post-task reflection off"},
		&cli.StringSliceFlag{Name: "schedule", Usage: "a recurring task, NAME|CRON|INPUT (repeatable), e.g. 'hourly|@hourly|what time is it?'; $PEGASUS_SCHEDULE holds one per line"},
		&cli.StringFlag{Name: "schedules-file", EnvVars: env("SCHEDULES_FILE"), Usage: `deprecated: JSON file {"schedules":[{"name","cron","input","type","priority"}]}; put the schedules in --config`},
		&cli.Int64Flag{Name: "max-body-bytes", Value: 1 << 20, EnvVars: env("MAX_BODY_BYTES"), Usage: "largest request body accepted"},
		&cli.StringFlag{Name: "memory-budget", Value: memoryBudgetFlag, EnvVars: env("MEMORY_BUDGET"), Usage: "memory the task views may hold (e.g. 256MiB, 2GiB); see docs/operations.md"},
		&cli.DurationFlag{Name: "shutdown-timeout", Value: 30 * time.Second, EnvVars: env("SHUTDOWN_TIMEOUT"), Usage: "how long running stages may take to finish at stop"},
		&cli.StringFlag{Name: "checkpoint-dir", EnvVars: env("CHECKPOINT_DIR"), Usage: "where POST /v1/admin/checkpoint writes copies (default: DATA_DIR-checkpoints)"},
		&cli.BoolFlag{Name: "accept-data-loss", EnvVars: env("ACCEPT_DATA_LOSS"), Usage: "start even though acknowledged events are missing or a WAL is corrupt: " +
			"cut the log at the last good point, record the loss as a DATA_LOST event on $system, never reuse a sequence (docs/operations.md); " +
			"use once, after restoring a checkpoint was not possible"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: env("LOG_LEVEL"), Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", EnvVars: env("LOG_FORMAT"), Usage: "text or json (default: text on a terminal, json otherwise)"},
		&cli.StringFlag{Name: "metrics-addr", EnvVars: env("METRICS_ADDR"), Usage: "serve /metrics on this loopback address, without the token, instead of on --addr behind it"},
		// For benchmarks (pegasus-bench -tasks -cpuprofile): not an
		// operator's flag, so hidden from --help.
		&cli.StringFlag{Name: "cpuprofile", Hidden: true, Usage: "write a CPU profile of the whole run to this file"},
		&cli.StringFlag{Name: "spike-trace-dir", EnvVars: env("SPIKE_TRACE_DIR"), Usage: "keep the last seconds of a runtime/trace in memory and write them " +
			"to a file here when an append takes 50ms or more (docs/operations.md)"},
	)
}

// config is everything serve needs, read from flags once: the engine's
// options, the server's, and what stays with the process (the listener,
// the model endpoint, logging, the stop's timeout).
type config struct {
	addr                 string
	llmBaseURL, llmModel string
	llmKey               llm.Secret
	llmTimeout           time.Duration
	llmAttempts          int
	llmNoStream          bool
	llmStrict            bool
	llmHints             llm.ProbeHints // where the default model is configured, for the probe's messages
	shutdownTimeout      time.Duration
	logLevel, logFormat  string
	metricsAddr          string
	engine               engine.Options
	server               server.Options
	// warnings are logged once the logger exists (a deprecated flag).
	// --config's file is engine.Config, nil without one.
	warnings []string
}

func configFrom(cc *cli.Context) (*config, error) {
	c := &config{
		addr:       cc.String("addr"),
		llmBaseURL: cc.String("llm-base-url"), llmModel: cc.String("llm-model"), llmKey: llm.Secret(cc.String("llm-api-key")),
		llmTimeout: cc.Duration("llm-timeout"), llmAttempts: cc.Int("llm-max-attempts"), llmNoStream: !cc.Bool("llm-stream"), llmStrict: cc.Bool("llm-strict"),
		shutdownTimeout: cc.Duration("shutdown-timeout"),
		logLevel:        cc.String("log-level"), logFormat: cc.String("log-format"), metricsAddr: cc.String("metrics-addr"),
		engine: engine.Options{DataDir: cc.String("data-dir"),
			MaxActiveTasks: cc.Int("max-active-tasks"), MaxConcurrentLLM: cc.Int("max-concurrent-llm"), MaxConcurrentTools: cc.Int("max-concurrent-tools"),
			ToolTimeout: cc.Duration("tool-timeout"), MaxIterations: cc.Int("max-iterations"), DisableReflection: cc.Bool("no-reflection"),
			ShutdownTimeout: cc.Duration("shutdown-timeout"), SpikeTraceDir: cc.String("spike-trace-dir"), Log: eventlog.Options{AcceptDataLoss: cc.Bool("accept-data-loss")}},
		server: server.Options{Token: cc.String("token"), CheckpointDir: cc.String("checkpoint-dir"), MaxBodyBytes: cc.Int64("max-body-bytes")},
	}
	e := &c.engine
	if err := brokerConfigFrom(cc, e, &c.server); err != nil {
		return nil, err
	}
	var err error
	if e.Retention, err = retentionConfigFrom(cc, e.DataDir); err != nil {
		return nil, err
	}
	if e.Publish, err = publishConfigFrom(cc); err != nil {
		return nil, err
	}
	if err := clusterConfigFrom(cc, e); err != nil {
		return nil, err
	}
	if e.Traces, err = tracesConfigFrom(cc); err != nil {
		return nil, err
	}
	if cc.NArg() > 0 {
		return nil, usageError{fmt.Sprintf("serve takes no arguments (got %q)", cc.Args().First())}
	}
	mb, err := parseMemoryBudget(cc.String("memory-budget"))
	if err != nil {
		return nil, err
	}
	e.MemoryBudget = mb
	for _, s := range scheduleSpecs(cc.StringSlice("schedule"), os.Getenv("PEGASUS_SCHEDULE")) {
		sc, err := engine.ParseSchedule(s)
		if err != nil {
			return nil, err
		}
		e.Schedules = append(e.Schedules, sc)
	}
	if err := c.loadConfig(cc); err != nil {
		return nil, err
	}
	if f := cc.String("schedules-file"); f != "" {
		if c.engine.Config != nil && len(c.engine.Config.Schedules) > 0 {
			return nil, usageError{fmt.Sprintf("--schedules-file %s and the schedules of --config %s: give the schedules in one place, the configuration file", f, c.engine.Config.Path)}
		}
		c.warnings = append(c.warnings, "--schedules-file (PEGASUS_SCHEDULES_FILE) is deprecated and will be removed: move its schedules into the configuration file's schedules (--config, docs/config.md)")
		ss, err := engine.LoadSchedules(f)
		if err != nil {
			return nil, err
		}
		e.Schedules = append(e.Schedules, ss...)
	}
	if c.server.CheckpointDir == "" {
		c.server.CheckpointDir = strings.TrimRight(e.DataDir, "/") + "-checkpoints"
	}
	switch {
	case e.MaxActiveTasks < 1 || e.MaxConcurrentLLM < 1 || e.MaxConcurrentTools < 1 || e.MaxIterations < 1 || c.llmAttempts < 1:
		return nil, errors.New("concurrency limits, max-iterations and llm-max-attempts must be at least 1")
	case c.server.MaxBodyBytes < 1024:
		return nil, errors.New("max-body-bytes must be at least 1024")
	case c.llmBaseURL != "" && c.llmModel == "":
		return nil, errors.New("--llm-model (PEGASUS_LLM_MODEL) is required with --llm-base-url")
	case c.llmBaseURL == "" && c.llmModel != "":
		return nil, errors.New("--llm-base-url (PEGASUS_LLM_BASE_URL) is required with --llm-model")
	}
	if err := checkToken(c.server.Token); err != nil {
		return nil, err
	}
	if err := checkBearerTokens(c.server); err != nil {
		return nil, err
	}
	if err := checkBind(c.addr, c.server.Token); err != nil {
		return nil, err
	}
	// The engine's own check: two schedules of one name.
	if err := c.engine.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// checkBind refuses to listen beyond loopback without a token: the API
// runs tasks and tools, so an open port would hand them to anyone.
func checkBind(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", addr, err)
	}
	if token != "" || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %q without --token (PEGASUS_TOKEN): only loopback addresses may be open", addr)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// defaultLogFormat resolves an unset --log-format: text for a person at a
// terminal, json for a log collector everywhere else.
func defaultLogFormat(format string, w io.Writer) string {
	if format != "" {
		return format
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return "text"
	}
	return "json"
}

// authNote is the start-up line's "auth" attribute: without a token the
// daemon only listens on loopback, where any local process (any user's)
// may submit tasks and so run tools.
func authNote(token string) string {
	if token != "" {
		return "bearer token"
	}
	return "none: any local process may submit tasks and run tools; set --token (PEGASUS_TOKEN) to require one"
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func serveAction(cc *cli.Context, stderr io.Writer) error {
	cfg, err := configFrom(cc)
	if err != nil {
		return err
	}
	logger, err := newLogger(stderr, cfg.logLevel, defaultLogFormat(cfg.logFormat, stderr))
	if err != nil {
		return err
	}
	for _, w := range cfg.warnings {
		logger.Warn(w)
	}
	// The first SIGINT or SIGTERM starts a graceful stop; stop() then
	// restores the default handling, so a second Ctrl-C ends the process
	// at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tuneGC(os.Getenv, logger)
	if f := cc.String("cpuprofile"); f != "" {
		end, err := startCPUProfile(f)
		if err != nil {
			return err
		}
		defer end()
	}
	return serve(ctx, stop, cfg, logger)
}

// startCPUProfile profiles the process into file until end is called.
func startCPUProfile(file string) (end func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// daemon is a running pegasusd: an engine, the server in front of it,
// and the listeners.
type daemon struct {
	cfg    *config
	log    *slog.Logger
	engine *engine.Engine
	server *server.Server
	http   *http.Server
	ln     net.Listener
	// metricsLn and metricsSrv serve /metrics on --metrics-addr; nil
	// without it.
	metricsLn  net.Listener
	metricsSrv *http.Server
}

// llmOptions is the model endpoint of the flags; an empty BaseURL: the
// offline demo model.
func (cfg *config) llmOptions() llm.Options {
	return llm.Options{BaseURL: cfg.llmBaseURL, Model: cfg.llmModel, APIKey: cfg.llmKey,
		Timeout: cfg.llmTimeout, MaxAttempts: cfg.llmAttempts, MaxConns: cfg.engine.MaxConcurrentLLM, NoStream: cfg.llmNoStream}
}

// loadConfig reads --config (PEGASUS_CONFIG), if given: a bad file is a
// usage error. The --llm-* flags, where given, override its default
// model; without one, they define it.
func (c *config) loadConfig(cc *cli.Context) error {
	path := cc.String("config")
	if path == "" {
		return nil
	}
	f, err := cfgfile.Load(path, os.Getenv)
	if err != nil {
		return cliconv.Kind(cliconv.ErrUsage, err)
	}
	c.engine.Config = f
	m := f.DefaultModel()
	if m == nil {
		return nil
	}
	set := func(flag string, apply func()) {
		if !cc.IsSet(flag) {
			apply()
		}
	}
	set("llm-base-url", func() { c.llmBaseURL = m.BaseURL })
	set("llm-model", func() { c.llmModel = m.Model })
	set("llm-api-key", func() { c.llmKey = m.APIKey })
	if m.Timeout > 0 {
		set("llm-timeout", func() { c.llmTimeout = m.Timeout })
	}
	if m.MaxAttempts > 0 {
		set("llm-max-attempts", func() { c.llmAttempts = m.MaxAttempts })
	}
	set("llm-stream", func() { c.llmNoStream = m.NoStream })
	// The probe's messages name where each part is set.
	c.llmHints = engine.ModelHints(m)
	for _, o := range []struct {
		flag      string
		hint      *string
		flagsHint string
	}{
		{"llm-base-url", &c.llmHints.BaseURL, llm.FlagHints.BaseURL},
		{"llm-model", &c.llmHints.Model, llm.FlagHints.Model},
		{"llm-api-key", &c.llmHints.APIKey, llm.FlagHints.APIKey},
	} {
		if cc.IsSet(o.flag) {
			*o.hint = o.flagsHint
		}
	}
	return nil
}

func newModel(cfg *config) (llm.Model, error) {
	if cfg.llmBaseURL == "" {
		return llm.Offline{}, nil
	}
	return llm.New(cfg.llmOptions())
}

// listenMetrics binds --metrics-addr, which must be a loopback address:
// the separate listener has no token.
func listenMetrics(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: %w", addr, err)
	}
	if !isLoopback(host) {
		return nil, fmt.Errorf("--metrics-addr %q: only a loopback address may serve /metrics without the token", addr)
	}
	return net.Listen("tcp", addr)
}

// start binds the address, starts the engine (the log, recovery, the
// broker, the cluster's parts, metrics, schedules, retention) and the
// HTTP server in front of it. It binds first, so that an address in use
// fails before anything is recovered or written to the log.
func start(ctx context.Context, cfg *config, logger *slog.Logger) (d *daemon, err error) {
	model, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	hints := cfg.llmHints
	if hints == (llm.ProbeHints{}) {
		hints = llm.FlagHints
	}
	probe, err := engine.CheckModel(ctx, cfg.llmOptions(), hints, cfg.llmStrict, logger)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, cliconv.ListenError(cfg.addr, err)
	}
	metricsLn, err := listenMetrics(cfg.metricsAddr)
	if err != nil {
		ln.Close()
		return nil, err
	}
	defer func() {
		if err != nil {
			ln.Close()
			if metricsLn != nil {
				metricsLn.Close()
			}
		}
	}()
	eo := cfg.engine
	eo.Model, eo.Logger, eo.ModelProbe = model, logger, probe
	if cfg.llmBaseURL != "" {
		eo.LLM = cfg.llmOptions()
	}
	if cfg.logLevel == "debug" {
		eo.Log.Logger = logger.With("component", "eventlog") // else the engine quiets it
	}
	e, err := engine.Start(ctx, &eo)
	if err != nil {
		return nil, err
	}
	so := cfg.server
	host, _, _ := strings.Cut(cfg.addr, ":")
	so.OpenAdmin, so.NoMetricsRoute, so.Logger = isLoopback(host), metricsLn != nil, logger
	srv := server.New(server.Deps{Agent: e.Agent(), Store: e.Log(), View: e.View(), History: e.History(), Keys: e.Keys(),
		Broker: e.Broker(), Metrics: e.Metrics(), Model: e.ModelName(), Base: e.Context(), Catalog: e.Catalog()}, &so)
	d = &daemon{cfg: cfg, log: logger, engine: e, server: srv, ln: ln, metricsLn: metricsLn}
	if metricsLn != nil {
		d.metricsSrv = &http.Server{Handler: e.Metrics().Handler(), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
		go func() {
			if err := d.metricsSrv.Serve(metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("metrics server stopped", "err", err)
			}
		}()
		logger.Info("metrics listening", "url", "http://"+metricsLn.Addr().String()+"/metrics")
	}
	d.http = &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      75 * time.Second, // above the longest ?wait=; SSE extends its own deadline
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return e.Context() },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := d.http.Serve(d.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server stopped", "err", err)
		}
	}()
	return d, nil
}

// wait blocks until ctx ends (a signal) or the engine fails (the event log
// refuses writes: a full disk, an I/O error; the copy stopped following
// the cluster; a lease was lost), then stops the daemon. After a failure
// it returns an error, so that the process exits non-zero and its
// supervisor restarts it: reopening the log is what recovers from the
// failure, and a fresh process does it from a known state
// (docs/operations.md). Readiness reports the failure meanwhile.
// stopSignals restores the default signal handling once the stop begins.
func (d *daemon) wait(ctx context.Context, stopSignals func()) error {
	var failed error
	select {
	case <-ctx.Done():
	case <-d.engine.Failed():
		failed = d.engine.Err()
		switch {
		case errors.Is(failed, cluster.ErrFenced):
			d.log.Error("lost a partition lease (this daemon was paused or cut off); stopping so that a supervisor restarts pegasusd")
		case d.engine.Log().Health() != nil:
			d.log.Error("the event log refuses writes; stopping so that a supervisor restarts pegasusd",
				"reason", server.StorageReason(failed), "err", failed)
		default:
			d.log.Error("the local copy stopped following the cluster's stream; stopping so that a supervisor restarts pegasusd", "err", failed)
		}
	}
	stopSignals()
	d.log.Info("stopping: draining running stages (Ctrl-C again to exit at once)", "timeout", d.cfg.shutdownTimeout)
	err := d.shutdown()
	if failed != nil {
		return errors.Join(stoppedError(failed), err)
	}
	return err
}

// stoppedError is why the daemon stopped on its own: the storage's reason
// when it has one (a full disk, corruption), else the error alone (a lost
// lease, a copy that stopped following the cluster).
func stoppedError(failed error) error {
	if reason := server.StorageReason(failed); reason != "" {
		return fmt.Errorf("stopped: %s: %w", reason, failed)
	}
	return fmt.Errorf("stopped: %w", failed)
}

// shutdown stops intake (readiness fails, mutations get 503, schedules
// stop), ends long-lived requests, shuts the HTTP server down, then stops
// the engine: it drains the agent within the timeout and closes the log
// last.
func (d *daemon) shutdown() error {
	d.server.Drain()
	d.engine.StopSchedules()
	d.engine.Cancel() // ends event streams and long polls
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.shutdownTimeout)
	defer cancel()
	if err := d.http.Shutdown(ctx); err != nil {
		d.http.Close()
	}
	if d.metricsSrv != nil {
		if err := d.metricsSrv.Shutdown(ctx); err != nil {
			d.metricsSrv.Close()
		}
	}
	return d.engine.Stop(ctx)
}

func serve(ctx context.Context, stopSignals func(), cfg *config, logger *slog.Logger) error {
	d, err := start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	model := d.engine.ModelName()
	if cfg.llmBaseURL == "" {
		model += " (offline demo model: set PEGASUS_LLM_BASE_URL and PEGASUS_LLM_MODEL for a real one)"
	}
	abs, _ := filepath.Abs(cfg.engine.DataDir)
	logger.Info("pegasusd listening", "url", "http://"+d.ln.Addr().String(), "data_dir", abs, "model", model,
		"auth", authNote(cfg.server.Token))
	d.reloadLimitsOnHUP(ctx)
	if err := d.wait(ctx, stopSignals); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}
