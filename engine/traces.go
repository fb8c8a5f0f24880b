package engine

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/traces"
	"github.com/pegasus-engine/pegasus/traces/otlp"
)

// The live trace export (docs/tracing.md): with --otlp-endpoint (or the
// OTEL_EXPORTER_OTLP_* variables) a follower of the log sends each root
// task's trace to an OTLP collector when the task ends. It reads the
// committed log, never the task path: a slow or absent collector holds
// the follower back, not a task. Its cursor, in the log's aux space like
// the fan-out's, is the sequence up to which every ending was sent, so a
// restart sends from there on: at most the endings sent after the last
// cursor write (a second) are sent again, as the same spans with the same
// ids, which the backend keeps once.

// tracesCursorKey is the aux key of the exporter's cursor, decimal.
const tracesCursorKey = "traces/otlp/cursor"

// TracesOptions configures the live trace export. The zero value is off.
type TracesOptions struct {
	// Enabled turns the export on. pegasusd sets it when --otlp-endpoint
	// or an OTEL_EXPORTER_OTLP_ENDPOINT variable is set.
	Enabled bool
	// OTLP is the collector and the resource's service name.
	OTLP otlp.Options
	// Mapping tunes the spans (Contents: prompts and completions).
	Mapping traces.Options
	// OpenInterval is how often the finished spans of root tasks still
	// running are sent (a long task shows its progress). The default
	// value is 30s; a negative value turns it off.
	OpenInterval time.Duration
	// QueueSize bounds the traces waiting to be sent. An ending waits for
	// room (the follower pauses, the cursor holds); a running task's
	// spans that find the queue full are dropped and counted (the ending
	// sends them). The default value is 256.
	QueueSize int
	// MaxBackoff bounds the wait between retries of a failed export. The
	// default value is 30s.
	MaxBackoff time.Duration
}

func (o *TracesOptions) ensureDefaults() {
	if o.OpenInterval == 0 {
		o.OpenInterval = 30 * time.Second
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 256
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
}

// traceJob is one export: a root task's trace up to seq; final for an
// ending (the cursor moves past it once sent), else a running task's
// finished spans.
type traceJob struct {
	task  string
	seq   uint64
	final bool
	root  bool // the follower saw the task start as a root (else Collect checks)
	// events are the task tree's, as replay.TraceEvents would read them,
	// when the follower gathered them from the root's first event on (nil:
	// the sender reads them). Their bodies are the subscription's copies,
	// never changed: the mapping's strings alias them.
	events []eventlog.Event
}

// traceExporter follows the log and sends traces.
type traceExporter struct {
	o      TracesOptions
	l      *eventlog.Log
	r      replay.Reader
	exp    *otlp.Exporter
	batch  otlp.Batch            // the request's spans (send's)
	latest map[string]int        // latestJobs' (send's)
	trees  *replay.TraceGatherer // follow's; send gives back the events it sent
	logger *slog.Logger
	queue  chan traceJob
	full   chan struct{} // the queue holds a request's worth (follow tells send)
	cancel context.CancelFunc
	done   sync.WaitGroup

	carried []string // root tasks running at the start, begun before it (follow's)

	mu      sync.Mutex
	read    atomic.Uint64 // the last sequence the follower handled
	pending []uint64      // sequences of the queued endings, in order (mu)
	stored  uint64        // the cursor last written

	exported, spans, failures prometheus.Counter
	dropped                   *prometheus.CounterVec
}

// startTraces starts the live export if it is on. An unreachable
// collector does not stop the daemon: exports are retried.
func (e *Engine) startTraces() error {
	o := e.opts.Traces
	if !o.Enabled {
		return nil
	}
	if e.replicated != nil {
		e.log.Warn("the live trace export does not run with --cluster yet; export with pegasus-replay export --otlp")
		return nil
	}
	o.ensureDefaults()
	exp, err := otlp.New(context.Background(), o.OTLP)
	if err != nil {
		return err
	}
	x := &traceExporter{o: o, l: e.events, r: replay.FromLog(e.events), exp: exp,
		trees:  replay.NewTraceGatherer(maxTreeBytes, maxTreesBytes),
		logger: e.log.With("component", "traces"), queue: make(chan traceJob, o.QueueSize),
		full: make(chan struct{}, 1)}
	read, err := x.loadCursor()
	if err != nil {
		return err
	}
	x.read.Store(read)
	if o.OpenInterval > 0 {
		x.carried = e.runningRoots(x.r)
	}
	x.metrics(e.metrics.Registry())
	ctx, cancel := context.WithCancel(context.Background())
	x.cancel = cancel
	x.done.Add(2)
	go x.follow(ctx)
	go x.send(ctx)
	e.traces = x
	e.log.Info("exporting traces over OTLP", "endpoint", o.OTLP.Endpoint, "from", read+1)
	return nil
}

// TracesCursor is the live trace export's cursor: every root task that
// ended at or before this log sequence has had its trace sent (0 when the
// export is off). pegasus_traces_cursor in /metrics is the same.
func (e *Engine) TracesCursor() uint64 {
	if e.traces == nil {
		return 0
	}
	return e.traces.cursor()
}

// runningRoots lists the root tasks in flight when the export starts: the
// follower reads the log from its cursor on and does not see their first
// event, yet the open interval sends their finished spans too (a long task
// keeps showing its progress across a restart). The tasks the follower
// does see start again in its set, which is harmless.
func (e *Engine) runningRoots(r replay.Reader) []string {
	if e.agent == nil {
		return nil
	}
	var states []fsm.State
	for _, st := range fsm.States {
		if !st.IsTerminal() {
			states = append(states, st)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	q := replay.Query{Filter: projection.Filter{States: states}, Limit: replay.MaxLimit}
	for {
		page, err := e.View().Tasks(ctx, q)
		if err != nil {
			e.log.Warn("the trace export lists no running tasks: their spans are sent at their end", "err", err)
			return ids
		}
		for _, t := range page.Tasks {
			if root, err := otlp.IsRootTask(ctx, r, t.ID); err == nil && root {
				ids = append(ids, t.ID)
			}
		}
		if page.Next == "" {
			return ids
		}
		q.Cursor = page.Next
	}
}

// stopTraces stops the export before the log closes and stores the
// cursor; endings not sent yet are sent at the next start.
func (e *Engine) stopTraces() {
	x := e.traces
	if x == nil {
		return
	}
	x.cancel()
	x.done.Wait()
	x.storeCursor()
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = x.exp.Shutdown(sctx)
}

// loadCursor reads the cursor. Without one (the export's first start)
// it starts at the log's head, stored at once: the tasks that ended
// before are exported with pegasus-replay export --otlp, not all at once
// at the first start.
func (x *traceExporter) loadCursor() (uint64, error) {
	raw, err := x.l.GetAux([]byte(tracesCursorKey))
	if errors.Is(err, eventlog.ErrNotFound) {
		head := x.l.Head()
		x.read.Store(head)
		x.stored = ^uint64(0)
		x.storeCursor()
		if x.stored != head {
			return 0, errors.New("engine: the trace export's first cursor was not stored")
		}
		return head, nil
	}
	if err != nil {
		return 0, err
	}
	c, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, errors.New("engine: the trace export's cursor " + strconv.Quote(string(raw)) + " is not a sequence")
	}
	c = min(c, x.l.Head())
	x.stored = c
	return c, nil
}

func (x *traceExporter) metrics(reg *prometheus.Registry) {
	x.exported = prometheus.NewCounter(prometheus.CounterOpts{Name: "pegasus_traces_exported_total",
		Help: "Traces (root tasks, at their end or while they run) sent to the OTLP collector."})
	x.spans = prometheus.NewCounter(prometheus.CounterOpts{Name: "pegasus_trace_spans_exported_total",
		Help: "Spans sent to the OTLP collector."})
	x.failures = prometheus.NewCounter(prometheus.CounterOpts{Name: "pegasus_traces_export_failures_total",
		Help: "Exports that failed and were retried."})
	x.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pegasus_traces_dropped_total",
		Help: "Traces not sent: queue_full (a running task's spans; its end sends them), rejected (the collector refused them for good)."},
		[]string{"reason"})
	x.dropped.WithLabelValues("queue_full")
	x.dropped.WithLabelValues("rejected")
	reg.MustRegister(x.exported, x.spans, x.failures, x.dropped,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pegasus_traces_cursor",
			Help: "The log sequence up to which every ended task's trace was sent."},
			func() float64 { return float64(x.cursor()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pegasus_traces_queue",
			Help: "Traces waiting to be sent."},
			func() float64 { return float64(len(x.queue)) }))
}

// cursor is the sequence up to which every ending was sent.
func (x *traceExporter) cursor() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.pending) > 0 {
		return x.pending[0] - 1
	}
	return x.read.Load()
}

// follow reads the log from the cursor on and queues the endings of root
// tasks, and every OpenInterval the running root tasks.
func (x *traceExporter) follow(ctx context.Context) {
	defer x.done.Done()
	defer close(x.queue)
	sub := x.l.SubscribeBuffered(ctx, x.read.Load()+1, followBuffer)
	defer sub.Close()
	pace := time.NewTimer(followPace)
	pace.Stop() // armed when the follower catches up
	defer pace.Stop()
	running := map[string]bool{} // root tasks started since the follower started, or running then, not ended
	for _, id := range x.carried {
		running[id] = true
	}
	x.carried = nil
	children := map[string]bool{} // other tasks started since then, not ended
	trees := x.trees
	// One goroutine reads the log and handles each event: Next waits
	// under a context that ends at the next tick, so a quiet log still
	// sends the running tasks' spans on time, without a second goroutine
	// and a channel hop per event.
	wait, stop := ctx, context.CancelFunc(func() {})
	defer func() { stop() }()
	arm := func() {
		stop()
		wait, stop = context.WithTimeout(ctx, x.o.OpenInterval)
	}
	if x.o.OpenInterval > 0 {
		arm()
	}
	paced := false
	for {
		if paced {
			select {
			case <-ctx.Done():
				return
			case <-pace.C:
			}
			paced = false
		}
		ev, err := sub.Next(wait)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if wait != ctx && wait.Err() != nil {
				for id := range running {
					select {
					case x.queue <- traceJob{task: id, seq: x.read.Load(), root: true}:
					default:
						x.dropped.WithLabelValues("queue_full").Inc()
					}
				}
				arm()
				continue
			}
			x.logger.Error("the trace export stopped reading the log", "err", err)
			return
		}
		if sub.Seq() > x.l.Head() {
			// Caught up with the log: read again after a pace, so that
			// the follower wakes a few dozen times a second rather than
			// at every commit (waking costs the node's processors more
			// than the few events a commit brings). Its subscription's
			// buffer holds what commits meanwhile.
			paced = true
			pace.Reset(followPace)
		}
		isRoot := false
		if ev.Version == 1 {
			if isRoot = otlp.IsRoot(ev); isRoot {
				running[ev.Stream] = true
			} else {
				children[ev.Stream] = true
			}
		}
		trees.Add(ev, isRoot)
		if !otlp.Ends(ev) {
			x.read.Store(ev.Seq)
			continue
		}
		if children[ev.Stream] {
			delete(children, ev.Stream) // its root's ending sends its spans
			x.read.Store(ev.Seq)
			continue
		}
		root := running[ev.Stream]
		delete(running, ev.Stream)
		job := traceJob{task: ev.Stream, seq: ev.Seq, final: true, root: root, events: trees.Take(ev.Stream)}
		x.mu.Lock()
		x.pending = append(x.pending, ev.Seq)
		x.read.Store(ev.Seq)
		x.mu.Unlock()
		select {
		case x.queue <- job:
		case <-ctx.Done():
			return
		}
		if len(x.queue) >= x.fullAt() {
			select {
			case x.full <- struct{}{}:
			default: // told already
			}
		}
	}
}

// fullAt is how many queued traces make send go without waiting for
// traceBatchDelay: a request's worth, or the whole queue if it is smaller
// (the follower waits for room only once send was told).
func (x *traceExporter) fullAt() int {
	return max(1, min(maxTraceBatch, cap(x.queue)))
}

// The follower reads in bursts: followPace after it caught up, with room
// for followBuffer events committed meanwhile (beyond it, it reads them
// from the log).
const (
	followPace   = 20 * time.Millisecond
	followBuffer = 4096
)

// maxTraceBatch bounds how many queued traces one export request
// carries (the SDK converts and encodes a request in one go: this bounds
// how long the export holds a processor at once); traceBatchDelay is how
// long the first waits for others.
const (
	maxTraceBatch   = 256
	traceBatchDelay = 200 * time.Millisecond
)

// yieldEvery is how many traces the export maps between two yields of
// its processor.
const yieldEvery = 8

// send exports the queued jobs in order, those waiting together in one
// request, retrying each failure with backoff until it succeeds, is
// rejected for good, or the export stops. The cursor is stored at most
// once a second (a synced write), and at stop: a kill sends again the
// endings sent since, as the same spans.
func (x *traceExporter) send(ctx context.Context) {
	defer x.done.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var batch []traceJob
	for {
		var job traceJob
		var ok bool
		select {
		case job, ok = <-x.queue:
			if !ok {
				return
			}
		case <-t.C:
			x.storeCursor()
			continue
		}
		// The traces that come within traceBatchDelay go in the same
		// request: send waits for the delay, or until the follower says
		// the queue holds a request's worth, then takes what is queued.
		// It is not woken for each trace (a goroutine's wake-up cost
		// about as much as mapping a trace).
		batch = append(batch[:0], job)
		delay := time.NewTimer(traceBatchDelay)
		select {
		case <-delay.C:
		case <-x.full:
		case <-ctx.Done():
		}
		delay.Stop()
	more:
		for len(batch) < maxTraceBatch {
			select {
			case j, ok := <-x.queue:
				if !ok {
					break more
				}
				batch = append(batch, j)
			default:
				break more
			}
		}
		if !x.export(ctx, batch) {
			return // stopped: the cursor holds before the batch
		}
		x.mu.Lock()
		for _, j := range batch {
			if j.final {
				x.pending = x.pending[1:]
			}
		}
		x.mu.Unlock()
		for _, j := range batch {
			if j.events != nil {
				x.trees.Recycle(j.events) // sent: the gatherer's next trees fill them
			}
		}
		clear(batch)
	}
}

// export sends one batch; false if the export stopped first.
func (x *traceExporter) export(ctx context.Context, batch []traceJob) bool {
	backoff := 100 * time.Millisecond
	for {
		n, err := x.exportOnce(ctx, batch)
		switch {
		case err == nil:
			x.exported.Add(float64(n))
			return true
		case errors.Is(err, otlp.ErrRejected):
			x.dropped.WithLabelValues("rejected").Add(float64(n))
			x.logger.Error("the collector rejected traces; they are not sent again", "traces", n, "first_task", batch[0].task, "err", err)
			return true
		case ctx.Err() != nil:
			return false
		}
		x.failures.Inc()
		x.logger.Warn("trace export failed; retrying", "traces", n, "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, x.o.MaxBackoff)
	}
}

// exportOnce maps the batch's traces and sends them in one request; it
// returns how many traces it held.
func (x *traceExporter) exportOnce(ctx context.Context, batch []traceJob) (int, error) {
	spans := &x.batch
	spans.Reset() // the last request's spans were sent (or are mapped again)
	n := 0
	latest := x.latestJobs(batch)
	for i, job := range batch {
		if k, ok := latest[job.task]; ok && k != i {
			continue
		}
		var s []traces.Span
		var err error
		switch {
		case job.events != nil:
			if spans.AddOwned(job.events, job.task, job.seq, !job.final, x.o.Mapping) > 0 {
				n++
			}
		case job.root:
			s, err = otlp.CollectRoot(ctx, x.r, job.task, job.seq, !job.final, x.o.Mapping)
		default:
			s, err = otlp.Collect(ctx, x.r, job.task, job.seq, !job.final, x.o.Mapping)
		}
		if errors.Is(err, otlp.ErrNotRoot) {
			continue // a child task's end: its root's end sends it
		}
		if err != nil {
			return n, err
		}
		if len(s) > 0 {
			spans.Add(s)
			n++
		}
		// The export is never in a hurry: let the task path's
		// goroutines that are waiting for a processor (a commit back
		// from its sync, a stage) run before the next traces, instead of
		// after the scheduler's 10 ms slice. On a busy node this keeps
		// the export's CPU from becoming the tasks' latency. A few
		// traces take some tens of microseconds: yielding after each
		// cost about as much as mapping one.
		if i%yieldEvery == yieldEvery-1 {
			runtime.Gosched()
		}
	}
	if err := x.exp.Export(ctx, spans.Spans()); err != nil {
		return n, err
	}
	x.spans.Add(float64(len(spans.Spans())))
	return n, nil
}

// latestJobs maps each task of the batch to its latest job's index: that
// job holds what the task's earlier ones would send (the spans up to each
// ending, or its finished spans), so each task is mapped once. It is nil
// when every job is a gathered tree (the usual batch): each is a root's
// first ending (the follower takes a tree once), so each is another
// task's.
func (x *traceExporter) latestJobs(batch []traceJob) map[string]int {
	gathered := true
	for _, job := range batch {
		if job.events == nil {
			gathered = false
			break
		}
	}
	if gathered {
		return nil
	}
	if x.latest == nil {
		x.latest = map[string]int{}
	}
	clear(x.latest)
	for i, job := range batch {
		if k, ok := x.latest[job.task]; !ok || job.final || !batch[k].final {
			x.latest[job.task] = i
		}
	}
	return x.latest
}

// storeCursor writes the cursor to the aux space if it moved.
func (x *traceExporter) storeCursor() {
	c := x.cursor()
	x.mu.Lock()
	moved := c != x.stored
	x.mu.Unlock()
	if !moved {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := x.l.WriteAux(ctx, func(b *eventlog.AuxBatch) error {
		b.Set([]byte(tracesCursorKey), strconv.AppendUint(nil, c, 10))
		return nil
	})
	if err != nil {
		x.logger.Warn("trace export cursor not stored", "cursor", c, "err", err)
		return
	}
	x.mu.Lock()
	x.stored = c
	x.mu.Unlock()
}

// Bounds of the trees the follower gathers (replay.TraceGatherer): beyond
// them a tree is let go, and its ending reads its events from the log.
const (
	maxTreeBytes  = 4 << 20  // event bodies of one tree
	maxTreesBytes = 64 << 20 // of all trees
)
