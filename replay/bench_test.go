package replay

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// The replay benchmarks run on one log built once per `go test -bench`
// run: -replay.tasks tasks (default 100,000, about 1.14 million events).
// By default it is built in a temporary directory and removed at the end;
// with -replay.dir it is kept there (replay-bench-<tasks>/db) and reused
// by later runs. They run only under -bench; normal tests never build it.
// See docs/benchmarks.md ("replay") for the figures and the command.
var (
	benchTasks = flag.Int("replay.tasks", 100000, "tasks in the replay benchmark log")
	benchDir   = flag.String("replay.dir", "", "keep the replay benchmark log under this directory and reuse it (default: a temporary directory, removed)")
)

var bench struct {
	once   sync.Once
	err    error
	dir    string
	remove bool
	events int
	tasks  []string
	// rawCPU is BenchmarkReplayRawScan's CPU per event in this run, 0
	// until it ran: the other benchmarks report their ratio to it.
	rawCPU float64
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench.remove {
		os.RemoveAll(bench.dir)
	}
	os.Exit(code)
}

// reuseBenchLog fills bench from a log built by an earlier run.
func reuseBenchLog(dir string) bool {
	l, err := eventlog.Open(dir, &eventlog.Options{ReadOnly: true})
	if err != nil {
		return false
	}
	defer l.Close()
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		bench.events++
		if ev := it.Event(); ev.Type == "TASK_CREATED" {
			bench.tasks = append(bench.tasks, ev.Stream)
		}
	}
	return it.Err() == nil && bench.events > 0
}

// benchLog returns the directory of the benchmark log, building it the
// first time: a generated history appended in batches, closed.
func benchLog(b *testing.B) string {
	b.Helper()
	bench.once.Do(func() {
		if *benchDir != "" {
			bench.dir = filepath.Join(*benchDir, fmt.Sprintf("replay-bench-%d", *benchTasks))
			if reuseBenchLog(filepath.Join(bench.dir, "db")) {
				fmt.Fprintf(os.Stderr, "replay bench log: %d events, %d tasks (reused %s)\n", bench.events, len(bench.tasks), bench.dir)
				return
			}
			bench.events, bench.tasks = 0, nil
			os.RemoveAll(bench.dir)
			bench.err = os.MkdirAll(bench.dir, 0o700)
		} else {
			bench.dir, bench.err = os.MkdirTemp("", "pegasus-replay-bench-")
			bench.remove = true
		}
		if bench.err != nil {
			return
		}
		start := time.Now()
		evs := replaytest.Generate(1, replaytest.Config{Tasks: *benchTasks, Concurrency: 64})
		gen := time.Since(start)
		dir := filepath.Join(bench.dir, "db")
		l, err := eventlog.Open(dir, nil)
		if err != nil {
			bench.err = err
			return
		}
		if err := replaytest.AppendAll(context.Background(), l, evs, 4000); err != nil {
			bench.err = err
			return
		}
		bench.err = l.Close()
		bench.events = len(evs)
		for _, ev := range evs {
			if ev.Type == "TASK_CREATED" {
				bench.tasks = append(bench.tasks, ev.Stream)
			}
		}
		fmt.Fprintf(os.Stderr, "replay bench log: %d events, %d tasks (generated in %v, loaded in %v)\n",
			len(evs), len(bench.tasks), gen.Round(time.Millisecond), (time.Since(start) - gen).Round(time.Millisecond))
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return filepath.Join(bench.dir, "db")
}

func benchOpen(b *testing.B, dir string, readOnly bool) *eventlog.Log {
	b.Helper()
	l, err := eventlog.Open(dir, &eventlog.Options{ReadOnly: readOnly})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// peakHeap samples the heap in use while fn runs and returns its peak.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	fn()
	close(stop)
	<-done
	return peak.Load()
}

// reportRate reports events/s, wall and CPU time per event and, when
// BenchmarkReplayRawScan ran earlier in the same process (select it with
// the others: -bench 'RawScan|Rebuild'), the CPU per event as a multiple
// of the raw scan's: the figure that compares across runs on a shared
// machine.
func reportRate(b *testing.B, events int, d, cpu time.Duration) {
	b.ReportMetric(float64(events)/d.Seconds(), "events/s")
	b.ReportMetric(float64(d.Nanoseconds())/float64(events), "ns/event")
	if cpu > 0 {
		perEvent := float64(cpu.Nanoseconds()) / float64(events)
		b.ReportMetric(perEvent, "cpu-ns/event")
		if bench.rawCPU > 0 {
			b.ReportMetric(perEvent/bench.rawCPU, "x-raw-scan-cpu")
		}
	}
}

// BenchmarkReplayRawScan is the floor: a plain Pebble iteration over every
// event record of the log, touching each value, no decoding.
func BenchmarkReplayRawScan(b *testing.B) {
	dir := benchLog(b)
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, FS: vfs.Default, Logger: quietLogger{}})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.ResetTimer()
	var total, cpu time.Duration
	for i := 0; i < b.N; i++ {
		start, c0 := time.Now(), cpuTime()
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{eventlog.PrefixEvent}, UpperBound: []byte{eventlog.PrefixEvent + 1}})
		if err != nil {
			b.Fatal(err)
		}
		n, sum := 0, 0
		for ok := it.First(); ok; ok = it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				b.Fatal(err)
			}
			sum += len(v)
			n++
		}
		it.Close()
		total += time.Since(start)
		cpu += cpuTime() - c0
		if n != bench.events || sum == 0 {
			b.Fatalf("scanned %d records, want %d", n, bench.events)
		}
	}
	bench.rawCPU = 0 // the raw scan reports no ratio to itself
	reportRate(b, bench.events*b.N, total, cpu)
	bench.rawCPU = float64(cpu.Nanoseconds()) / float64(bench.events*b.N)
}

// BenchmarkReplayLogScan reads every event through eventlog (checksum and
// envelope decoding), without folding.
func BenchmarkReplayLogScan(b *testing.B) {
	l := benchOpen(b, benchLog(b), true)
	defer l.Close()
	b.ResetTimer()
	var total, cpu time.Duration
	for i := 0; i < b.N; i++ {
		start, c0 := time.Now(), cpuTime()
		it := l.Scan(1, eventlog.Forward)
		n := 0
		for it.Next() {
			n++
		}
		if err := it.Err(); err != nil {
			b.Fatal(err)
		}
		it.Close()
		total += time.Since(start)
		cpu += cpuTime() - c0
		if n != bench.events {
			b.Fatalf("read %d events, want %d", n, bench.events)
		}
	}
	reportRate(b, bench.events*b.N, total, cpu)
}

// BenchmarkReplayRebuild is a full rebuild in memory: every event read,
// its body decoded and folded through fsm.Apply and every projection (what
// verify and the CLI do on a log without checkpoints).
func BenchmarkReplayRebuild(b *testing.B) {
	l := benchOpen(b, benchLog(b), true)
	defer l.Close()
	b.ResetTimer()
	var total, cpu time.Duration
	var peak uint64
	for i := 0; i < b.N; i++ {
		var v *View
		var d, c time.Duration
		p := peakHeap(func() {
			start, c0 := time.Now(), cpuTime()
			v, _ = NewView(nil)
			res, err := Fold(context.Background(), v, FromLog(l), FoldOptions{})
			d, c = time.Since(start), cpuTime()-c0
			if err != nil || res.Events != bench.events || res.Refused != 0 {
				b.Fatalf("fold: %d events, %d refused, %v", res.Events, res.Refused, err)
			}
		})
		total += d
		cpu += c
		peak = max(peak, p)
		runtime.KeepAlive(v)
	}
	reportRate(b, bench.events*b.N, total, cpu)
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

// BenchmarkReplayStartupFromZero is the daemon's start without usable
// checkpoints: Open folds everything, checkpointing (and evicting
// finished tasks) as it goes, and writes the final checkpoint.
func BenchmarkReplayStartupFromZero(b *testing.B) {
	l := benchOpen(b, benchLog(b), false)
	defer l.Close()
	ctx := context.Background()
	b.ResetTimer()
	var total, cpu time.Duration
	var peak uint64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := (&store{log: l}).clear(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var d, c time.Duration
		p := peakHeap(func() {
			start, c0 := time.Now(), cpuTime()
			_, rec, err := Open(ctx, l, nil)
			d, c = time.Since(start), cpuTime()-c0
			if err != nil || !rec.Rebuilt || rec.Folded != bench.events {
				b.Fatalf("open: %+v %v", rec, err)
			}
		})
		total += d
		cpu += c
		peak = max(peak, p)
	}
	reportRate(b, bench.events*b.N, total, cpu)
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(total.Seconds()/float64(b.N), "s/start")
}

// BenchmarkReplayStartupCheckpoint is the daemon's start with a checkpoint
// at the head: load the persisted projections and the active tasks, fold
// nothing.
func BenchmarkReplayStartupCheckpoint(b *testing.B) {
	dir := benchLog(b)
	ctx := context.Background()
	l := benchOpen(b, dir, false)
	if _, _, err := Open(ctx, l, nil); err != nil {
		b.Fatal(err)
	}
	l.Close()
	b.ResetTimer()
	var total, cpu time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		l := benchOpen(b, dir, false)
		b.StartTimer()
		start, c0 := time.Now(), cpuTime()
		_, rec, err := Open(ctx, l, nil)
		total += time.Since(start)
		cpu += cpuTime() - c0
		if err != nil || rec.Rebuilt || rec.Folded != 0 {
			b.Fatalf("open: %+v %v", rec, err)
		}
		b.StopTimer()
		l.Close()
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/start")
}

// BenchmarkReplayStateAt is one task's state at a random point in time
// (`pegasus-replay state TASK --at`), from the persisted snapshots.
func BenchmarkReplayStateAt(b *testing.B) {
	dir := benchLog(b)
	ctx := context.Background()
	l := benchOpen(b, dir, false)
	if _, _, err := Open(ctx, l, nil); err != nil { // make sure snapshots exist
		b.Fatal(err)
	}
	defer l.Close()
	r := FromLog(l)
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := bench.tasks[rng.IntN(len(bench.tasks))]
		tl, err := StateAt(ctx, r, id, Bound{})
		if err != nil {
			b.Fatal(err)
		}
		at := AtSeq(tl.Seq - uint64(rng.IntN(20)))
		if _, err := StateAt(ctx, r, id, at); err != nil && tl.Version > 1 {
			b.Fatal(err)
		}
	}
}

// BenchmarkFoldMemory folds a generated history held in memory (no Pebble):
// the cost of Decode, fsm.Apply and the projections alone. Small enough to
// run without -replay flags.
func BenchmarkFoldMemory(b *testing.B) {
	evs := replaytest.Generate(1, replaytest.Config{Tasks: 5000, Concurrency: 64, Finish: true})
	m, err := NewMemLog(evs...)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var total, cpu time.Duration
	for i := 0; i < b.N; i++ {
		start, c0 := time.Now(), cpuTime()
		v, _ := NewView(nil)
		if _, err := Fold(context.Background(), v, m, FoldOptions{}); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		cpu += cpuTime() - c0
	}
	reportRate(b, len(evs)*b.N, total, cpu)
}

// BenchmarkReplayVerify is `pegasus-replay verify` on the benchmark log:
// eventlog's audit (checksums, indexes), a fresh fold of every event with
// its checks, and the persisted projections and snapshots compared with
// it (they are written first if the log has none).
func BenchmarkReplayVerify(b *testing.B) {
	dir := benchLog(b)
	ctx := context.Background()
	l := benchOpen(b, dir, false)
	defer l.Close()
	if _, _, err := Open(ctx, l, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var total, cpu time.Duration
	var peak uint64
	reloads := 0
	for i := 0; i < b.N; i++ {
		var d, c time.Duration
		p := peakHeap(func() {
			start, c0 := time.Now(), cpuTime()
			rep, err := Verify(ctx, l, nil)
			d, c = time.Since(start), cpuTime()-c0
			if err != nil || !rep.OK() || rep.Events != bench.events {
				b.Fatalf("verify: %v %v", rep.Summary(), err)
			}
			reloads += rep.reloads
		})
		total += d
		cpu += c
		peak = max(peak, p)
	}
	reportRate(b, bench.events*b.N, total, cpu)
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(reloads)/float64(b.N), "tasks-read-back")
}
