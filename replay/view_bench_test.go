package replay

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// The View's own share of a daemon's work per event: the live fold with a
// hook (what View.Follow does for the agent) and a checkpoint of finished
// tasks (store.write). Small enough to run without -replay flags.

// viewBenchLog returns a log holding a generated history of tasks tasks,
// every one finished, and its events.
func viewBenchLog(b *testing.B, tasks int) (*eventlog.Log, []eventlog.Event) {
	b.Helper()
	evs := replaytest.Generate(1, replaytest.Config{Tasks: tasks, Concurrency: 64, Finish: true})
	l, err := eventlog.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	if err := replaytest.AppendAll(context.Background(), l, evs, 4000); err != nil {
		b.Fatal(err)
	}
	return l, evs
}

// BenchmarkFoldLive folds a log through Live with a hook, as View.Follow
// does: per event, the subscription, decoding and the projections.
func BenchmarkFoldLive(b *testing.B) {
	l, evs := viewBenchLog(b, 2000)
	ctx := context.Background()
	hook := func(*Change) error { return nil }
	b.ReportAllocs()
	b.ResetTimer()
	var total, cpu time.Duration
	for i := 0; i < b.N; i++ {
		start, c0 := time.Now(), cpuTime()
		v, _ := NewView(nil)
		res, err := Fold(ctx, v, Live(l), FoldOptions{Bound: AtSeq(l.Head()), OnChange: hook})
		if err != nil || res.Events != len(evs) {
			b.Fatalf("fold: %d events of %d, %v", res.Events, len(evs), err)
		}
		total += time.Since(start)
		cpu += cpuTime() - c0
	}
	reportRate(b, len(evs)*b.N, total, cpu)
}

// BenchmarkCheckpointFinished writes checkpoints of 1,000 finished tasks
// (their records, summaries, progress and queue keys) into a log: the
// encoding and the write of store.write, ingested as sstables (as a
// checkpoint of that size is) or committed as one synced batch.
func BenchmarkCheckpointFinished(b *testing.B) {
	const tasks = 1000
	l, evs := viewBenchLog(b, tasks)
	p := pendingOf(b, evs)
	if len(p.Tasks) != tasks {
		b.Fatalf("pending: %d tasks", len(p.Tasks))
	}
	for _, c := range []struct {
		name   string
		ingest int
	}{{"ingest", 0}, {"batch", 1 << 30}} {
		b.Run(c.name, func(b *testing.B) {
			st := &store{log: l, ingest: c.ingest, keep: DefaultMemoryBudget / 16} // as Open makes it
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				// Tasks of their own each time, with later ids, as the
				// tasks each checkpoint of a running daemon writes.
				b.StopTimer()
				q := p
				q.Tasks = slices.Clone(p.Tasks)
				for j := range q.Tasks {
					r := &q.Tasks[j]
					r.Task.ID = fmt.Sprintf("%s%08d", c.name[:1], i) + r.Task.ID[9:]
					r.Summary.ID = r.Task.ID
				}
				b.StartTimer()
				c0 := cpuTime()
				if err := st.write(ctx, &q, "bench"); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - c0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*tasks), "cpu-ns/task")
			b.ReportMetric(float64(st.written.Load())/float64(b.N*tasks), "B-written/task")
		})
	}
}

// BenchmarkRefoldTail is what a checkpoint interval costs at the next
// start: Open on a log whose persisted projections are tail events
// behind its head (the most Options.CheckpointEvery leaves when the
// daemon stops without its last checkpoint), with tasks of the agent's
// size running 128 at a time. Open is read-only, so every iteration
// loads the same checkpoint and folds the same tail. It reports the
// time of the start, the View's estimated memory once folded and the
// peak Go heap.
func BenchmarkRefoldTail(b *testing.B) {
	evs := replaytest.Generate(1, replaytest.Config{Tasks: 10000, Concurrency: 128, Finish: true})
	const head = 2000 // folded and checkpointed before the tail
	for _, tail := range []int{10000, 40000} {
		b.Run(fmt.Sprintf("tail=%d", tail), func(b *testing.B) {
			if head+tail > len(evs) {
				b.Fatalf("%d events generated, %d needed", len(evs), head+tail)
			}
			ctx := context.Background()
			dir := b.TempDir()
			l := benchOpen(b, dir, false)
			if err := replaytest.AppendAll(ctx, l, evs[:head], 1000); err != nil {
				b.Fatal(err)
			}
			if _, _, err := Open(ctx, l, nil); err != nil {
				b.Fatal(err)
			}
			if err := replaytest.AppendAll(ctx, l, evs[head:head+tail], 1000); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var total time.Duration
			var peak uint64
			var use int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				start := time.Now()
				b.StartTimer()
				p := peakHeap(func() {
					v, rec, err := Open(ctx, l, &Options{ReadOnly: true})
					if err != nil || rec.Rebuilt || rec.Folded != tail {
						b.Fatalf("open: folded %d of %d (%+v), %v", rec.Folded, tail, rec, err)
					}
					use = v.MemoryUse().Total()
				})
				total += time.Since(start)
				peak = max(peak, p)
			}
			b.StopTimer()
			l.Close()
			b.ReportMetric(total.Seconds()/float64(b.N), "s/start")
			b.ReportMetric(float64(use)/(1<<20), "view-MiB")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// BenchmarkCheckpointLockHeld is the part of a checkpoint of 1,000
// finished tasks that holds the View's lock, during which the fold (and
// every WaitFor behind it) waits: taking what changed
// (projection.Set.PendingReusing) and, once written, forgetting it and
// evicting the finished tasks (projection.Set.Flushed).
func BenchmarkCheckpointLockHeld(b *testing.B) {
	evs := replaytest.Generate(1, replaytest.Config{Tasks: 1000, Concurrency: 64, Finish: true})
	fes := make([]fsm.Event, len(evs))
	for i, raw := range evs {
		fe, err := Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		fes[i] = fe
	}
	var p projection.Pending
	b.ReportAllocs()
	b.ResetTimer()
	var held time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		set := projection.NewSet(projection.Options{SnapshotEvery: 32})
		for _, fe := range fes {
			set.Apply(fe)
		}
		b.StartTimer()
		start := time.Now()
		if err := set.PendingReusing(&p); err != nil {
			b.Fatal(err)
		}
		seq := p.Seq
		held += time.Since(start)
		p.Reset()
		start = time.Now()
		set.Flushed(seq)
		held += time.Since(start)
	}
	b.ReportMetric(float64(held.Microseconds())/float64(b.N), "held-µs")
}
