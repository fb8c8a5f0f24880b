package metrics

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pegasus-engine/pegasus/fsm"
)

// States are the task states, each reported even when no task is in it.
var States = []fsm.State{fsm.StateIdle, fsm.StateReasoning, fsm.StateActing, fsm.StateSuspended,
	fsm.StateCompleted, fsm.StateFailed}

var (
	descTasks = prometheus.NewDesc("pegasus_tasks",
		"Tasks by state, from the stats read model (the same numbers as GET /v1/stats).", []string{"state"}, nil)
	descActive = prometheus.NewDesc("pegasus_tasks_active",
		"Unfinished tasks by state and machine (name/vVERSION; none before TASK_CREATED).", []string{"state", "machine"}, nil)
	descCreated = prometheus.NewDesc("pegasus_tasks_created_total",
		"Tasks created over the log's life.", nil, nil)
	descFinished = prometheus.NewDesc("pegasus_tasks_finished_total",
		"Tasks finished over the log's life, by outcome (completed, failed).", []string{"outcome"}, nil)
	descFailures = prometheus.NewDesc("pegasus_task_failures_total",
		"Failed tasks over the log's life by reason code (the most frequent reasons).", []string{"reason"}, nil)
	descHead = prometheus.NewDesc("pegasus_eventlog_head_sequence",
		"The log's last committed sequence number.", nil, nil)
	descFoldLag = prometheus.NewDesc("pegasus_fold_lag_events",
		"Committed events the live fold has not folded yet (head minus folded).", nil, nil)
	descRefused = prometheus.NewDesc("pegasus_fold_refused_events_total",
		"Events the fold refused (illegal transitions, undecodable bodies); verify reports them.", nil, nil)
	descQueue = prometheus.NewDesc("pegasus_queue_depth",
		"Tasks waiting for an admission slot.", nil, nil)
	descQueueAge = prometheus.NewDesc("pegasus_queue_oldest_age_seconds",
		"Age of the oldest task waiting for an admission slot, 0 when none waits.", nil, nil)
	descSlots = prometheus.NewDesc("pegasus_runtime_slots_in_use",
		"Runtime slots in use, by kind (tasks: admission slots; llm: model calls; tools: tool calls).", []string{"kind"}, nil)
	descSlotsMax = prometheus.NewDesc("pegasus_runtime_slots",
		"Runtime slots configured, by kind.", []string{"kind"}, nil)
	descCommits = prometheus.NewDesc("pegasus_eventlog_commits_total",
		"Synced group commits since the log opened.", nil, nil)
)

// activeStates are the unfinished states of the agent's task machines,
// the current one's and the legacy one's: those in flight
// (fsm.ActiveStates), and idle and suspended.
var activeStates = append([]fsm.State{fsm.StateIdle, fsm.StateSuspended}, fsm.ActiveStates...)

// stateCollector reads the fold and the agent at scrape time.
type stateCollector Metrics

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTasks, descActive, descCreated, descFinished, descFailures, descHead,
		descFoldLag, descRefused, descQueue, descQueueAge, descSlots, descSlotsMax, descCommits} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	a, v := c.a, c.a.View()
	st := v.Stats()
	for _, s := range States {
		ch <- prometheus.MustNewConstMetric(descTasks, prometheus.GaugeValue, float64(st.ByState[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(descCreated, prometheus.CounterValue, float64(st.Tasks))
	ch <- prometheus.MustNewConstMetric(descFinished, prometheus.CounterValue, float64(st.Completed), "completed")
	ch <- prometheus.MustNewConstMetric(descFinished, prometheus.CounterValue, float64(st.Failed), "failed")
	for _, r := range st.FailureReasons {
		ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(r.Count), r.Reason)
	}

	// One pass over the active tasks under the fold's read lock, copying
	// none and reading none back from the store (a scrape of a daemon
	// with a million suspended tasks out of memory costs a map walk).
	// The queue is read first: the callback takes no other lock.
	queued := map[string]struct{}{}
	for _, id := range a.QueuedTasks() {
		queued[id] = struct{}{}
	}
	type key struct {
		state fsm.State
		ref   fsm.MachineRef
	}
	active := map[key]int{}
	var oldestAt time.Time
	v.EachInState(func(t *fsm.Task) {
		active[key{t.State, t.Machine}]++
		if _, ok := queued[t.ID]; ok && (oldestAt.IsZero() || t.CreatedAt.Before(oldestAt)) {
			oldestAt = t.CreatedAt
		}
	}, activeStates...)
	var oldest time.Duration
	if !oldestAt.IsZero() {
		oldest = c.now().Sub(oldestAt)
	}
	for k, n := range active {
		machine := "none"
		if k.ref != (fsm.MachineRef{}) {
			machine = k.ref.String()
		}
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, float64(n), string(k.state), machine)
	}

	head, folded := c.l.Head(), v.Seq()
	ch <- prometheus.MustNewConstMetric(descHead, prometheus.GaugeValue, float64(head))
	ch <- prometheus.MustNewConstMetric(descFoldLag, prometheus.GaugeValue, float64(head-min(folded, head)))
	_, refused := v.Issues()
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(refused))
	ch <- prometheus.MustNewConstMetric(descCommits, prometheus.CounterValue, float64(c.l.Stats().Commits))

	rt := a.Runtime()
	ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(rt.Queued))
	ch <- prometheus.MustNewConstMetric(descQueueAge, prometheus.GaugeValue, max(oldest.Seconds(), 0))
	for _, s := range []struct {
		kind      string
		used, max int
	}{{"tasks", rt.ActiveSlots, rt.MaxActiveTasks}, {"llm", rt.LLMInUse, rt.MaxLLM}, {"tools", rt.ToolsInUse, rt.MaxTools}} {
		ch <- prometheus.MustNewConstMetric(descSlots, prometheus.GaugeValue, float64(s.used), s.kind)
		ch <- prometheus.MustNewConstMetric(descSlotsMax, prometheus.GaugeValue, float64(s.max), s.kind)
	}
}

var (
	descDisk = prometheus.NewDesc("pegasus_eventlog_disk_usage_bytes",
		"Bytes the log's storage engine uses on disk (tables, WAL, manifests).", nil, nil)
	descWALSize = prometheus.NewDesc("pegasus_eventlog_wal_size_bytes",
		"Bytes of live data in the write-ahead log files.", nil, nil)
	descWALWritten = prometheus.NewDesc("pegasus_eventlog_wal_written_bytes_total",
		"Bytes written to the write-ahead log since the log opened.", nil, nil)
	descCompactions = prometheus.NewDesc("pegasus_eventlog_compactions_total",
		"Compactions since the log opened.", nil, nil)
	descCompactionDebt = prometheus.NewDesc("pegasus_eventlog_compaction_debt_bytes",
		"Estimated bytes to compact for the LSM to reach a stable state.", nil, nil)
	descFlushes = prometheus.NewDesc("pegasus_eventlog_flushes_total",
		"Memtable flushes since the log opened.", nil, nil)
	descReadAmp = prometheus.NewDesc("pegasus_eventlog_read_amplification",
		"Sorted runs a read may visit (Pebble's read amplification).", nil, nil)
	descFsync = prometheus.NewDesc("pegasus_eventlog_wal_fsync_duration_seconds",
		"Latency of the write-ahead log's fsyncs, as Pebble measures them.", nil, nil)
)

// storageCollector reads Pebble's metrics at scrape time.
type storageCollector Metrics

func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDisk, descWALSize, descWALWritten, descCompactions, descCompactionDebt,
		descFlushes, descReadAmp, descFsync} {
		ch <- d
	}
}

func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	pm, err := c.l.StorageMetrics()
	if err != nil {
		return // closed: the daemon is stopping
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(descDisk, float64(pm.DiskSpaceUsage()))
	gauge(descWALSize, float64(pm.WAL.Size))
	counter(descWALWritten, float64(pm.WAL.BytesWritten))
	counter(descCompactions, float64(pm.Compact.Count))
	gauge(descCompactionDebt, float64(pm.Compact.EstimatedDebt))
	counter(descFlushes, float64(pm.Flush.Count))
	gauge(descReadAmp, float64(pm.ReadAmp()))
	if h, ok := fsyncHistogram(pm); ok {
		ch <- h
	}
}

// fsyncTargets are the bucket bounds, in seconds, kept from Pebble's fsync
// histogram (a hundred buckets in nanoseconds): each keeps the first of
// Pebble's bounds at or above it. Cumulative counts make dropping buckets
// exact.
var fsyncTargets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}

func fsyncHistogram(pm *pebble.Metrics) (prometheus.Metric, bool) {
	if pm.LogWriter.FsyncLatency == nil {
		return nil, false
	}
	var d dto.Metric
	if err := pm.LogWriter.FsyncLatency.Write(&d); err != nil || d.Histogram == nil {
		return nil, false
	}
	h := d.Histogram
	buckets := map[float64]uint64{}
	bs := h.GetBucket()
	i := 0
	for _, target := range fsyncTargets {
		for i < len(bs) && bs[i].GetUpperBound()/1e9 < target {
			i++
		}
		if i == len(bs) {
			break
		}
		ub := bs[i].GetUpperBound() / 1e9
		if !math.IsInf(ub, 1) {
			buckets[ub] = bs[i].GetCumulativeCount()
		}
	}
	m, err := prometheus.NewConstHistogram(descFsync, h.GetSampleCount(), h.GetSampleSum()/1e9, buckets)
	return m, err == nil
}

// InstrumentHTTP counts the requests h answers by route pattern (the
// ServeMux pattern that matched, "unmatched" for a request refused before
// routing) and status code.
func (m *Metrics) InstrumentHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &StatusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		if rec.Status == 0 {
			rec.Status = http.StatusOK
		}
		m.httpRequests.WithLabelValues(route, fmt.Sprint(rec.Status)).Inc()
		m.httpDuration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// StatusRecorder remembers the status a handler answered with (200 if it
// wrote a body without one), for the metrics here and the daemon's access
// log.
type StatusRecorder struct {
	http.ResponseWriter
	Status int
}

func (r *StatusRecorder) WriteHeader(code int) {
	if r.Status == 0 {
		r.Status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *StatusRecorder) Write(b []byte) (int, error) {
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (SSE flushes
// and write deadlines).
func (r *StatusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
