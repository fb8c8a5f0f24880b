package metrics

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/watermark"
	"github.com/pegasus-engine/pegasus/replay"
)

// OtherLabel is the label value that counts data-derived values beyond
// MaxLabelValues distinct ones.
const OtherLabel = "(other)"

// MaxLabelValues bounds the distinct values of each data-derived label.
const MaxLabelValues = 64

// Options configure Metrics.
type Options struct {
	// Now is the clock of ages (the oldest queued task) and of the commit
	// latency. The default value is time.Now.
	Now func() time.Time
	// GoCollectors adds the Go runtime and process collectors. The default
	// value is false (tests leave them out; the daemon turns them on).
	GoCollectors bool
	// ClusterCommits, with --cluster, reports what the partitions'
	// committers did (cluster.CommitStats): appends, batches published,
	// batches JetStream refused, messages stored. The default value is
	// nil: no such series.
	ClusterCommits func() (appends, batches, refused, messages uint64)
}

// Metrics is the registry of one daemon.
type Metrics struct {
	a   *agent.Agent
	l   *eventlog.Log // a's log
	now func() time.Time
	reg *prometheus.Registry

	events        *prometheus.CounterVec
	commits       prometheus.Histogram
	commitLatency prometheus.Histogram
	modelCalls    *prometheus.CounterVec
	modelLatency  *prometheus.HistogramVec
	modelRetries  prometheus.Counter
	tokens        *prometheus.CounterVec
	toolCalls     *prometheus.CounterVec
	toolDuration  *prometheus.HistogramVec
	taskDuration  *prometheus.HistogramVec
	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	broker        map[string]prometheus.Counter // by DISPATCH_* event type
	archived      *prometheus.CounterVec        // retention: tasks and events archived

	mu     sync.Mutex
	bounds map[string]map[string]bool // label name -> values seen
	seen   watermark.Mark             // the last sequence Run observed
}

// New returns the metrics of the daemon running a over the log l; a must
// be started.
func New(a *agent.Agent, l *eventlog.Log, o Options) *Metrics {
	if o.Now == nil {
		o.Now = time.Now
	}
	m := &Metrics{a: a, l: l, now: o.Now, reg: prometheus.NewRegistry(), bounds: map[string]map[string]bool{}}
	latency := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pegasus_events_appended_total",
		Help: "Events committed to the log since the daemon started, by event type."}, []string{"type"})
	m.commits = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pegasus_eventlog_commit_events",
		Help:    "Events per synced commit group (one Pebble batch, one fsync).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}})
	m.commitLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pegasus_eventlog_commit_latency_seconds",
		Help:    "From the moment a commit group took its timestamp to its delivery to subscribers: batch, synced write, publication.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}})
	m.modelCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pegasus_model_calls_total",
		Help: "Model call attempts recorded (MODEL_CALLED), by purpose (reason, reflect) and outcome (ok, error)."},
		[]string{"purpose", "outcome"})
	m.modelLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pegasus_model_call_duration_seconds",
		Help: "Latency of model call attempts, by purpose.", Buckets: latency}, []string{"purpose"})
	m.modelRetries = prometheus.NewCounter(prometheus.CounterOpts{Name: "pegasus_model_retries_total",
		Help: "Model call attempts after the first of a call (attempt > 1)."})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pegasus_model_tokens_total",
		Help: "Tokens used by model calls, by kind (prompt, completion)."}, []string{"kind"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pegasus_tool_calls_total",
		Help: "Tool calls finished, by tool and outcome (ok, error)."}, []string{"tool", "outcome"})
	m.toolDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pegasus_tool_call_duration_seconds",
		Help: "Duration of tool calls, by tool.", Buckets: latency}, []string{"tool"})
	m.taskDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pegasus_task_duration_seconds",
		Help:    "From a task's creating input to its end, by outcome (completed, failed), for tasks that ended since the daemon started.",
		Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}}, []string{"outcome"})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pegasus_http_requests_total",
		Help: "HTTP requests answered, by route pattern and status code."}, []string{"route", "code"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pegasus_http_request_duration_seconds",
		Help: "Time to answer HTTP requests (event streams: their whole life), by route pattern.", Buckets: latency},
		[]string{"route"})
	m.broker = map[string]prometheus.Counter{}
	for _, c := range brokerCounters {
		m.broker[string(c.event)] = prometheus.NewCounter(prometheus.CounterOpts{Name: c.name, Help: c.help})
		m.reg.MustRegister(m.broker[string(c.event)])
	}
	m.archived = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pegasus_retention_archived_total",
		Help: "Tasks and events retention archived out of the live log since the start (EVENTS_ARCHIVED), by what."}, []string{"what"})
	for _, what := range archivedWhat {
		m.archived.WithLabelValues(what) // exposed at 0 before the first run, so rate() sees it start
	}
	m.reg.MustRegister(m.archived)
	if f := o.ClusterCommits; f != nil {
		for i, c := range []struct{ name, help string }{
			{"pegasus_cluster_appends_total", "Appends this daemon stored through its partitions' committers (--cluster)."},
			{"pegasus_cluster_batches_total", "Atomic batches this daemon's committers published (--cluster)."},
			{"pegasus_cluster_batches_refused_total", "Batches JetStream refused: another daemon moved the partition, a new owner, or a busy check (--cluster)."},
			{"pegasus_cluster_messages_total", "Messages in the batches this daemon's committers stored (--cluster)."},
		} {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, func() float64 {
				a, b, r, n := f()
				return float64([]uint64{a, b, r, n}[i])
			}))
		}
	}
	m.reg.MustRegister(m.events, m.commits, m.commitLatency, m.modelCalls, m.modelLatency, m.modelRetries,
		m.tokens, m.toolCalls, m.toolDuration, m.taskDuration, m.httpRequests, m.httpDuration,
		(*stateCollector)(m), (*storageCollector)(m), (*limitsCollector)(m))
	if o.GoCollectors {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry returns the registry, for tests and linting.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// bounded returns v, or OtherLabel once label has MaxLabelValues other
// values.
func (m *Metrics) bounded(label, v string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.bounds[label]
	if seen == nil {
		seen = map[string]bool{}
		m.bounds[label] = seen
	}
	if !seen[v] {
		if len(seen) >= MaxLabelValues {
			return OtherLabel
		}
		seen[v] = true
	}
	return v
}

// Run reads the log from sequence from (normally the head at recovery plus
// one, so that counters start with the daemon) until ctx ends or the log
// closes, and derives the event metrics. It returns nil when the log
// closes or ctx ends.
func (m *Metrics) Run(ctx context.Context, from uint64) error {
	sub := m.l.Subscribe(ctx, from)
	defer sub.Close()
	started := m.now()
	var group commitGroup
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, eventlog.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if group.n > 0 && !ev.Time.Equal(group.time) {
			m.observeGroup(&group, started)
		}
		group.n++
		group.time = ev.Time
		m.observe(ev)
		// The head moves a whole group at a time: an event at the head
		// ends its group.
		if ev.Seq >= m.l.Head() {
			m.observeGroup(&group, started)
		}
		m.seen.Advance(ev.Seq)
	}
}

// WaitFor blocks until Run has observed seq, or ctx ends: a scrape after
// it counts every event up to seq.
func (m *Metrics) WaitFor(ctx context.Context, seq uint64) error {
	return m.seen.Wait(ctx, seq)
}

// commitGroup accumulates consecutive events of one commit group.
type commitGroup struct {
	n    int
	time time.Time
}

func (m *Metrics) observeGroup(g *commitGroup, started time.Time) {
	m.commits.Observe(float64(g.n))
	if !g.time.Before(started) {
		m.commitLatency.Observe(m.now().Sub(g.time).Seconds())
	}
	*g = commitGroup{}
}

// brokerCounters are the Dispatch broker's counters, one per event type.
// archivedWhat are the values of pegasus_retention_archived_total's label,
// read from an EVENTS_ARCHIVED event's metadata.
var archivedWhat = []string{"tasks", "events"}

var brokerCounters = []struct {
	event      fsm.EventType
	name, help string
}{
	{fsm.DispatchAssigned, "pegasus_broker_assignments_total", "Dispatch tasks assigned to a worker since the start."},
	{fsm.DispatchRetried, "pegasus_broker_retries_total", "Dispatch tasks put back to pending after a failure or a timeout since the start."},
	{fsm.DispatchTimedOut, "pegasus_broker_timeouts_total", "Dispatch tasks timed out (deadline or heartbeat) since the start."},
	{fsm.DispatchDeadLettered, "pegasus_broker_dead_letters_total", "Dispatch tasks dead-lettered since the start."},
	{fsm.DispatchRequeued, "pegasus_broker_requeues_total", "Dead letters requeued by an operator since the start."},
	{fsm.DispatchCancelled, "pegasus_broker_cancellations_total", "Dispatch tasks cancelled since the start (a worker tool call whose agent task ended)."},
}

// observe derives the counters of one committed event.
func (m *Metrics) observe(ev eventlog.Event) {
	m.events.WithLabelValues(m.bounded("type", ev.Type)).Inc()
	if c := m.broker[ev.Type]; c != nil {
		c.Inc()
	}
	if ev.Type == eventlog.TypeEventsArchived && ev.Stream == eventlog.SystemStream {
		for _, what := range archivedWhat {
			if n, err := strconv.ParseUint(ev.Metadata[what], 10, 32); err == nil {
				m.archived.WithLabelValues(what).Add(float64(n))
			}
		}
	}
	switch fsm.EventType(ev.Type) {
	case fsm.ModelCalled, fsm.ToolCallCompleted, fsm.ToolCallFailed, fsm.TaskCompleted, fsm.TaskFailed:
	default:
		return // no body read below: most events (inputs, creations, dispatch) are not decoded
	}
	fe, err := replay.Decode(ev)
	if err != nil {
		return
	}
	switch b := fe.Body.(type) {
	case *fsm.ModelCalledBody:
		outcome := "ok"
		if b.Error != "" {
			outcome = "error"
		}
		purpose := m.bounded("purpose", b.Purpose)
		m.modelCalls.WithLabelValues(purpose, outcome).Inc()
		m.modelLatency.WithLabelValues(purpose).Observe(float64(b.LatencyMS) / 1000)
		if b.Attempt > 1 {
			m.modelRetries.Inc()
		}
		m.tokens.WithLabelValues("prompt").Add(float64(max(b.PromptTokens, 0)))
		m.tokens.WithLabelValues("completion").Add(float64(max(b.CompletionTokens, 0)))
	case *fsm.ToolCallResultBody:
		outcome := "ok"
		if ev.Type == string(fsm.ToolCallFailed) {
			outcome = "error"
		}
		tool := m.bounded("tool", b.Tool)
		m.toolCalls.WithLabelValues(tool, outcome).Inc()
		m.toolDuration.WithLabelValues(tool).Observe(float64(b.DurationMS) / 1000)
	case *fsm.TaskCompletedBody:
		m.observeTaskEnd(ev, "completed")
	case *fsm.TaskFailedBody:
		m.observeTaskEnd(ev, "failed")
	}
}

// observeTaskEnd observes a task's duration: a task id is the ULID of its
// creating input, whose time part is when the task was created.
func (m *Metrics) observeTaskEnd(ev eventlog.Event, outcome string) {
	id, err := ulid.ParseStrict(ev.Stream)
	if err != nil {
		return
	}
	d := ev.Time.Sub(ulid.Time(id.Time()))
	m.taskDuration.WithLabelValues(outcome).Observe(max(d.Seconds(), 0))
}
