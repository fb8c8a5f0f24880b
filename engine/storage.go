package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

// What holds a task's write, as metrics (docs/metrics.md "Latency"): the
// storage engine's stalls, flushes and compactions (fed by
// eventlog.StorageEvents), and the stages of the task path measured here,
// around the appender the agent and the broker write through.

// latencyBuckets span a fast synced commit to a stall of several seconds.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// storageMetrics are the storage engine's events and the task path's
// stages, registered on the engine's metrics once they start.
type storageMetrics struct {
	stalls      prometheus.Histogram
	flushes     prometheus.Histogram
	flushBytes  prometheus.Counter
	compactions prometheus.Histogram
	stages      *prometheus.HistogramVec

	// view is the agent's view, set once the agent exists: the fold stage
	// waits on it.
	view atomic.Pointer[replay.View]
	n    atomic.Uint64 // appends, to sample the fold stage
	// spikes writes a runtime/trace of a slow append or a stall; nil
	// without Options.SpikeTraceDir.
	spikes *spikeTracer
	// ctx ends the fold stage's waits when the engine stops.
	ctx    context.Context
	cancel context.CancelFunc
}

func newStorageMetrics() *storageMetrics {
	ctx, cancel := context.WithCancel(context.Background())
	return &storageMetrics{ctx: ctx, cancel: cancel,
		stalls: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pegasus_eventlog_write_stall_duration_seconds",
			Help: "Write stalls of the storage engine (every append waits while one lasts), by duration.", Buckets: latencyBuckets}),
		flushes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pegasus_eventlog_flush_duration_seconds",
			Help: "Memtable flushes of the storage engine, by wall time.", Buckets: latencyBuckets}),
		flushBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "pegasus_eventlog_flushed_bytes_total",
			Help: "In-memory bytes of the memtables flushed."}),
		compactions: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pegasus_eventlog_compaction_duration_seconds",
			Help: "Compactions of the storage engine, by wall time.", Buckets: latencyBuckets}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pegasus_task_stage_duration_seconds",
			Help: "Stages of the task path: append (an append handed to the log until durable and acknowledged), " +
				"fold (acknowledged until the agent's view folded it; one append in 16).", Buckets: latencyBuckets}, []string{"stage"}),
	}
}

// events is what the log's Options.Events are set to.
func (m *storageMetrics) events() *eventlog.StorageEvents {
	return &eventlog.StorageEvents{
		Stall: func(d time.Duration, why string) {
			m.stalls.Observe(d.Seconds())
			m.spikes.spike("write stall: "+why, max(d, spikeAfter))
		},
		Flush:      func(d time.Duration, b uint64) { m.flushes.Observe(d.Seconds()); m.flushBytes.Add(float64(b)) },
		Compaction: func(d time.Duration) { m.compactions.Observe(d.Seconds()) },
	}
}

func (m *storageMetrics) register(r prometheus.Registerer) {
	r.MustRegister(m.stalls, m.flushes, m.flushBytes, m.compactions, m.stages)
}

// stop ends the fold stage's waits and the spike traces.
func (m *storageMetrics) stop() {
	m.cancel()
	m.spikes.stop()
}

// timed wraps the appender a so that its appends are measured.
func (m *storageMetrics) timed(a eventlog.Appender) eventlog.Appender {
	return &timedAppender{a: a, m: m, append: m.stages.WithLabelValues("append"), fold: m.stages.WithLabelValues("fold")}
}

// timedAppender measures the append stage of every append, and the fold
// stage of one in 16 (a goroutine waits for the view to fold it).
type timedAppender struct {
	a            eventlog.Appender
	m            *storageMetrics
	append, fold prometheus.Observer
}

func (t *timedAppender) Append(ctx context.Context, stream string, expected eventlog.ExpectedVersion, events ...eventlog.Event) (eventlog.AppendResult, error) {
	start := time.Now()
	res, err := t.a.Append(ctx, stream, expected, events...)
	if err == nil {
		t.done(start, res.LastSeq)
	}
	return res, err
}

func (t *timedAppender) AppendMulti(ctx context.Context, appends ...eventlog.StreamAppend) ([]eventlog.AppendResult, error) {
	start := time.Now()
	res, err := t.a.AppendMulti(ctx, appends...)
	if err == nil && len(res) > 0 {
		t.done(start, res[len(res)-1].LastSeq)
	}
	return res, err
}

// foldWait bounds how long the fold stage waits for one append.
const foldWait = time.Minute

func (t *timedAppender) done(start time.Time, seq uint64) {
	acked := time.Now()
	t.append.Observe(acked.Sub(start).Seconds())
	t.m.spikes.spike("append", acked.Sub(start))
	v := t.m.view.Load()
	if v == nil || t.m.n.Add(1)%16 != 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(t.m.ctx, foldWait)
		defer cancel()
		if v.WaitFor(ctx, seq) == nil {
			t.fold.Observe(time.Since(acked).Seconds())
		}
	}()
}
