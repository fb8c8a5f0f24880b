package main

import (
	"context"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/internal/brokerbench"
)

// The agent's workload (docs/benchmarks.md "Tasks through the HTTP API"):
// internal/brokerbench.RunTasks against a daemon in-process on loopback,
// with the offline model, every append synced. pegasus-bench -tasks runs
// the same workload against pegasusd binaries, with the figures kept in
// the docs.

// BenchmarkTasksThroughput: 16 clients create b.N no-op tasks that the
// agent runs at the daemon's defaults (5 active tasks).
//
//	go test ./cmd/pegasusd -run '^$' -bench TasksThroughput -benchtime 10000x
func BenchmarkTasksThroughput(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := testConfig(b)
	cfg.server.MaxBodyBytes = 1 << 20
	td := startDaemon(b, cfg)
	b.ResetTimer()
	res, err := brokerbench.RunTasks(ctx, brokerbench.Config{URL: td.url, Tasks: b.N})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.PerSec, "tasks/s")
	st := td.d.engine.Log().Stats()
	b.ReportMetric(float64(st.Commits)/float64(b.N), "commits/task")
}

// TestTasksBenchWorkload runs both shapes of the agent's workload small,
// so that the benchmark keeps working: every task is created, run to
// completion by the agent, seen completed and, in the open loop, timed.
func TestTasksBenchWorkload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, bc := range []brokerbench.Config{
		{Tasks: 60, Clients: 4},
		{Rate: 200, Duration: 100 * time.Millisecond},
	} {
		cfg := testConfig(t)
		cfg.server.MaxBodyBytes = 1 << 20
		td := startDaemon(t, cfg)
		bc.URL = td.url
		res, err := brokerbench.RunTasks(ctx, bc)
		if err != nil {
			t.Fatal(err)
		}
		want := bc.Tasks
		if bc.Rate > 0 {
			want = 20
			if res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 {
				t.Fatalf("%+v: %s", bc, res)
			}
		}
		if res.Tasks != want || res.PerSec <= 0 {
			t.Fatalf("%+v: %s", bc, res)
		}
		// The client saw the completions on its own subscription; the
		// agent's fold is another, which may not have folded them yet.
		if err := td.d.engine.Agent().View().WaitFor(ctx, td.d.engine.Log().Head()); err != nil {
			t.Fatal(err)
		}
		if st := td.d.engine.Agent().View().Stats(); st.Completed != int64(want) || st.Failed != 0 {
			t.Fatalf("stats after the run: %d completed, %d failed, want %d", st.Completed, st.Failed, want)
		}
	}
}
