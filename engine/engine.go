package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/broker"
	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/metrics"
	"github.com/pegasus-engine/pegasus/replay"
)

// Engine is a started Pegasus engine: the event log, the agent and its
// fold, the broker, the metrics, retention, the schedules and, with
// Options.Cluster and Options.Publish, the cluster's parts.
type Engine struct {
	opts   Options
	log    *slog.Logger
	agent  *agent.Agent
	events *eventlog.Log // the agent's log; Start opened it and the agent closes it
	model  string

	// base is the context of the broker's loop, the partitions' resumes,
	// the schedules' submissions and a server's requests; Cancel ends it.
	base       context.Context
	cancelBase context.CancelFunc

	broker   *broker.Broker
	brokerWG sync.WaitGroup

	metrics     *metrics.Metrics
	stopMetrics context.CancelFunc
	metricsDone chan struct{}

	cron   *cron.Cron
	retain *retainer // nil when retention is off

	fanMu  sync.Mutex      // guards outbox
	outbox *cluster.Outbox // Publish (publish.go); nil without it, or under Cluster while another engine publishes
	traces *traceExporter  // Traces (traces.go); nil without it
	// replicated is the clustered log, leases this engine's partition
	// leases (clusterlog.go); nil without Cluster.
	replicated *cluster.ReplicatedLog
	leases     *cluster.Leases
	own        *ownership // what the agent and the broker run, and the sightings to close (clusterlog.go)

	storage  *storageMetrics   // the storage engine's events and the task path's stages (storage.go)
	appender eventlog.Appender // what writes go through, timed by storage

	setup   *setup         // the configuration's models, MCP servers, worker tools and task types (configure.go)
	probeWG sync.WaitGroup // the models' probes at start

	failed   chan struct{} // closed on the first failure (Failed)
	failure  error
	stopped  chan struct{} // closed by Stop: the failure watch ends
	stopOnce sync.Once
}

// Start opens the log in opts.DataDir (nil opts: the defaults), recovers
// the agent, and starts the fan-out, the broker, the cluster's parts, the
// metrics, the schedules and retention, in that order. On an error it
// stops what it started and closes the log.
func Start(ctx context.Context, opts *Options) (e *Engine, err error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if err := defaultFromConfig(&o); err != nil {
		return nil, err
	}
	o.EnsureDefaults()
	if o.Config != nil && !o.configMerged {
		o.Schedules, o.configMerged = append(slices.Clip(o.Schedules), configSchedules(o.Config)...), true
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	logger := o.Logger
	if err := openDataDir(o.DataDir); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	sm := newStorageMetrics()
	sm.spikes = startSpikeTrace(o.SpikeTraceDir, logger.With("component", "trace"))
	defer func() {
		if err != nil {
			sm.stop()
		}
	}()
	o.Log.Events = sm.events()
	l, err := openLog(&o, logger)
	if err != nil {
		return nil, err
	}
	own := &ownership{}
	rl, err := openCluster(ctx, &o, l, logger)
	if err != nil {
		l.Close()
		return nil, err
	}
	defer func() {
		if err != nil && rl != nil {
			rl.Close()
		}
	}()
	set, err := configure(&o, logger)
	if err != nil {
		l.Close()
		return nil, err
	}
	ao := agent.Options{
		MaxActiveTasks: o.MaxActiveTasks, MaxConcurrentLLM: o.MaxConcurrentLLM, MaxConcurrentTools: o.MaxConcurrentTools,
		ToolTimeout: o.ToolTimeout, MaxIterations: o.MaxIterations, DisableReflection: o.DisableReflection,
		Logger: logger.With("component", "agent"), Replay: &replay.Options{MemoryBudget: o.MemoryBudget},
		Appender: sm.timed(appender(rl, l)), Owns: own.ownsFunc(rl),
	}
	set.agentOptions(&ao)
	limitOptions(o.Config, &ao)
	defer func() {
		if err != nil {
			set.delegate.set(nil) // a waiting delegation ends
			set.close()
		}
	}()
	a, err := agent.New(l, ao)
	if err != nil {
		l.Close()
		return nil, err
	}
	if err := a.Start(ctx); err != nil {
		return nil, withWaysOut(err, false) // Start closes the log on failure
	}
	sm.view.Store(a.View())
	e = &Engine{opts: o, log: logger, agent: a, events: l, model: o.Model.Name(), replicated: rl, own: own, setup: set, storage: sm, appender: ao.Appender,
		failed: make(chan struct{}), stopped: make(chan struct{})}
	e.base, e.cancelBase = context.WithCancel(context.Background())
	if err := e.startPublish(); err != nil {
		a.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	for _, start := range []func() error{
		e.startBroker,
		func() error { return e.startSightings(ctx) },
		func() error { return e.startLeases(ctx) },
	} {
		if err := start(); err != nil {
			e.cancelBase() // the broker's loop, if it started
			e.brokerWG.Wait()
			own.closeSightings()
			e.stopPublish()
			a.Stop(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	set.delegate.set(e.broker)
	e.startMetrics()
	if set.mcp != nil {
		e.metrics.Registry().MustRegister(set.mcp.Collector())
	}
	if err := e.startTraces(); err != nil {
		e.log.Error("the live trace export did not start", "err", err)
	}
	e.startProbes()
	if set.hash != "" {
		logger.Info("configuration", "file", o.Config.Path, "hash", set.hash, "models", len(o.Config.Models),
			"task_types", len(o.Config.TaskTypes), "mcp_servers", len(o.Config.MCPServers), "tools", len(o.Config.Tools),
			"schedules", len(o.Config.Schedules))
	}
	e.cron = cron.New(cron.WithParser(cronParser), cron.WithLocation(time.UTC))
	for _, s := range o.Schedules {
		e.cron.Schedule(s.sched, cron.FuncJob(func() { e.Fire(s) }))
	}
	e.cron.Start()
	e.retain = startRetention(ctx, o.Retention, l, a.View().Checkpoint, logger.With("component", "retention"))
	go e.watch()
	return e, nil
}

// Agent is the engine's agent: intake, task control, live task state.
func (e *Engine) Agent() *agent.Agent { return e.agent }

// Log is the event log (under Cluster, this node's copy): every read
// goes to it.
func (e *Engine) Log() *eventlog.Log { return e.events }

// Appender is what writes go through: the replicated log under Cluster,
// else the log itself.
func (e *Engine) Appender() eventlog.Appender { return e.appender }

// Keys binds Idempotency-Keys: the log itself, or under Cluster the
// replicated log's bucket, one binding per key for every engine.
func (e *Engine) Keys() eventlog.KeyReserver {
	if e.replicated != nil {
		return e.replicated
	}
	return e.events
}

// View is the agent's folded read model of the log.
func (e *Engine) View() *replay.View { return e.agent.View() }

// History reads the log for the per-task queries (state at a bound, why).
func (e *Engine) History() replay.Reader { return replay.FromLog(e.events) }

// Broker is the Dispatch broker.
func (e *Engine) Broker() *broker.Broker { return e.broker }

// Metrics is the engine's Prometheus metrics: its Handler serves
// /metrics, InstrumentHTTP counts a handler's requests.
func (e *Engine) Metrics() *metrics.Metrics { return e.metrics }

// ModelName is the name of the agent's model.
func (e *Engine) ModelName() string { return e.model }

// Context ends when the engine stops taking work (Cancel): a server's
// requests run under it, so that event streams and long polls end then.
func (e *Engine) Context() context.Context { return e.base }

// Failed is closed when the engine can no longer serve and must be
// restarted: the log refuses writes (a full disk, an I/O error), the local
// copy stopped following the cluster's stream, or a partition's lease was
// lost (this engine was paused or cut off). Err says which.
func (e *Engine) Failed() <-chan struct{} { return e.failed }

// Err is why Failed closed, or nil.
func (e *Engine) Err() error {
	select {
	case <-e.failed:
		return e.failure
	default:
		return nil
	}
}

// watch closes failed on the first failure, until Stop.
func (e *Engine) watch() {
	var err error
	select {
	case <-e.stopped:
		return
	case <-e.events.Failed():
		err = e.events.Health()
	case <-e.clusterFailed():
		err = e.replicated.Err()
	case <-e.leasesLost():
		err = cluster.ErrFenced
	}
	e.failure = err
	close(e.failed)
}

// Fire runs schedule s once, now, as its cron does at each tick.
func (e *Engine) Fire(s Schedule) {
	ctx, cancel := context.WithTimeout(e.base, 30*time.Second)
	defer cancel()
	id, err := e.agent.SubmitInput(ctx, agent.Input{Kind: fsm.ScheduleFired, Name: s.Name, Text: s.Input,
		Source: "schedule:" + s.Name, TaskType: s.Type, Priority: s.Priority,
		ConcurrencyKey: s.ConcurrencyKey})
	if err != nil {
		e.log.Warn("schedule did not fire", "schedule", s.Name, "err", err)
		return
	}
	e.log.Info("schedule fired", "schedule", s.Name, "task_id", id)
}

// StopSchedules stops the schedules and waits for a firing one: the first
// step of a stop, once a server in front refuses new work.
func (e *Engine) StopSchedules() { <-e.cron.Stop().Done() }

// Cancel ends Context(): event streams and long polls of a server built on
// it, the broker's loop and the partitions' resumes. Stop follows.
func (e *Engine) Cancel() { e.cancelBase() }

// Stop stops the engine in order: the schedules and the base context (if
// StopSchedules and Cancel did not already), the metrics, the broker,
// retention; the leases stop taking and the fan-out stops; the agent
// drains its running stages within ctx and closes the log; last the
// cluster's leases are given back and its follower stops.
func (e *Engine) Stop(ctx context.Context) error {
	e.stopOnce.Do(func() { close(e.stopped) })
	e.StopSchedules()
	e.cancelBase()
	e.stopMetrics()
	<-e.metricsDone
	e.brokerWG.Wait()
	e.probeWG.Wait()
	e.retain.stop() // before the agent closes the log
	defer e.storage.stop()
	e.stopTaking()
	perr := e.stopPublish()
	e.stopTraces()
	e.setup.stopping() // before the agent cancels its running calls
	aerr := e.agent.Stop(ctx)
	merr := e.setup.close() // after the agent: its running MCP calls ended with it
	e.closeCluster()
	return errors.Join(aerr, perr, merr)
}

// startBroker starts the broker's loop over the log (writing through the
// appender) and the agent's folded view of it; it stops with the base
// context. Under Cluster with partitions, it assigns and decides only the
// tasks of the partitions this engine holds, and shares its workers'
// requests with the other engines (clusterlog.go).
func (e *Engine) startBroker() error {
	o, rl := e.opts, e.replicated
	b, err := broker.New(e.events, broker.FromView(e.agent.View()), broker.Options{
		CheckInterval: o.Broker.CheckInterval, WorkerTTL: o.Broker.WorkerTTL, Logger: e.log.With("component", "broker"),
		Appender: e.Appender(), Owns: e.own.ownsFunc(rl), Share: e.own.shareFunc(rl),
		AgentTaskTypes: e.agent.TaskTypes(),
	})
	if err != nil {
		return err
	}
	e.broker = b
	if o.Broker.AgentWorker {
		// Registered before a server serves: a client sees worker
		// "pegasus" at once.
		if err := b.RegisterAgentWorker(e.base, o.MaxActiveTasks); err != nil {
			return err
		}
	}
	e.brokerWG.Add(1)
	go func() {
		defer e.brokerWG.Done()
		if err := b.Run(e.base); err != nil && e.base.Err() == nil {
			e.log.Error("broker stopped", "err", err)
		}
	}()
	if o.Broker.AgentWorker {
		e.brokerWG.Add(1)
		go func() {
			defer e.brokerWG.Done()
			if err := b.RunAgentWorker(e.base, o.MaxActiveTasks); err != nil && e.base.Err() == nil {
				e.log.Error("the built-in agent stopped working for the broker", "err", err)
			}
		}()
	}
	return nil
}

// startMetrics starts the metrics' subscription to the log.
func (e *Engine) startMetrics() {
	o := metrics.Options{GoCollectors: true}
	if rl := e.replicated; rl != nil {
		o.ClusterCommits = func() (uint64, uint64, uint64, uint64) {
			s := rl.CommitStats()
			return s.Appends, s.Batches, s.Refused, s.Messages
		}
	}
	m := metrics.New(e.agent, e.events, o)
	e.storage.register(m.Registry())
	ctx, cancel := context.WithCancel(context.Background())
	e.metrics, e.stopMetrics, e.metricsDone = m, cancel, make(chan struct{})
	go func() {
		defer close(e.metricsDone)
		if err := m.Run(ctx, e.agent.Recovery().Head+1); err != nil {
			e.log.Warn("metrics stopped reading the log", "err", err)
		}
	}()
}

func openDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// MkdirAll leaves an existing directory's mode alone; the log holds
	// every input and result, so it is for the daemon's user only.
	return os.Chmod(dir, 0o700)
}

// openLog opens the event log. A damaged log is refused with the ways out;
// AcceptDataLoss opens it anyway, loudly.
func openLog(o *Options, logger *slog.Logger) (*eventlog.Log, error) {
	lo := o.Log
	// With --cluster the directory holds a copy of the stream, which is
	// the durable log: the copy commits without an fsync and reads a lost
	// tail again from the stream at start (docs/cluster.md).
	lo.Unsynced = o.Cluster.URL != ""
	if lo.AcceptDataLoss {
		logger.Warn("starting with --accept-data-loss: a damaged log will be cut at its last good point and the loss recorded on $system")
	}
	l, err := eventlog.Open(o.DataDir, &lo)
	if err != nil {
		return nil, withWaysOut(err, true)
	}
	if loss := l.DataLoss(); loss != nil {
		logger.Warn("accepted data loss: the log was cut and the loss recorded as DATA_LOST on $system",
			"head", loss.Head, "acknowledged", loss.Acknowledged, "resumes_after", l.Head(), "file", loss.File, "offset", loss.Offset,
			"reason", loss.Reason)
	}
	return l, nil
}

// withWaysOut adds to a corruption found at start what the operator can
// do. Damage the log's Open finds at its end can be cut (canCut); damage
// the recovery fold reads across (records missing below the head) cannot.
func withWaysOut(err error, canCut bool) error {
	if !eventlog.IsCorruption(err) {
		return err
	}
	const inspect = "ways out (docs/operations.md): stop here and inspect with `pegasus-replay -d DATA_DIR verify`; then "
	const restore = "restore the newest checkpoint (POST /v1/admin/checkpoint copies, --checkpoint-dir) into the data directory"
	if !canCut {
		return fmt.Errorf("%w\n"+inspect+restore, err)
	}
	return fmt.Errorf("%w\n"+inspect+"either "+restore+", or start once with --accept-data-loss to cut the log at its last "+
		"good point (what is lost is recorded, no sequence is reused)", err)
}
