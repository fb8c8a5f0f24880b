package eventlog_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// BenchmarkAppendDuringIngest measures what a checkpoint's IngestAux does
// to the appends committed beside it: 16 writers append one 200-byte event
// each, synced, without pause; after every 400 appends a checkpoint-shaped
// IngestAux (800 tasks' records under proj/t/, proj/s/, proj/g/, proj/q/,
// proj/a/, 70% of them new ids, 30% rewrites; ~1.9 MB, SplitTables(7))
// runs; in "after-write" a small WriteAux of a proj/ key (a small
// checkpoint's) precedes each, so that the memtable holds a key the
// ingested tables overlap. b.N counts ingests. It reports the p50, p99
// and worst latency of the appends that overlapped an ingest ("in-"), the
// p99 of the others, the mean time of an ingest and the appends per
// second over the run.
// See docs/benchmarks.md for the figures and the command.
func BenchmarkAppendDuringIngest(b *testing.B) {
	for _, mode := range []string{"ingest", "after-write"} {
		b.Run(mode, func(b *testing.B) { benchAppendDuringIngest(b, mode == "after-write") })
	}
}

func benchAppendDuringIngest(b *testing.B, afterWrite bool) {
	ctx := context.Background()
	l, err := eventlog.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()

	type span struct{ start, end time.Time }
	const writers, every = 16, 400
	var (
		stop    atomic.Bool
		count   atomic.Int64
		target  atomic.Int64
		tick    = make(chan struct{}, 1)
		wg      sync.WaitGroup
		appends = make([][]span, writers)
		body    = make([]byte, 200)
	)
	target.Store(every)
	for w := range writers {
		wg.Go(func() {
			stream := fmt.Sprintf("writer-%d", w)
			for !stop.Load() {
				start := time.Now()
				if _, err := l.Append(ctx, stream, eventlog.Any, eventlog.Event{Type: "TICK", Body: body}); err != nil {
					b.Error(err)
					return
				}
				appends[w] = append(appends[w], span{start, time.Now()})
				if count.Add(1) >= target.Load() {
					select {
					case tick <- struct{}{}:
					default:
					}
				}
			}
		})
	}

	rng := rand.New(rand.NewSource(1))
	value := func(n int) []byte { return make([]byte, n) }
	rec, sum, prog := value(1500), value(200), value(600)
	next := 0 // task ids handed out so far
	var ingests []span
	b.ResetTimer()
	begin := time.Now()
	for range b.N {
		<-tick
		ids := make([]int, 0, 800)
		for range 240 {
			if next > 0 {
				ids = append(ids, rng.Intn(next))
			}
		}
		rewrites := len(ids)
		for range 800 - rewrites {
			ids = append(ids, next)
			next++
		}
		if afterWrite {
			if err := l.WriteAux(ctx, func(a *eventlog.AuxBatch) error {
				a.Set([]byte("proj/stats"), value(300))
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		err := l.IngestAux(ctx, func(a *eventlog.AuxBatch) error {
			a.SplitTables(len("proj/t/"))
			for i, id := range ids {
				key := func(prefix string) []byte { return fmt.Appendf(nil, "%s%016x", prefix, id) }
				a.Set(key("proj/t/"), rec)
				a.Set(key("proj/s/"), sum)
				a.Set(key("proj/g/"), prog)
				a.Set(fmt.Appendf(nil, "proj/q/general/%02d/%016x", id%7, id), nil)
				if i < rewrites { // finished since
					a.Delete(key("proj/a/"))
				} else {
					a.Set(key("proj/a/"), nil)
				}
			}
			a.Set([]byte("proj/stats"), value(300))
			a.Set([]byte("proj/meta"), value(50))
			return nil
		})
		ingests = append(ingests, span{start, time.Now()})
		if err != nil {
			b.Fatal(err)
		}
		target.Store(count.Load() + every)
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(begin)
	b.StopTimer()

	var in, out []time.Duration
	var total time.Duration
	for _, s := range ingests {
		total += s.end.Sub(s.start)
	}
	n := 0
	for _, w := range appends {
		n += len(w)
		for _, a := range w {
			overlaps := slices.ContainsFunc(ingests, func(s span) bool { return a.start.Before(s.end) && a.end.After(s.start) })
			if overlaps {
				in = append(in, a.end.Sub(a.start))
			} else {
				out = append(out, a.end.Sub(a.start))
			}
		}
	}
	pct := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(in, 0.50), "in-p50-ms")
	b.ReportMetric(pct(in, 0.99), "in-p99-ms")
	b.ReportMetric(pct(in, 1), "in-max-ms")
	b.ReportMetric(pct(out, 0.99), "out-p99-ms")
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ingest-ms")
	b.ReportMetric(float64(n)/elapsed.Seconds(), "appends/s")
}
