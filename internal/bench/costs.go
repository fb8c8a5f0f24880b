package bench

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// The log's own costs (issue 15): the same events written by the log with
// its default options, by raw Pebble writing the log's keys and records
// (rawStore) and by a minimal Pebble writer that stores two keys per event
// (the body under its sequence, the stream index), no envelope and no id
// index. The minimal writer is what an application on bare Pebble would
// write; the ratios to it are what the log's guarantees and format cost.

// Sizes of the cost workloads.
const (
	CostEvents    = 200_000
	CostPerAppend = 100
	CostStreams   = 200
	CostBodyLen   = 200
	IdleStreams   = 3
	IdleEvents    = 10 // per idle stream
)

// costBody returns a ~200-byte msgpack body whose payload is random
// letters and digits (seeded by i), so that, like real bodies and unlike a
// repeated pattern, it compresses only somewhat.
func costBody(rng *rand.Rand) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := []byte{0x81, 0xa4, 'd', 'a', 't', 'a', 0xd9, CostBodyLen - 8}
	for len(b) < CostBodyLen {
		b = append(b, alphabet[rng.Intn(len(alphabet))])
	}
	return b
}

// CostStore is a store that appends with an expected version (the stream's
// current version; 0 for a new stream).
type CostStore interface {
	Store
	AppendExpect(ctx context.Context, stream string, expected uint64, evs []eventlog.Event) error
}

// CostOpener opens a CostStore in a fresh directory.
type CostOpener struct {
	Name string
	Open func(dir string) (CostStore, error)
}

// CostOpeners are the stores compared by the cost workloads: the log first,
// the minimal writer last (the baseline of the ratios).
var CostOpeners = []CostOpener{
	{Name: "eventlog", Open: func(dir string) (CostStore, error) {
		l, err := eventlog.Open(dir, nil) // the log's defaults
		if err != nil {
			return nil, err
		}
		return &logStore{l: l}, nil
	}},
	{Name: "raw same keys", Open: func(dir string) (CostStore, error) {
		s, err := OpenRaw(dir)
		if err != nil {
			return nil, err
		}
		return s.(*rawStore), nil
	}},
	{Name: "minimal", Open: OpenMinimal},
}

func (s *logStore) AppendExpect(ctx context.Context, stream string, expected uint64, evs []eventlog.Event) error {
	_, err := s.l.Append(ctx, stream, eventlog.Exactly(expected), evs...)
	return err
}

func (s *rawStore) AppendExpect(ctx context.Context, stream string, expected uint64, evs []eventlog.Event) error {
	s.mu.Lock()
	cur := s.versions[stream]
	s.mu.Unlock()
	if cur != expected {
		return fmt.Errorf("raw: stream %s is at version %d, not %d", stream, cur, expected)
	}
	return s.Append(ctx, stream, evs)
}

// minimalStore writes two keys per event: 'e' seq -> body and the stream
// index 's' stream 0x00 version -> seq. Versions are checked under a mutex.
type minimalStore struct {
	db  *pebble.DB
	mu  sync.Mutex
	seq uint64
	ver map[string]uint64
}

// OpenMinimal opens the minimal writer with the bench's Pebble settings.
func OpenMinimal(dir string) (CostStore, error) {
	db, err := pebble.Open(dir, &pebble.Options{CacheSize: cacheSize, MemTableSize: memTableSize, Logger: quietLogger{}})
	if err != nil {
		return nil, err
	}
	return &minimalStore{db: db, ver: map[string]uint64{}}, nil
}

// AppendExpect checks and takes positions under the mutex and commits
// outside it, so that concurrent writers share Pebble's fsyncs.
func (s *minimalStore) AppendExpect(_ context.Context, stream string, expected uint64, evs []eventlog.Event) error {
	s.mu.Lock()
	if cur := s.ver[stream]; cur != expected {
		s.mu.Unlock()
		return fmt.Errorf("minimal: stream %s is at version %d, not %d", stream, cur, expected)
	}
	first := s.seq
	s.seq += uint64(len(evs))
	s.ver[stream] = expected + uint64(len(evs))
	s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	for i, ev := range evs {
		seq := first + uint64(i) + 1
		b.Set(eventlog.EventKey(seq), ev.Body, nil)
		b.Set(eventlog.StreamIndexKey(stream, expected+uint64(i)+1), eventlog.EncodeSeqValue(seq), nil)
	}
	return b.Commit(pebble.Sync)
}

func (s *minimalStore) Append(ctx context.Context, stream string, evs []eventlog.Event) error {
	s.mu.Lock()
	cur := s.ver[stream]
	s.mu.Unlock()
	return s.AppendExpect(ctx, stream, cur, evs)
}

func (s *minimalStore) AppendMulti(ctx context.Context, parts []Part) error {
	for _, p := range parts {
		if err := s.Append(ctx, p.Stream, p.Events); err != nil {
			return err
		}
	}
	return nil
}

func (s *minimalStore) ScanAll() (int, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{eventlog.PrefixEvent}, UpperBound: []byte{eventlog.PrefixEvent + 1}})
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if len(it.Value()) == 0 {
			it.Close()
			return n, fmt.Errorf("minimal: empty value at %x", it.Key())
		}
		n++
	}
	return n, it.Close()
}

func (s *minimalStore) ReadStream(string) (int, error) {
	return 0, fmt.Errorf("minimal: ReadStream not implemented")
}

func (s *minimalStore) Close() error { return s.db.Close() }

// CostRow is one cost figure for every CostOpener, medians over rounds, and
// the median per-round ratio of each store to the last (the minimal writer).
type CostRow struct {
	Name           string
	Unit           string
	HigherIsBetter bool
	Values         [][]float64 // [store][round]
}

// costRound is what one round measures on one store.
type costRound struct {
	rate                    float64 // events/s of the batched append
	readBack                float64 // events/s of a full scan of them, compacted
	readBorrowed            float64 // the same through a borrowed scan, if the store has one
	readCPU, borrowedCPU    float64 // the process's CPU ns per event of each read-back
	concurrent              float64 // events/s, 16 writers, 1 event per append
	live, closed, compacted float64 // MiB on disk
	idleHeap, idleAlloc     float64 // MiB
	idleRSS                 float64 // MiB
	idleDisk                float64 // MiB
}

// RunCosts measures the cost workloads on every CostOpener, cfg.Rounds
// times, alternating the stores' order between rounds.
func RunCosts(ctx context.Context, cfg Config, openers []CostOpener) ([]CostRow, error) {
	rounds := max(cfg.Rounds, 1)
	res := make([][]costRound, len(openers))
	for r := range rounds {
		for k := range openers {
			i := k
			if r%2 == 1 {
				i = len(openers) - 1 - k
			}
			cr, err := costOnce(ctx, cfg.Dir, cfg.Duration, openers[i])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", openers[i].Name, err)
			}
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "costs %-14s round %d: %8.0f events/s, read-back %8.0f (borrowed %8.0f) events/s, %.0f (borrowed %.0f) CPU ns/event, 16 writers %8.0f events/s, disk %.1f live / %.1f closed / %.1f compacted MiB, idle heap %.1f MiB alloc %.1f MiB rss %+.1f MiB disk %.1f MiB\n",
					openers[i].Name, r+1, cr.rate, cr.readBack, cr.readBorrowed, cr.readCPU, cr.borrowedCPU, cr.concurrent, cr.live, cr.closed, cr.compacted, cr.idleHeap, cr.idleAlloc, cr.idleRSS, cr.idleDisk)
			}
			res[i] = append(res[i], cr)
		}
	}
	row := func(name, unit string, higher bool, f func(costRound) float64) CostRow {
		cr := CostRow{Name: name, Unit: unit, HigherIsBetter: higher}
		for _, rs := range res {
			var v []float64
			for _, x := range rs {
				v = append(v, f(x))
			}
			cr.Values = append(cr.Values, v)
		}
		return cr
	}
	n := strconv.Itoa(CostEvents / 1000)
	return []CostRow{
		row("batched append ("+n+"k events, 100/append, expected version)", "events/s", true, func(c costRound) float64 { return c.rate }),
		row("full read-back ("+n+"k events, compacted, reopened)", "events/s", true, func(c costRound) float64 { return c.readBack }),
		row("full read-back, borrowed (as a fold reads)", "events/s", true, func(c costRound) float64 { return c.readBorrowed }),
		row("full read-back, CPU per event", "ns", false, func(c costRound) float64 { return c.readCPU }),
		row("full read-back, borrowed, CPU per event", "ns", false, func(c costRound) float64 { return c.borrowedCPU }),
		row("append 1 event/append, 16 writers (for -duration)", "events/s", true, func(c costRound) float64 { return c.concurrent }),
		row("disk, open, right after the appends", "MiB", false, func(c costRound) float64 { return c.live }),
		row("disk, closed", "MiB", false, func(c costRound) float64 { return c.closed }),
		row("disk, after flush + full compaction", "MiB", false, func(c costRound) float64 { return c.compacted }),
		row("idle, 3 streams x 10 events: live heap", "MiB", false, func(c costRound) float64 { return c.idleHeap }),
		row("idle, 3 streams x 10 events: allocated since open", "MiB", false, func(c costRound) float64 { return c.idleAlloc }),
		row("idle, 3 streams x 10 events: disk", "MiB", false, func(c costRound) float64 { return c.idleDisk }),
	}, nil
}

func costOnce(ctx context.Context, base string, d time.Duration, o CostOpener) (costRound, error) {
	var cr costRound
	tmp, err := os.MkdirTemp(base, "pegasus-costs-")
	if err != nil {
		return cr, err
	}
	defer os.RemoveAll(tmp)

	// Idle footprint first, on its own directory, in a collected heap.
	idleDir := filepath.Join(tmp, "idle")
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rss0 := rssMiB()
	s, err := o.Open(idleDir)
	if err != nil {
		return cr, err
	}
	rng := rand.New(rand.NewSource(1))
	for i := range IdleStreams {
		for v := 0; v < IdleEvents; v++ {
			if err := s.AppendExpect(ctx, StreamName(i), uint64(v), costEvents(rng, 1)); err != nil {
				s.Close()
				return cr, err
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	cr.idleRSS = rssMiB() - rss0
	cr.idleHeap = mib(int64(m1.HeapAlloc) - int64(m0.HeapAlloc))
	cr.idleAlloc = mib(int64(m1.TotalAlloc - m0.TotalAlloc))
	cr.idleDisk = mib(dirSize(idleDir))
	if err := s.Close(); err != nil {
		return cr, err
	}

	if s, err = o.Open(filepath.Join(tmp, "concurrent")); err != nil {
		return cr, err
	}
	cr.concurrent, _, err = appendFor(ctx, s, 16, 1, d)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return cr, err
	}

	dir := filepath.Join(tmp, "db")
	if s, err = o.Open(dir); err != nil {
		return cr, err
	}
	batches := costBatches()
	start := time.Now()
	if err := appendCostBatches(ctx, s, batches); err != nil {
		s.Close()
		return cr, err
	}
	cr.rate = CostEvents / time.Since(start).Seconds()
	cr.live = mib(dirSize(dir))
	if err := s.Close(); err != nil {
		return cr, err
	}
	cr.closed = mib(dirSize(dir))
	if err := compactDir(dir); err != nil {
		return cr, err
	}
	cr.compacted = mib(dirSize(dir))
	if cr.readBack, cr.readCPU, err = readBack(dir, o, false); err != nil {
		return cr, err
	}
	cr.readBorrowed, cr.borrowedCPU, err = readBack(dir, o, true)
	return cr, err
}

// borrowedScanner is a store with a borrowed scan (the log's ScanBorrowed).
type borrowedScanner interface{ ScanBorrowed() (int, error) }

// ReadBackScan is the read-back's full scan of s: with borrowed, its
// borrowed scan if it has one.
func ReadBackScan(s CostStore, borrowed bool) func() (int, error) {
	if bs, ok := s.(borrowedScanner); ok && borrowed {
		return bs.ScanBorrowed
	}
	return s.ScanAll
}

// LoadCosts writes the batched-append workload's events into a new store
// in dir and compacts it: the data set readBack reads.
func LoadCosts(ctx context.Context, dir string, o CostOpener) error {
	s, err := o.Open(dir)
	if err != nil {
		return err
	}
	if err := appendCostBatches(ctx, s, costBatches()); err != nil {
		s.Close()
		return err
	}
	if err := s.Close(); err != nil {
		return err
	}
	return compactDir(dir)
}

// costBatches are the appends of the batched-append workload.
func costBatches() [][]eventlog.Event {
	rng := rand.New(rand.NewSource(2))
	batches := make([][]eventlog.Event, CostEvents/CostPerAppend)
	for i := range batches {
		batches[i] = costEvents(rng, CostPerAppend)
	}
	return batches
}

// appendCostBatches appends batches to s, the i-th to stream i modulo
// CostStreams, each expecting its stream's version.
func appendCostBatches(ctx context.Context, s CostStore, batches [][]eventlog.Event) error {
	vers := make([]uint64, CostStreams)
	for i, evs := range batches {
		st := i % CostStreams
		if err := s.AppendExpect(ctx, StreamName(st), vers[st], evs); err != nil {
			return err
		}
		vers[st] += CostPerAppend
	}
	return nil
}

// readBack reopens the compacted store and scans it whole, decoding each
// event, for at least a second; it returns events/s and the process's CPU
// time per event (which other processes on the machine move less than the
// rate). With borrowed, a store with a borrowed scan uses it.
func readBack(dir string, o CostOpener, borrowed bool) (rate, cpuNs float64, err error) {
	s, err := o.Open(dir)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	scan := ReadBackScan(s, borrowed)
	total := 0
	start, cpu := time.Now(), ProcessCPU()
	for total == 0 || time.Since(start) < time.Second {
		n, err := scan()
		if err != nil {
			return 0, 0, err
		}
		if n != CostEvents {
			return 0, 0, fmt.Errorf("read back %d events, want %d", n, CostEvents)
		}
		total += n
	}
	rate = float64(total) / time.Since(start).Seconds()
	return rate, float64(ProcessCPU()-cpu) / float64(total), nil
}

func newRng() *rand.Rand { return rand.New(rand.NewSource(3)) }

func costEvents(rng *rand.Rand, n int) []eventlog.Event {
	evs := make([]eventlog.Event, n)
	for i := range evs {
		evs[i] = eventlog.Event{Type: "TASK_PROGRESS", Schema: 1, Body: costBody(rng)}
	}
	return evs
}

// compactDir opens a closed store's Pebble database directly, flushes the
// memtable replayed from the WAL and compacts the whole key space, so that
// what remains on disk is the data set itself.
func compactDir(dir string) error {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return err
	}
	if err := db.Flush(); err != nil {
		db.Close()
		return err
	}
	if err := db.Compact(context.Background(), []byte{0}, []byte{0xff, 0xff}, true); err != nil {
		db.Close()
		return err
	}
	return db.Close()
}

// dirSize is the disk space used by the files under dir (allocated blocks,
// so preallocated WAL space counts).
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += allocated(fi)
		}
		return nil
	})
	return n
}

func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return mib(pages * int64(os.Getpagesize()))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// PrintCosts writes the cost table: each store's median and its median
// per-round ratio to the last store (the minimal writer).
func PrintCosts(w io.Writer, rows []CostRow, openers []CostOpener, markdown bool) {
	base := len(openers) - 1
	cell := func(r CostRow, i int) string {
		s := fmt.Sprintf("%s %s", fmtValue(median(r.Values[i])), r.Unit)
		if i == base {
			return s
		}
		var ratios []float64
		for k, v := range r.Values[i] {
			ratios = append(ratios, v/r.Values[base][k])
		}
		return fmt.Sprintf("%s (%.2fx)", s, median(ratios))
	}
	if markdown {
		hdr := "| workload |"
		sep := "|---|"
		for i, o := range openers {
			hdr += " " + o.Name
			if i != base {
				hdr += " (ratio to " + openers[base].Name + ")"
			}
			hdr += " |"
			sep += "---:|"
		}
		fmt.Fprintln(w, hdr)
		fmt.Fprintln(w, sep)
		for _, r := range rows {
			line := "| " + r.Name + " |"
			for i := range openers {
				line += " " + cell(r, i) + " |"
			}
			fmt.Fprintln(w, line)
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := "log costs"
	for _, o := range openers {
		hdr += "\t" + o.Name
	}
	fmt.Fprintln(tw, hdr+"\t(ratios to "+openers[base].Name+")")
	for _, r := range rows {
		line := r.Name
		for i := range openers {
			line += "\t" + cell(r, i)
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}
