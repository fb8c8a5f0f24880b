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
	"sync"
	"syscall"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/replay"
)

func serveFlags() []cli.Flag {
	env := func(name string) []string { return []string{"PEGASUS_" + name} }
	return append(append(append(append(brokerFlags(), retentionFlags()...), publishFlags()...), clusterFlags()...),
		&cli.StringFlag{Name: "addr", Value: "127.0.0.1:7070", EnvVars: env("ADDR"), Usage: "address to listen on"},
		&cli.StringFlag{Name: "data-dir", Value: "./pegasus-data", EnvVars: env("DATA_DIR"), Usage: "directory of the event log (created 0700)"},
		&cli.StringFlag{Name: "token", EnvVars: env("TOKEN"), Usage: "bearer token required on every route but /healthz and /readyz; required to listen beyond loopback"},
		&cli.StringFlag{Name: "llm-base-url", EnvVars: env("LLM_BASE_URL"), Usage: "OpenAI-compatible API root, e.g. https://api.openai.com/v1 or http://localhost:11434/v1; empty: the built-in offline demo model"},
		&cli.StringFlag{Name: "llm-model", EnvVars: env("LLM_MODEL"), Usage: "model name"},
		&cli.StringFlag{Name: "llm-api-key", EnvVars: env("LLM_API_KEY"), Usage: "API key (never logged, never recorded)"},
		&cli.DurationFlag{Name: "llm-timeout", Value: 120 * time.Second, EnvVars: env("LLM_TIMEOUT"), Usage: "timeout of one model call attempt"},
		&cli.BoolFlag{Name: "llm-strict", EnvVars: env("LLM_STRICT"), Usage: "refuse to start when the model endpoint does not answer GET /models (default: warn)"},
		&cli.IntFlag{Name: "llm-max-attempts", Value: 4, EnvVars: env("LLM_MAX_ATTEMPTS"), Usage: "attempts per model call (retries on 429, 5xx and network errors)"},
		&cli.IntFlag{Name: "max-active-tasks", Value: 5, EnvVars: env("MAX_ACTIVE_TASKS"), Usage: "tasks reasoning or acting at once; others wait, by priority then age"},
		&cli.IntFlag{Name: "max-concurrent-llm", Value: 3, EnvVars: env("MAX_CONCURRENT_LLM"), Usage: "concurrent model calls"},
		&cli.IntFlag{Name: "max-concurrent-tools", Value: 3, EnvVars: env("MAX_CONCURRENT_TOOLS"), Usage: "concurrent tool calls"},
		&cli.DurationFlag{Name: "tool-timeout", Value: 60 * time.Second, EnvVars: env("TOOL_TIMEOUT"), Usage: "timeout of one tool call"},
		&cli.IntFlag{Name: "max-iterations", Value: 10, EnvVars: env("MAX_ITERATIONS"), Usage: "reason/act iterations before a task fails"},
		&cli.BoolFlag{Name: "no-reflection", EnvVars: env("NO_REFLECTION"), Usage: "turn post-task reflection off"},
		&cli.StringSliceFlag{Name: "schedule", Usage: "a recurring task, NAME|CRON|INPUT (repeatable), e.g. 'hourly|@hourly|what time is it?'; $PEGASUS_SCHEDULE holds one per line"},
		&cli.StringFlag{Name: "schedules-file", EnvVars: env("SCHEDULES_FILE"), Usage: `JSON file {"schedules":[{"name","cron","input","type","priority"}]}`},
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
	)
}

// config is everything serve needs, read from flags once.
type config struct {
	addr, dataDir, token, checkpointDir string
	llmBaseURL, llmModel                string
	llmKey                              llm.Secret
	llmTimeout                          time.Duration
	llmAttempts                         int
	llmStrict                           bool
	maxActive, maxLLM, maxTools         int
	toolTimeout                         time.Duration
	maxIterations                       int
	noReflection                        bool
	schedules                           []schedule
	maxBody                             int64
	shutdownTimeout                     time.Duration
	logLevel, logFormat                 string
	memoryBudget                        int64
	metricsAddr                         string
	acceptDataLoss                      bool
	// logOptions are the log's base options; tests set FS to inject I/O
	// errors (errorfs).
	logOptions eventlog.Options
	broker     brokerConfig
	retention  retentionConfig
	publish    cluster.OutboxOptions // --publish; empty URL: no fan-out
	cluster    clusterConfig         // --cluster (clusterlog.go); empty URL: the embedded log
}

func configFrom(cc *cli.Context) (*config, error) {
	c := &config{
		addr: cc.String("addr"), dataDir: cc.String("data-dir"), token: cc.String("token"),
		checkpointDir: cc.String("checkpoint-dir"),
		llmBaseURL:    cc.String("llm-base-url"), llmModel: cc.String("llm-model"), llmKey: llm.Secret(cc.String("llm-api-key")),
		llmTimeout: cc.Duration("llm-timeout"), llmAttempts: cc.Int("llm-max-attempts"), llmStrict: cc.Bool("llm-strict"),
		maxActive: cc.Int("max-active-tasks"), maxLLM: cc.Int("max-concurrent-llm"), maxTools: cc.Int("max-concurrent-tools"),
		toolTimeout: cc.Duration("tool-timeout"), maxIterations: cc.Int("max-iterations"), noReflection: cc.Bool("no-reflection"),
		maxBody: cc.Int64("max-body-bytes"), shutdownTimeout: cc.Duration("shutdown-timeout"),
		logLevel: cc.String("log-level"), logFormat: cc.String("log-format"), metricsAddr: cc.String("metrics-addr"),
		acceptDataLoss: cc.Bool("accept-data-loss"),
	}
	var err error
	if c.broker, err = brokerConfigFrom(cc); err != nil {
		return nil, err
	}
	if c.retention, err = retentionConfigFrom(cc, c.dataDir); err != nil {
		return nil, err
	}
	if c.publish, err = publishConfigFrom(cc); err != nil {
		return nil, err
	}
	if c.cluster, err = clusterConfigFrom(cc); err != nil {
		return nil, err
	}
	if cc.NArg() > 0 {
		return nil, usageError{fmt.Sprintf("serve takes no arguments (got %q)", cc.Args().First())}
	}
	mb, err := parseMemoryBudget(cc.String("memory-budget"))
	if err != nil {
		return nil, err
	}
	c.memoryBudget = mb
	for _, s := range scheduleSpecs(cc.StringSlice("schedule"), os.Getenv("PEGASUS_SCHEDULE")) {
		sc, err := parseScheduleFlag(s)
		if err != nil {
			return nil, err
		}
		c.schedules = append(c.schedules, sc)
	}
	if f := cc.String("schedules-file"); f != "" {
		ss, err := loadSchedules(f)
		if err != nil {
			return nil, err
		}
		c.schedules = append(c.schedules, ss...)
	}
	if err := checkUniqueSchedules(c.schedules); err != nil {
		return nil, err
	}
	if c.checkpointDir == "" {
		c.checkpointDir = strings.TrimRight(c.dataDir, "/") + "-checkpoints"
	}
	switch {
	case c.maxActive < 1 || c.maxLLM < 1 || c.maxTools < 1 || c.maxIterations < 1 || c.llmAttempts < 1:
		return nil, errors.New("concurrency limits, max-iterations and llm-max-attempts must be at least 1")
	case c.maxBody < 1024:
		return nil, errors.New("max-body-bytes must be at least 1024")
	case c.llmBaseURL != "" && c.llmModel == "":
		return nil, errors.New("--llm-model (PEGASUS_LLM_MODEL) is required with --llm-base-url")
	case c.llmBaseURL == "" && c.llmModel != "":
		return nil, errors.New("--llm-base-url (PEGASUS_LLM_BASE_URL) is required with --llm-model")
	}
	if err := checkToken(c.token); err != nil {
		return nil, err
	}
	if err := checkBind(c.addr, c.token); err != nil {
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
	// The first SIGINT or SIGTERM starts a graceful stop; stop() then
	// restores the default handling, so a second Ctrl-C ends the process
	// at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
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

// daemon is a running pegasusd.
type daemon struct {
	cfg    *config
	log    *slog.Logger
	agent  *agent.Agent
	events *eventlog.Log // the agent's log; the daemon opened it and the agent closes it
	server *server
	http   *http.Server
	ln     net.Listener
	cron   *cron.Cron
	web    *web            // dashboard and metrics (web.go)
	retain *retainer       // retention loop (retention.go), nil when off
	fanMu  sync.Mutex      // guards outbox
	outbox *cluster.Outbox // --publish (publish.go); nil without it, or with --cluster while another daemon publishes
	// replicated is the clustered log, leases this daemon's partition
	// leases (clusterlog.go); nil without --cluster
	replicated *cluster.ReplicatedLog
	leases     *cluster.Leases
	own        *ownership // what the agent and the broker run, and the sightings to close (clusterlog.go)
}

func openDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// MkdirAll leaves an existing directory's mode alone; the log holds
	// every input and result, so it is for the daemon's user only.
	return os.Chmod(dir, 0o700)
}

// storageLogger quiets the log's storage engine (Pebble reports every WAL
// and compaction at info) unless debug logging is on.
func storageLogger(l *slog.Logger, level string) *slog.Logger {
	if level == "debug" {
		return l.With("component", "eventlog")
	}
	return slog.New(minLevel{l.Handler(), slog.LevelWarn}).With("component", "eventlog")
}

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}
func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(as), m.min}
}
func (m minLevel) WithGroup(g string) slog.Handler { return minLevel{m.Handler.WithGroup(g), m.min} }

func newModel(cfg *config) (llm.Model, error) {
	if cfg.llmBaseURL == "" {
		return llm.Offline{}, nil
	}
	return llm.New(llm.Options{
		BaseURL: cfg.llmBaseURL, Model: cfg.llmModel, APIKey: cfg.llmKey,
		Timeout: cfg.llmTimeout, MaxAttempts: cfg.llmAttempts,
		MaxConns: cfg.maxLLM,
	})
}

// start binds the address, opens the log, starts the agent (recovery),
// the HTTP server and the schedules. It binds first, so that an address
// in use fails before anything is recovered or written to the log.
func start(ctx context.Context, cfg *config, logger *slog.Logger) (d *daemon, err error) {
	model, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	if err := probeModel(ctx, cfg, logger); err != nil {
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
	if err := openDataDir(cfg.dataDir); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	l, err := openLog(cfg, logger)
	if err != nil {
		return nil, err
	}
	own := &ownership{}
	rl, err := openCluster(ctx, cfg, l, logger)
	if err != nil {
		l.Close()
		return nil, err
	}
	defer func() {
		if err != nil && rl != nil {
			rl.Close()
		}
	}()
	a, err := agent.New(l, agent.Options{
		Model: model, MaxActiveTasks: cfg.maxActive, MaxConcurrentLLM: cfg.maxLLM, MaxConcurrentTools: cfg.maxTools,
		ToolTimeout: cfg.toolTimeout, MaxIterations: cfg.maxIterations, DisableReflection: cfg.noReflection,
		Logger: logger.With("component", "agent"), Replay: &replay.Options{MemoryBudget: cfg.memoryBudget},
		Appender: appender(rl, l), Owns: own.ownsFunc(rl),
	})
	if err != nil {
		l.Close()
		return nil, err
	}
	if err := a.Start(ctx); err != nil {
		return nil, err // Start closes the log on failure
	}
	d = &daemon{cfg: cfg, log: logger, agent: a, events: l, ln: ln, replicated: rl, own: own}
	d.server = newServer(a, l, model.Name(), logger, cfg)
	if rl != nil {
		d.server.keys = rl // one binding per key for every daemon
	}
	if err := d.startPublish(); err != nil {
		a.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	for _, start := range []func() error{
		func() error { return d.server.startBroker(l, appender(rl, l), own, rl, a.View(), cfg) },
		func() error { return d.startSightings(ctx) },
		func() error { return d.startLeases(ctx) },
	} {
		if err := start(); err != nil {
			d.server.cancelBase() // the broker's loop, if it started
			d.server.stopBroker()
			own.closeSightings()
			d.stopPublish()
			a.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	d.http = &http.Server{
		Handler:           d.startWeb(metricsLn),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      75 * time.Second, // above the longest ?wait=; SSE extends its own deadline
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return d.server.base },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	d.cron = cron.New(cron.WithParser(cronParser), cron.WithLocation(time.UTC))
	for _, s := range cfg.schedules {
		d.cron.Schedule(s.sched, d.scheduleJob(s))
	}
	d.cron.Start()
	d.retain = startRetention(ctx, cfg.retention, l, a.View().Checkpoint, logger.With("component", "retention"))
	go func() {
		if err := d.http.Serve(d.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server stopped", "err", err)
		}
	}()
	return d, nil
}

// openLog opens the event log. A damaged log is refused with the ways out;
// --accept-data-loss opens it anyway, loudly.
func openLog(cfg *config, logger *slog.Logger) (*eventlog.Log, error) {
	if cfg.acceptDataLoss {
		logger.Warn("starting with --accept-data-loss: a damaged log will be cut at its last good point and the loss recorded on $system")
	}
	o := cfg.logOptions
	o.Logger, o.AcceptDataLoss = storageLogger(logger, cfg.logLevel), cfg.acceptDataLoss
	l, err := eventlog.Open(cfg.dataDir, &o)
	if eventlog.IsCorruption(err) {
		return nil, fmt.Errorf("%w\n"+
			"ways out (docs/operations.md): stop here and inspect with `pegasus-replay -d DATA_DIR verify`; then either restore "+
			"the newest checkpoint (POST /v1/admin/checkpoint copies, --checkpoint-dir) into the data directory, or start once "+
			"with --accept-data-loss to cut the log at its last good point (what is lost is recorded, no sequence is reused)", err)
	}
	if err != nil {
		return nil, err
	}
	if loss := l.DataLoss(); loss != nil {
		logger.Warn("accepted data loss: the log was cut and the loss recorded as DATA_LOST on $system",
			"head", loss.Head, "acknowledged", loss.Acknowledged, "resumes_after", l.Head(), "file", loss.File, "offset", loss.Offset,
			"reason", loss.Reason)
	}
	return l, nil
}

// wait blocks until ctx ends (a signal) or the event log refuses writes
// (a failed commit: a full disk, an I/O error), then stops the daemon.
// After a storage failure it returns an error, so that the process exits
// non-zero and its supervisor restarts it: reopening the log is what
// recovers from the failure, and a fresh process does it from a known
// state (docs/operations.md). Readiness reports the failure meanwhile.
// stopSignals restores the default signal handling once the stop begins.
func (d *daemon) wait(ctx context.Context, stopSignals func()) error {
	var failed error
	select {
	case <-ctx.Done():
	case <-d.events.Failed():
		failed = d.events.Health()
		d.log.Error("the event log refuses writes; stopping so that a supervisor restarts pegasusd",
			"reason", storageReason(failed), "err", failed)
	case <-d.clusterFailed():
		failed = d.replicated.Err()
		d.log.Error("the local copy stopped following the cluster's stream; stopping so that a supervisor restarts pegasusd", "err", failed)
	case <-d.leasesLost():
		failed = cluster.ErrFenced
		d.log.Error("lost a partition lease (this daemon was paused or cut off); stopping so that a supervisor restarts pegasusd")
	}
	stopSignals()
	d.log.Info("stopping: draining running stages (Ctrl-C again to exit at once)", "timeout", d.cfg.shutdownTimeout)
	err := d.shutdown()
	if failed != nil {
		return errors.Join(fmt.Errorf("stopped: %s: %w", storageReason(failed), failed), err)
	}
	return err
}

func (d *daemon) scheduleJob(s schedule) cron.FuncJob {
	return func() {
		ctx, cancel := context.WithTimeout(d.server.base, 30*time.Second)
		defer cancel()
		id, err := d.agent.SubmitInput(ctx, agent.Input{Kind: fsm.ScheduleFired, Name: s.Name, Text: s.Input,
			Source: "schedule:" + s.Name, TaskType: s.Type, Priority: s.Priority})
		if err != nil {
			d.log.Warn("schedule did not fire", "schedule", s.Name, "err", err)
			return
		}
		d.log.Info("schedule fired", "schedule", s.Name, "task_id", id)
	}
}

// shutdown stops intake (readiness fails, mutations get 503, schedules
// stop), ends long-lived requests, drains the agent within the timeout and
// closes the log last.
func (d *daemon) shutdown() error {
	d.server.draining.Store(true)
	<-d.cron.Stop().Done()
	d.server.cancelBase() // ends event streams and long polls
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.shutdownTimeout)
	defer cancel()
	herr := d.http.Shutdown(ctx)
	if herr != nil {
		d.http.Close()
	}
	d.web.stop(ctx)
	d.server.stopBroker()
	d.retain.stop() // before the agent closes the log
	d.stopTaking()
	perr := d.stopPublish()
	aerr := d.agent.Stop(ctx)
	d.closeCluster()
	return errors.Join(aerr, perr)
}

func serve(ctx context.Context, stopSignals func(), cfg *config, logger *slog.Logger) error {
	d, err := start(ctx, cfg, logger)
	if err != nil {
		return err
	}
	model := d.server.model
	if cfg.llmBaseURL == "" {
		model += " (offline demo model: set PEGASUS_LLM_BASE_URL and PEGASUS_LLM_MODEL for a real one)"
	}
	abs, _ := filepath.Abs(cfg.dataDir)
	logger.Info("pegasusd listening", "url", "http://"+d.ln.Addr().String(), "data_dir", abs, "model", model,
		"auth", authNote(cfg.token))
	if err := d.wait(ctx, stopSignals); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}
