package replay

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// BenchmarkAppendDuringCheckpoint measures what POST /v1/tasks waits for:
// one synced append of a new task's input, then View.WaitFor until the
// live fold has folded it. Every tenth operation first appends (unmeasured)
// eight tasks with 128 KiB inputs, the same in both sub-benchmarks. "idle"
// never checkpoints; "checkpointing" then starts a checkpoint of them
// (13 KiB: the records refer to the inputs in the log; 1 MiB, ingested as
// an sstable, when they copied them) that runs during the next ten
// measured operations.
// It reports the p50, p99 and worst latency of the measured operations,
// and the bytes (keys and values) each checkpoint wrote.
// See docs/benchmarks.md for the figures and the command.
func BenchmarkAppendDuringCheckpoint(b *testing.B) {
	for _, mode := range []string{"idle", "checkpointing"} {
		b.Run(mode, func(b *testing.B) { benchAppendLatency(b, mode == "checkpointing") })
	}
}

func benchAppendLatency(b *testing.B, checkpointing bool) {
	ctx := context.Background()
	l, err := eventlog.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	// No checkpoint but the ones this benchmark runs.
	v, _, err := Open(ctx, l, &Options{CheckpointEvery: 1 << 30, MemoryBudget: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- v.Follow(fctx, l, nil) }()
	defer func() {
		stopFollow()
		if err := <-followed; err != nil && !errors.Is(err, context.Canceled) {
			b.Error(err)
		}
	}()

	large := strings.Repeat("a large input ", (128<<10)/14)
	submit := func(text string) (uint64, error) {
		body, err := fsm.Encode(&fsm.Input{Kind: fsm.MessageReceived, Text: text, Source: "bench", TaskType: "general"})
		if err != nil {
			return 0, err
		}
		id := l.NewID()
		res, err := l.Append(ctx, id.String(), eventlog.NoStream, eventlog.Event{
			ID: id, Type: string(fsm.MessageReceived), Correlation: id, Schema: fsm.SchemaVersion, Body: body,
		})
		return res.LastSeq, err
	}

	var checkpoints int
	var running sync.WaitGroup            // the checkpoint of the last window
	lat := make([]time.Duration, 0, b.N)  // append and fold
	fold := make([]time.Duration, 0, b.N) // of which the wait for the fold
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%10 == 0 {
			running.Wait()
			var last uint64
			for range 8 {
				if last, err = submit(large); err != nil {
					b.Fatal(err)
				}
			}
			if err := v.WaitFor(ctx, last); err != nil {
				b.Fatal(err)
			}
			if checkpointing {
				checkpoints++
				running.Go(func() {
					if err := v.Checkpoint(ctx); err != nil {
						b.Error(err)
					}
				})
			}
		}
		start := time.Now()
		seq, err := submit("what time is it?")
		if err != nil {
			b.Fatal(err)
		}
		appended := time.Now()
		if err := v.WaitFor(ctx, seq); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		fold = append(fold, time.Since(appended))
	}
	b.StopTimer()
	running.Wait()
	slices.Sort(lat)
	slices.Sort(fold)
	pct := func(d []time.Duration, p float64) float64 {
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(lat, 0.50), "p50-ms")
	b.ReportMetric(pct(lat, 0.99), "p99-ms")
	b.ReportMetric(pct(lat, 1), "max-ms")
	b.ReportMetric(pct(fold, 0.99), "fold-p99-ms")
	b.ReportMetric(float64(checkpoints), "checkpoints")
	if checkpoints > 0 {
		b.ReportMetric(float64(v.st.written.Load())/float64(checkpoints)/1024, "KiB/checkpoint")
	}
}
