package eventlog_test

import (
	"context"
	"flag"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/pegasus-engine/pegasus/internal/bench"
)

// The benchmarks run on a temp dir on the real disk with synced commits,
// against the log ("eventlog") and raw Pebble writing the same keys ("raw").
// cmd/pegasus-bench runs the same workloads side by side and prints ratios;
// see docs/benchmarks.md.

func eachStore(b *testing.B, fn func(b *testing.B, open func() bench.Store)) {
	for _, o := range bench.Openers {
		name := "eventlog"
		if o.Name != name {
			name = "raw"
		}
		b.Run(name, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "db")
			var s bench.Store
			open := func() bench.Store {
				if s != nil {
					s.Close()
				}
				var err error
				if s, err = o.Open(dir); err != nil {
					b.Fatal(err)
				}
				return s
			}
			fn(b, open)
			if s != nil {
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchAppend(b *testing.B, writers, perAppend int) {
	eachStore(b, func(b *testing.B, open func() bench.Store) {
		s := open()
		b.SetBytes(int64(len(bench.Body)))
		b.ResetTimer()
		if err := bench.AppendN(context.Background(), s, writers, perAppend, b.N); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkAppendOne: one event per synced append, one writer. b.N counts
// events.
func BenchmarkAppendOne(b *testing.B) { benchAppend(b, 1, 1) }

// BenchmarkAppendBatch100: batches of 100 events per append, one writer.
func BenchmarkAppendBatch100(b *testing.B) { benchAppend(b, 1, 100) }

// BenchmarkAppend16Writers: 16 concurrent writers, one event per append.
func BenchmarkAppend16Writers(b *testing.B) { benchAppend(b, 16, 1) }

// BenchmarkAppend64Writers: 64 concurrent writers, one event per append.
func BenchmarkAppend64Writers(b *testing.B) { benchAppend(b, 64, 1) }

// BenchmarkScan: full forward scan with decode and checksum of a
// 200,000-event log. b.N counts full scans; events/s is reported.
func BenchmarkScan(b *testing.B) {
	eachStore(b, func(b *testing.B, open func() bench.Store) {
		if err := bench.Load(context.Background(), open(), bench.ScanEvents/100, 100, 1000); err != nil {
			b.Fatal(err)
		}
		s := open() // from sstables, as after a restart
		b.ResetTimer()
		for range b.N {
			n, err := s.ScanAll()
			if err != nil || n != bench.ScanEvents {
				b.Fatalf("scanned %d events: %v", n, err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)*bench.ScanEvents/b.Elapsed().Seconds(), "events/s")
	})
}

// BenchmarkReadStream: read one task's 20 events, spread over a log of
// 100,000 events. b.N counts stream reads.
func BenchmarkReadStream(b *testing.B) {
	eachStore(b, func(b *testing.B, open func() bench.Store) {
		if err := bench.Load(context.Background(), open(), bench.HistoryStreams, bench.HistoryEvents, 500); err != nil {
			b.Fatal(err)
		}
		s := open()
		rng := rand.New(rand.NewSource(1))
		b.ResetTimer()
		for range b.N {
			n, err := s.ReadStream(bench.StreamName(rng.Intn(bench.HistoryStreams)))
			if err != nil || n != bench.HistoryEvents {
				b.Fatalf("read %d events: %v", n, err)
			}
		}
	})
}

var (
	borrowed    = flag.Bool("readback.borrowed", false, "BenchmarkReadBack reads the log with ScanBorrowed")
	readBackDir = flag.String("readback.dir", "", "BenchmarkReadBack keeps its data sets in this directory and reuses them (written when missing)")
)

// BenchmarkReadBack scans a compacted log of bench.CostEvents events with
// ~200-byte bodies (the cost workload's read-back), with the log and with
// the minimal Pebble writer's store. b.N counts events; cpu-ns/event is
// the process's CPU time per event (the collector's work included).
func BenchmarkReadBack(b *testing.B) {
	for _, o := range bench.CostOpeners {
		if o.Name == "raw same keys" {
			continue
		}
		b.Run(o.Name, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "db")
			if *readBackDir != "" {
				dir = filepath.Join(*readBackDir, o.Name)
			}
			if _, err := os.Stat(dir); err != nil {
				if err := bench.LoadCosts(context.Background(), dir, o); err != nil {
					b.Fatal(err)
				}
			}
			s, err := o.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			scan := bench.ReadBackScan(s, *borrowed)
			b.ResetTimer()
			cpu := bench.ProcessCPU()
			for n := 0; n < b.N; {
				got, err := scan()
				if err != nil {
					b.Fatal(err)
				}
				n += got
			}
			b.ReportMetric(float64(bench.ProcessCPU()-cpu)/float64(b.N), "cpu-ns/event")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
