package main

import (
	"context"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/internal/brokerbench"
)

// The broker's benchmarks (docs/benchmarks.md "The broker"): the workload
// of internal/brokerbench against a daemon in-process on loopback, at the
// broker's defaults, every append synced. pegasus-bench -broker runs the
// same workload against a pegasusd binary.

// BenchmarkBrokerThroughput: 16 clients create b.N no-op tasks while 8
// workers (max_tasks 4) long-poll and complete each with one request. It
// reports tasks/s and p50/p99 create-to-complete.
//
//	go test ./cmd/pegasusd -run '^$' -bench BrokerThroughput -benchtime 10000x
func BenchmarkBrokerThroughput(b *testing.B) {
	benchBroker(b, brokerbench.Config{Tasks: b.N})
}

// BenchmarkBrokerLatency: an open loop offering 200 tasks/s (b.N tasks in
// all) to the same 8 workers; latency counts from each task's due time.
//
//	go test ./cmd/pegasusd -run '^$' -bench BrokerLatency -benchtime 2000x
func BenchmarkBrokerLatency(b *testing.B) {
	const rate = 200
	benchBroker(b, brokerbench.Config{Rate: rate, Duration: time.Duration(b.N) * time.Second / rate})
}

func benchBroker(b *testing.B, bc brokerbench.Config) {
	cfg := testConfig(b)
	cfg.server.MaxBodyBytes = 1 << 20
	cfg.engine.Broker.AgentWorker = true // as at pegasusd's defaults: the built-in agent is a worker too
	td := startDaemon(b, cfg)
	bc.URL = td.url
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b.ResetTimer()
	res, err := brokerbench.Run(ctx, bc)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.PerSec, "tasks/s")
	b.ReportMetric(float64(res.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(res.P99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(res.AssignP99.Microseconds())/1000, "assign-p99-ms")
	st := td.d.engine.Log().Stats()
	b.ReportMetric(float64(st.Commits)/res.Elapsed.Seconds(), "fsyncs/s")
	b.ReportMetric(float64(st.Events)/float64(st.Commits), "events/fsync")
	b.ReportMetric(float64(st.GatherTimeouts)/float64(st.Commits), "gather-timeouts/fsync")
}

// TestBrokerBenchWorkload runs both shapes of the benchmark's workload
// small, so that the benchmark keeps working: every task is created,
// assigned, completed and measured.
func TestBrokerBenchWorkload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, bc := range []brokerbench.Config{
		{Tasks: 60, Clients: 4, Workers: 3, MaxTasks: 2},
		{Rate: 200, Duration: 100 * time.Millisecond, Workers: 2},
	} {
		cfg := testConfig(t)
		cfg.server.MaxBodyBytes = 1 << 20
		td := startDaemon(t, cfg)
		bc.URL = td.url
		res, err := brokerbench.Run(ctx, bc)
		if err != nil {
			t.Fatal(err)
		}
		want := bc.Tasks
		if bc.Rate > 0 {
			want = 20
		}
		if res.Tasks != want || res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 || res.PerSec <= 0 {
			t.Fatalf("%+v: %s", bc, res)
		}
		var st struct {
			ByStatus map[string]int `json:"by_status"`
		}
		td.do("GET", "/api/v1/stats", "", "X-Agent-ID", "admin").json(t, &st)
		for s, n := range st.ByStatus {
			if s == "completed" && n != want || s != "completed" && n != 0 {
				t.Fatalf("stats after the run: %+v", st.ByStatus)
			}
		}
	}
}
