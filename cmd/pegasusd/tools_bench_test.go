package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/api"
	pegasus "github.com/pegasus-engine/pegasus/client"
	cfgfile "github.com/pegasus-engine/pegasus/config"
	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/toolbench"
	"github.com/pegasus-engine/pegasus/server"
)

// A worker tool's round trip (docs/benchmarks.md "Tools"): agent tasks
// whose model calls the worker tool shout once, then answers with its
// result; a Go worker on the worker SDK (client.NewWorker, capability
// shout) runs the calls. The engine and the server run in-process, on
// loopback, every append synced; the tasks are submitted and awaited over
// HTTP with the client SDK, as a user's program would.

var benchToolCalls = flag.Int("bench-tool-calls", 100, "concurrent calls (tasks in flight) in BenchmarkWorkerToolRoundTrip")

const shoutConfig = `tools:
  - name: shout
    description: Upper-cases a text.
    parameters: {type: object, properties: {text: {type: string}}, required: [text]}
    capability: shout
`

// BenchmarkWorkerToolRoundTrip runs b.N agent tasks, -bench-tool-calls at
// once, each calling the worker tool once, and reports calls/s and the
// p50 and p99 of the call (TOOL_CALL_STARTED to TOOL_CALL_COMPLETED, the
// events' commit times) and of the task (the client's submit to the end
// of its wait).
//
//	go test ./cmd/pegasusd -run '^$' -bench WorkerToolRoundTrip -benchtime 3000x
func BenchmarkWorkerToolRoundTrip(b *testing.B) {
	rt, tasks, elapsed, events := runToolRoundTrips(b, b.N, *benchToolCalls, b.ResetTimer, b.StopTimer)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
	b.ReportMetric(toolbench.MS(toolbench.Quantile(rt.call, 0.50)), "call-p50-ms")
	b.ReportMetric(toolbench.MS(toolbench.Quantile(rt.call, 0.99)), "call-p99-ms")
	b.ReportMetric(toolbench.MS(toolbench.Quantile(tasks, 0.50)), "task-p50-ms")
	b.ReportMetric(toolbench.MS(toolbench.Quantile(tasks, 0.99)), "task-p99-ms")
	b.ReportMetric(float64(events)/float64(b.N), "events/call")
	for _, st := range roundTripStages {
		b.ReportMetric(toolbench.MS(toolbench.Quantile(rt.stage(st), 0.50)), st+"-p50-ms")
	}
}

// runToolRoundTrips runs n agent tasks, inflight at once, against an
// engine and a server started for them, with a worker on the worker SDK;
// begin is called when all is ready, before the first task, and end
// after the last task's end, before the teardown. It returns
// the calls' parts, each task's time from submit to the end of its
// wait, the time from begin to the last task's end, and the events
// appended.
func runToolRoundTrips(tb testing.TB, n, inflight int, begin, end func()) (rt *roundTrip, tasks []time.Duration, elapsed time.Duration, events uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := tb.TempDir()
	cfgPath := filepath.Join(dir, "pegasus.yaml")
	if err := os.WriteFile(cfgPath, []byte(shoutConfig), 0o600); err != nil {
		tb.Fatal(err)
	}
	f, err := cfgfile.Load(cfgPath, os.Getenv)
	if err != nil {
		tb.Fatal(err)
	}
	e, err := engine.Start(ctx, &engine.Options{DataDir: filepath.Join(dir, "data"), Model: toolbench.CallOnce{Tool: "shout", Arguments: `{"text":"hello"}`}, Config: f,
		DisableReflection: true, MaxActiveTasks: inflight, MaxConcurrentLLM: inflight, MaxConcurrentTools: inflight})
	if err != nil {
		tb.Fatal(err)
	}
	srv := server.New(server.Deps{Agent: e.Agent(), Store: e.Log(), View: e.View(), History: e.History(), Keys: e.Keys(),
		Broker: e.Broker(), Metrics: e.Metrics(), Model: e.ModelName(), Base: e.Context(), Catalog: e.Catalog()},
		&server.Options{MaxBodyBytes: 1 << 20})
	hs := httptest.NewServer(srv)
	defer func() {
		srv.Drain()
		e.StopSchedules()
		e.Cancel()
		hs.Close()
		if err := e.Stop(context.Background()); err != nil {
			tb.Error(err)
		}
	}()
	// One connection per caller, kept (http.DefaultTransport keeps 2 idle
	// per host, so 100 callers would open and close connections).
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * inflight}}
	users, err := pegasus.New(hs.URL, &pegasus.Options{HTTPClient: hc})
	if err != nil {
		tb.Fatal(err)
	}
	wc, err := pegasus.New(hs.URL, &pegasus.Options{HTTPClient: hc, AgentID: "shouter"})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := pegasus.NewWorker(wc, &pegasus.WorkerOptions{Capabilities: []string{"shout"}, MaxTasks: inflight, PollWait: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() {
		worked <- w.Run(wctx, pegasus.HandlerFunc(func(_ context.Context, t *pegasus.Task) (any, error) {
			var in struct{ Text string }
			if err := json.Unmarshal(t.Metadata["arguments"], &in); err != nil {
				return nil, pegasus.Permanent(err)
			}
			return strings.ToUpper(in.Text), nil
		}))
	}()
	defer func() {
		stopWorker()
		if err := <-worked; err != nil {
			tb.Error(err)
		}
	}()

	l := e.Log()
	head0 := l.Head()
	var (
		mu   sync.Mutex
		next atomic.Int64
		wg   sync.WaitGroup
	)
	tasks = make([]time.Duration, 0, n)
	begin()
	t0 := time.Now()
	for range inflight {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				c, err := users.Submit(ctx, api.CreateTask{Input: "shout hello"})
				if err != nil {
					tb.Error(err)
					return
				}
				t, err := users.Wait(ctx, c.TaskID)
				if err != nil || t.State != api.StateCompleted || !strings.Contains(t.Result, "HELLO") {
					tb.Errorf("task %s: %v %s %q %q", c.TaskID, err, t.State, t.Result, t.Error)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				tasks = append(tasks, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(t0)
	end()
	events = l.Head() - head0
	rt = readRoundTrips(tb, l, head0)
	if len(rt.call) != n {
		tb.Fatalf("%d tool calls recorded for %d tasks", len(rt.call), n)
	}
	return rt, tasks, elapsed, events
}

// roundTrip is where the time of worker tool calls goes, per call, from
// the commit times of their events: the agent task's TOOL_CALL_STARTED
// and TOOL_CALL_COMPLETED, and its broker task's DISPATCH_CREATED (caused
// by the TOOL_CALL_STARTED), DISPATCH_ASSIGNED, DISPATCH_STARTED and
// DISPATCH_COMPLETED.
type roundTrip struct {
	call []time.Duration // TOOL_CALL_STARTED to TOOL_CALL_COMPLETED
	// The call in five parts: the agent creates the broker task, the
	// broker assigns it, the worker starts it, the worker completes it,
	// the agent records the outcome.
	create, assign, start, complete, record []time.Duration
}

var roundTripStages = []string{"create", "assign", "start", "complete", "record"}

func (r *roundTrip) stage(name string) []time.Duration {
	return *map[string]*[]time.Duration{"create": &r.create, "assign": &r.assign, "start": &r.start, "complete": &r.complete, "record": &r.record}[name]
}

// readRoundTrips reads the events after head0.
func readRoundTrips(tb testing.TB, l *eventlog.Log, head0 uint64) *roundTrip {
	type call struct{ started, created, assigned, begun, done, completed time.Time }
	calls := map[string]*call{}      // by agent task
	startedBy := map[string]string{} // TOOL_CALL_STARTED's id: its agent task
	byDispatch := map[string]*call{} // by broker task
	it := l.Scan(head0+1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		switch ev.Type {
		case string(fsm.ToolCallStarted):
			calls[ev.Stream] = &call{started: ev.Time}
			startedBy[ev.ID.String()] = ev.Stream
		case string(fsm.ToolCallCompleted):
			calls[ev.Stream].completed = ev.Time
		case string(fsm.ToolCallFailed):
			tb.Errorf("a tool call failed in %s", ev.Stream)
		case "DISPATCH_CREATED":
			c := calls[startedBy[ev.Causation.String()]]
			if c == nil {
				tb.Fatalf("broker task %s: no TOOL_CALL_STARTED caused it", ev.Stream)
			}
			c.created = ev.Time
			byDispatch[ev.Stream] = c
		case "DISPATCH_ASSIGNED":
			byDispatch[ev.Stream].assigned = ev.Time
		case "DISPATCH_STARTED":
			byDispatch[ev.Stream].begun = ev.Time
		case "DISPATCH_COMPLETED":
			byDispatch[ev.Stream].done = ev.Time
		}
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	r := &roundTrip{}
	for _, c := range calls {
		r.call = append(r.call, c.completed.Sub(c.started))
		r.create = append(r.create, c.created.Sub(c.started))
		r.assign = append(r.assign, c.assigned.Sub(c.created))
		r.start = append(r.start, c.begun.Sub(c.assigned))
		r.complete = append(r.complete, c.done.Sub(c.begun))
		r.record = append(r.record, c.completed.Sub(c.done))
	}
	return r
}

// TestWorkerToolBenchWorkload runs the round trip's workload small, so
// that the benchmark keeps working: every task completes with the
// worker's result, and each call's events come in their order. It checks
// no time.
func TestWorkerToolBenchWorkload(t *testing.T) {
	rt, tasks, _, _ := runToolRoundTrips(t, 20, 10, func() {}, func() {})
	if len(tasks) != 20 {
		t.Fatalf("%d tasks ended, want 20", len(tasks))
	}
	for _, st := range roundTripStages {
		for _, d := range rt.stage(st) {
			if d < 0 {
				t.Fatalf("%s: a call's events are out of order (%s)", st, d)
			}
		}
	}
}

// TestWorkerToolRoundTrip prints the round trip's figures at 100
// concurrent calls. It measures, it does not judge, so it runs only when
// asked:
//
//	PEGASUS_TOOL_BENCH=1 go test ./cmd/pegasusd -run TestWorkerToolRoundTrip -v
func TestWorkerToolRoundTrip(t *testing.T) {
	if os.Getenv("PEGASUS_TOOL_BENCH") == "" {
		t.Skip("set PEGASUS_TOOL_BENCH=1 to measure")
	}
	res := testing.Benchmark(BenchmarkWorkerToolRoundTrip)
	if res.N == 0 {
		t.Fatal("the benchmark did not run")
	}
	x := res.Extra
	t.Logf("%s", res)
	t.Logf("%d concurrent calls, %d calls: %.0f calls/s; call (TOOL_CALL_STARTED to TOOL_CALL_COMPLETED) p50 %.1f ms, p99 %.1f ms; task (submit to end) p50 %.1f ms, p99 %.1f ms",
		*benchToolCalls, res.N, x["calls/s"], x["call-p50-ms"], x["call-p99-ms"], x["task-p50-ms"], x["task-p99-ms"])
	var parts []string
	for _, st := range roundTripStages {
		parts = append(parts, fmt.Sprintf("%s %.1f ms", st, x[st+"-p50-ms"]))
	}
	t.Logf("the call's p50 by part: %s", strings.Join(parts, ", "))
}
