package bench

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Workload is one measured scenario.
type Workload struct {
	Name string
	// Unit of the headline figure, e.g. "events/s" or "µs p50".
	Unit string
	// HigherIsBetter says how to read the ratio ours/raw.
	HigherIsBetter bool
	// Setup prepares a fresh store, untimed. If it returns true the store
	// is closed and reopened before Run, so reads come from sstables as
	// after a restart, not from the memtable.
	Setup func(ctx context.Context, s Store) (reopen bool, err error)
	// Run measures for about d and returns the headline figure and a short
	// note.
	Run func(ctx context.Context, s Store, d time.Duration) (value float64, note string, err error)
}

// Body is the payload used by every workload: 128 bytes, as a small msgpack
// map would be.
var Body = func() []byte {
	b := []byte{0x81, 0xa4, 'd', 'a', 't', 'a', 0xc4, 120}
	for len(b) < 128 {
		b = append(b, byte('a'+len(b)%26))
	}
	return b
}()

// NewEvent returns a benchmark event: no ID (the store assigns it), a
// realistic type and the standard body.
func NewEvent() eventlog.Event {
	return eventlog.Event{Type: "TASK_PROGRESS", Schema: 1, Body: Body}
}

// Events returns n benchmark events.
func Events(n int) []eventlog.Event {
	evs := make([]eventlog.Event, n)
	for i := range evs {
		evs[i] = NewEvent()
	}
	return evs
}

// StreamName names the i-th benchmark stream.
func StreamName(i int) string { return fmt.Sprintf("task-%06d", i) }

// AppendN appends n events using writers goroutines, perAppend events per
// synced append, each writer on its own stream. It is the b.N form of the
// append workloads.
func AppendN(ctx context.Context, s Store, writers, perAppend, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, writers)
	per := (n + writers - 1) / writers
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs := Events(perAppend)
			stream := StreamName(w)
			for done := 0; done < per; done += perAppend {
				if err := s.Append(ctx, stream, evs[:min(perAppend, per-done)]); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// appendFor is the timed form of AppendN: it appends until d has passed and
// returns events per second.
func appendFor(ctx context.Context, s Store, writers, perAppend int, d time.Duration) (float64, string, error) {
	var wg sync.WaitGroup
	counts := make([]int, writers)
	errs := make([]error, writers)
	var before eventlog.Stats
	c, hasCounters := s.(counters)
	if hasCounters {
		before = c.Counters()
	}
	start := time.Now()
	deadline := start.Add(d)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			evs := Events(perAppend)
			stream := StreamName(w)
			for time.Now().Before(deadline) {
				if err := s.Append(ctx, stream, evs); err != nil {
					errs[w] = err
					return
				}
				counts[w] += perAppend
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for w := range writers {
		if errs[w] != nil {
			return 0, "", errs[w]
		}
		total += counts[w]
	}
	appends := total / perAppend
	note := fmt.Sprintf("%d appends, %.0f µs/append/writer",
		appends, float64(elapsed.Microseconds())*float64(writers)/float64(max(appends, 1)))
	if hasCounters {
		after := c.Counters()
		commits := max(after.Commits-before.Commits, 1)
		note += fmt.Sprintf(", %.1f events/commit, %d of %d gathers timed out",
			float64(after.Events-before.Events)/float64(commits),
			after.GatherTimeouts-before.GatherTimeouts, after.GatherWaits-before.GatherWaits)
	}
	return float64(total) / elapsed.Seconds(), note, nil
}

// Load writes streams*perStream events, interleaved: round r appends the
// r-th event of every stream, chunk streams per synced commit. A stream's
// history is therefore spread over the whole log, as a long-running task's
// is.
func Load(ctx context.Context, s Store, streams, perStream, chunk int) error {
	for r := 0; r < perStream; r++ {
		for first := 0; first < streams; first += chunk {
			parts := make([]Part, 0, chunk)
			for i := first; i < min(first+chunk, streams); i++ {
				parts = append(parts, Part{Stream: StreamName(i), Events: Events(1)})
			}
			if err := s.AppendMulti(ctx, parts); err != nil {
				return err
			}
		}
	}
	return nil
}

// Sizes of the read workloads.
const (
	ScanEvents      = 200_000
	HistoryStreams  = 5_000
	HistoryEvents   = 20
	loadChunkScan   = 1000
	loadChunkStream = 500
)

// Workloads is what pegasus-bench runs, in order.
var Workloads = []Workload{
	{
		Name: "append 1 event/append, 1 writer", Unit: "events/s", HigherIsBetter: true,
		Run: func(ctx context.Context, s Store, d time.Duration) (float64, string, error) {
			return appendFor(ctx, s, 1, 1, d)
		},
	},
	{
		Name: "append 100 events/append, 1 writer", Unit: "events/s", HigherIsBetter: true,
		Run: func(ctx context.Context, s Store, d time.Duration) (float64, string, error) {
			return appendFor(ctx, s, 1, 100, d)
		},
	},
	{
		Name: "append 1 event/append, 16 writers", Unit: "events/s", HigherIsBetter: true,
		Run: func(ctx context.Context, s Store, d time.Duration) (float64, string, error) {
			return appendFor(ctx, s, 16, 1, d)
		},
	},
	{
		Name: "append 1 event/append, 64 writers", Unit: "events/s", HigherIsBetter: true,
		Run: func(ctx context.Context, s Store, d time.Duration) (float64, string, error) {
			return appendFor(ctx, s, 64, 1, d)
		},
	},
	{
		Name: "full forward scan, decode + checksum", Unit: "events/s", HigherIsBetter: true,
		Setup: func(ctx context.Context, s Store) (bool, error) {
			return true, Load(ctx, s, ScanEvents/100, 100, loadChunkScan)
		},
		Run: func(ctx context.Context, s Store, d time.Duration) (float64, string, error) {
			start := time.Now()
			total, scans := 0, 0
			for scans == 0 || time.Since(start) < d {
				n, err := s.ScanAll()
				if err != nil {
					return 0, "", err
				}
				if n != ScanEvents {
					return 0, "", fmt.Errorf("scan read %d events, want %d", n, ScanEvents)
				}
				total += n
				scans++
			}
			return float64(total) / time.Since(start).Seconds(), fmt.Sprintf("%d scans of %d events", scans, ScanEvents), nil
		},
	},
	{
		Name: "one task's history (20 events)", Unit: "µs p50", HigherIsBetter: false,
		Setup: func(ctx context.Context, s Store) (bool, error) {
			return true, Load(ctx, s, HistoryStreams, HistoryEvents, loadChunkStream)
		},
		Run: func(ctx context.Context, s Store, d time.Duration) (float64, string, error) {
			rng := rand.New(rand.NewSource(1))
			var lat []time.Duration
			start := time.Now()
			for time.Since(start) < d {
				stream := StreamName(rng.Intn(HistoryStreams))
				t0 := time.Now()
				n, err := s.ReadStream(stream)
				lat = append(lat, time.Since(t0))
				if err != nil {
					return 0, "", err
				}
				if n != HistoryEvents {
					return 0, "", fmt.Errorf("stream %s has %d events, want %d", stream, n, HistoryEvents)
				}
			}
			slices.Sort(lat)
			p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
			return float64(p(0.5).Nanoseconds()) / 1e3, fmt.Sprintf("%d reads, p99 %.1f µs", len(lat), float64(p(0.99).Nanoseconds())/1e3), nil
		},
	},
}
