package main

import (
	"context"
	"testing"

	"github.com/pegasus-engine/pegasus/internal/brokerbench"
)

// TestBrokerBenchRepeatedRuns: runs of the broker's workload one after the
// other against one daemon (pegasus-bench -broker -broker-url, each run
// with workers of its own) each end: the workers of a run that ended get
// no task of the next one.
func TestBrokerBenchRepeatedRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cfg := testConfig(t)
	cfg.server.MaxBodyBytes = 1 << 20
	td := startDaemon(t, cfg)
	for _, prefix := range []string{"repeat-a-", "repeat-b-", "repeat-c-"} {
		bc := brokerbench.Config{URL: td.url, Tasks: 40, Clients: 4, Workers: 2, MaxTasks: 2, Prefix: prefix}
		res, err := brokerbench.Run(ctx, bc)
		if err != nil {
			t.Fatalf("run of %s: %v", prefix, err)
		}
		if res.Tasks != bc.Tasks {
			t.Fatalf("run of %s: %d tasks done, want %d", prefix, res.Tasks, bc.Tasks)
		}
	}
}
