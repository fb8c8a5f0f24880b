package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/internal/brokerbench"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/traces"
	"github.com/pegasus-engine/pegasus/traces/otlp"
	"github.com/pegasus-engine/pegasus/traces/otlp/jaegertest"
)

var traceBenchRounds = flag.Int("trace-bench-rounds", 5, "off/on rounds of BenchmarkTracesOverhead")

var traceBenchSink = flag.String("trace-bench-sink", "jaeger", "where BenchmarkTracesOverhead exports: jaeger (a real one on the same machine) discard (an OTLP endpoint that answers 200 and reads nothing) or none (the export off in both kinds of round: the comparison's noise)")

// BenchmarkTracesOverhead is the agent's workload (BenchmarkTasksThroughput:
// 16 clients, the daemon's defaults, every append synced) with the live
// trace export off and on, alternated within one run (off, on, on, off,
// off, on, ...; -trace-bench-rounds of b.N tasks each), so the ratio is measured under one load. It
// reports both rates and on/off.
//
//	go test ./cmd/pegasusd -run '^$' -bench TracesOverhead -benchtime 3000x
func BenchmarkTracesOverhead(b *testing.B) {
	endpoint := ""
	switch *traceBenchSink {
	case "jaeger":
		endpoint = jaegertest.Start(b).OTLP
	case "discard":
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		}))
		b.Cleanup(srv.Close)
		endpoint = srv.URL
	case "none": // both kinds of round off: the noise of the comparison
	default:
		b.Fatalf("-trace-bench-sink %q: jaeger, discard or none", *traceBenchSink)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// The daemons run in this process: give it the collector's setting
	// pegasusd runs with (gc.go), unless GOGC says otherwise.
	if tuneGC(os.Getenv, slog.New(slog.DiscardHandler)) != 0 {
		defer debug.SetGCPercent(100)
	}
	var offCPU, onCPU time.Duration
	var offCommits, onCommits uint64
	run := func(on bool) float64 {
		// The round's goroutines (the daemon's, its clients', the
		// export's) carry its kind: a CPU profile of the run tells the
		// kinds apart (go tool pprof -tagfocus traces=on).
		kind := "off"
		if on {
			kind = "on"
		}
		pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("traces", kind)))
		defer pprof.SetGoroutineLabels(context.Background())
		cfg := testConfig(b)
		cfg.server.MaxBodyBytes = 1 << 20
		if on && endpoint != "" {
			cfg.engine.Traces = engine.TracesOptions{Enabled: true, OTLP: otlp.Options{Endpoint: endpoint}}
		}
		td := startDaemon(b, cfg)
		defer td.stop()
		c0 := processCPU(b)
		res, err := brokerbench.RunTasks(ctx, brokerbench.Config{URL: td.url, Tasks: b.N})
		if err != nil {
			b.Fatal(err)
		}
		if on && endpoint != "" { // the export kept up: every ending sent (the queue is drained)
			waitExported(b, td)
		}
		commits := td.d.engine.Log().Stats().Commits
		if on {
			onCPU += processCPU(b) - c0
			onCommits += commits
		} else {
			offCPU += processCPU(b) - c0
			offCommits += commits
		}
		return res.PerSec
	}
	b.ResetTimer()
	var off, on []float64
	for i := range *traceBenchRounds {
		// Off then on, then on then off: the daemon that runs second in a
		// pair is not always the same kind.
		if i%2 == 0 {
			off = append(off, run(false))
			on = append(on, run(true))
		} else {
			on = append(on, run(true))
			off = append(off, run(false))
		}
	}
	b.StopTimer()
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	b.ReportMetric(mean(off), "off-tasks/s")
	b.ReportMetric(mean(on), "on-tasks/s")
	b.ReportMetric(mean(on)/mean(off), "on/off")
	tasks := float64(b.N * *traceBenchRounds)
	b.ReportMetric(float64(offCPU.Microseconds())/tasks, "off-cpu-µs/task")
	b.ReportMetric(float64(onCPU.Microseconds())/tasks, "on-cpu-µs/task")
	b.ReportMetric(float64(offCommits)/tasks, "off-commits/task")
	b.ReportMetric(float64(onCommits)/tasks, "on-commits/task")
	b.Logf("off %v, on %v tasks/s (sink %s)", fmtRates(off), fmtRates(on), *traceBenchSink)
}

// processCPU is the process's CPU time (user and system, every thread:
// the garbage collector's too). A round's CPU per task, the export's drain
// included, says what the export costs even when the machine's load moves
// the rates.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fmtRates(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(s, " ")
}

// waitExported waits until the daemon's trace export has sent every
// ending the log holds.
func waitExported(b *testing.B, td *testDaemon) {
	b.Helper()
	head := td.d.engine.Log().Head()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if td.d.engine.TracesCursor() >= head { // read in process: a /metrics scrape per poll would cost more than the export
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the export did not reach %d in 5 minutes", head)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkTracesPipeline measures the CPU the live export spends per task,
// away from the daemon's own noise: the events of 500 of the agent
// workload's tasks, taken from a daemon's log, go through what the
// exporter does with them (gathering each tree while reading, mapping it
// at its ending, converting the spans and sending them in batches to an
// endpoint that discards). ns/op is per task; cpu-ns/task is the
// process's CPU per task, the garbage collector's and the endpoint's
// included.
//
//	go test ./cmd/pegasusd -run '^$' -bench TracesPipeline
func BenchmarkTracesPipeline(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	b.Cleanup(srv.Close)
	cfg := testConfig(b)
	td := startDaemon(b, cfg)
	ctx := context.Background()
	const tasks = 500
	if _, err := brokerbench.RunTasks(ctx, brokerbench.Config{URL: td.url, Tasks: tasks}); err != nil {
		b.Fatal(err)
	}
	var evs []eventlog.Event
	it := td.d.engine.Log().Scan(1, eventlog.Forward)
	for it.Next() {
		evs = append(evs, it.Event())
	}
	if err := it.Close(); err != nil {
		b.Fatal(err)
	}
	td.stop()
	b.Logf("%d events for %d tasks", len(evs), tasks)
	exp, err := otlp.New(ctx, otlp.Options{Endpoint: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	defer exp.Shutdown(ctx)
	b.ReportAllocs()
	b.ResetTimer()
	c0 := processCPU(b)
	sent, spans, attrs, marks := 0, 0, 0, 0
	var batch otlp.Batch // as the exporter's: kept from one request to the next
	var taken [][]eventlog.Event
	g := replay.NewTraceGatherer(4<<20, 64<<20)
	send := func() {
		if err := exp.Export(ctx, batch.Spans()); err != nil {
			b.Fatal(err)
		}
		batch.Reset()
		for _, t := range taken { // as the exporter does once a request is sent
			g.Recycle(t)
		}
		taken = taken[:0]
	}
	for sent < b.N {
		for _, ev := range evs {
			g.Add(ev, ev.Version == 1 && otlp.IsRoot(ev))
			if !otlp.Ends(ev) {
				continue
			}
			if tree := g.Take(ev.Stream); tree != nil {
				taken = append(taken, tree)
				n := batch.AddOwned(tree, ev.Stream, ev.Seq, false, traces.Options{})
				for _, s := range batch.Spans()[len(batch.Spans())-n:] {
					attrs += len(s.Attrs)
					marks += len(s.Events)
				}
				spans += n
				sent++
				if sent%256 == 0 || sent == b.N { // the live export's requests carry up to 256 traces
					send()
				}
				if sent == b.N {
					break
				}
			}
		}
		if len(batch.Spans()) > 0 {
			send()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-c0).Nanoseconds())/float64(sent), "cpu-ns/task")
	b.ReportMetric(float64(spans)/float64(sent), "spans/task")
	b.ReportMetric(float64(attrs)/float64(sent), "attrs/task")
	b.ReportMetric(float64(marks)/float64(sent), "span-events/task")
}
