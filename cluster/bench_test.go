package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// BenchmarkAppend compares synced appends of one small event: the
// embedded log alone, and the replicated log on one server (R1) and on
// three (R3), each server fsyncing every write, and R3 with JetStream's
// default fsync policy (R3-nosync: durability by the quorum), and R3 with
// the local copy unsynced, as pegasusd --cluster opens it (R3-copy-unsynced).
// "serial" is one appender;
// "parallel" is GOMAXPROCS*16 appenders on distinct streams (group commit
// in the embedded log, concurrent proposals in JetStream). docs/cluster.md
// has the figures:
//
//	go test -run '^$' -bench BenchmarkAppend -benchtime 2000x ./cluster/
func BenchmarkAppend(b *testing.B) {
	type appender func(ctx context.Context, stream string, exp eventlog.ExpectedVersion, evs ...eventlog.Event) (eventlog.AppendResult, error)
	setups := []struct {
		name     string
		servers  int
		sync     bool
		unsynced bool // the local copy
	}{{"embedded", 0, true, false}, {"R1", 1, true, false}, {"R3", 3, true, false}, {"R3-nosync", 3, false, false}, {"R3-copy-unsynced", 3, true, true}}
	for _, s := range setups {
		for _, parallel := range []bool{false, true} {
			mode := "serial"
			if parallel {
				mode = "parallel"
			}
			b.Run(s.name+"/"+mode, func(b *testing.B) {
				l, err := eventlog.Open(b.TempDir(), &eventlog.Options{Unsynced: s.unsynced})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				app := appender(l.Append)
				if s.servers > 0 {
					nc := natstest.StartSync(b, s.servers, s.sync)
					rl, err := OpenReplicated(context.Background(), l, LogOptions{URL: nc.URL(), Replicas: s.servers})
					if err != nil {
						b.Fatal(err)
					}
					defer rl.Close()
					app = rl.Append
				}
				body := []byte("0123456789abcdef0123456789abcdef")
				ctx := context.Background()
				b.ResetTimer()
				if !parallel {
					for i := range b.N {
						if _, err := app(ctx, fmt.Sprintf("t%d", i%64), eventlog.Any, eventlog.Event{Type: "STEP", Body: body}); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					var n atomic.Int64
					b.SetParallelism(16)
					b.RunParallel(func(pb *testing.PB) {
						stream := fmt.Sprintf("p%d", n.Add(1))
						for pb.Next() {
							if _, err := app(ctx, stream, eventlog.Any, eventlog.Event{Type: "STEP", Body: body}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
			})
		}
	}
}
