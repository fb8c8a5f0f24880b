// Package bench holds the storage workloads that cmd/pegasus-bench and the
// eventlog benchmarks run, against Pegasus's log and against raw Pebble
// writing the same keys with the same sync settings. Raw Pebble is the
// baseline: it does no sequencing, validation or idempotency checks, so the
// ratio between the two is what the log's guarantees cost (or, for
// concurrent appends, what its group commit gains).
//
// To add a workload, add a Workload to Workloads (or to your own list) and
// implement it on Store.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// Store is one implementation under test.
type Store interface {
	// Append durably appends events to stream (one synced commit).
	Append(ctx context.Context, stream string, evs []eventlog.Event) error
	// AppendMulti durably appends to several streams in one synced commit.
	// Used to load interleaved histories quickly.
	AppendMulti(ctx context.Context, parts []Part) error
	// ScanAll reads every event in sequence order, decoding and checking
	// each record, and returns how many it read.
	ScanAll() (int, error)
	// ReadStream reads one stream's events in version order, decoding and
	// checking each record, and returns how many it read.
	ReadStream(stream string) (int, error)
	Close() error
}

// Part is one stream's events in an AppendMulti.
type Part struct {
	Stream string
	Events []eventlog.Event
}

// Opener opens a Store in a fresh directory.
type Opener struct {
	Name string
	Open func(dir string) (Store, error)
}

// Openers are the implementations compared by pegasus-bench: ours first.
var Openers = []Opener{
	{Name: "eventlog", Open: OpenLog},
	{Name: "raw pebble", Open: OpenRaw},
}

// Tuning shared by both stores, so that only the code above Pebble differs.
const (
	cacheSize    = 64 << 20
	memTableSize = 32 << 20
)

type logStore struct{ l *eventlog.Log }

// OpenLog opens the Pegasus event log with default options.
func OpenLog(dir string) (Store, error) {
	l, err := eventlog.Open(dir, &eventlog.Options{CacheSize: cacheSize, MemTableSize: memTableSize})
	if err != nil {
		return nil, err
	}
	return &logStore{l: l}, nil
}

func (s *logStore) Append(ctx context.Context, stream string, evs []eventlog.Event) error {
	_, err := s.l.Append(ctx, stream, eventlog.Any, evs...)
	return err
}

func (s *logStore) AppendMulti(ctx context.Context, parts []Part) error {
	sa := make([]eventlog.StreamAppend, len(parts))
	for i, p := range parts {
		sa[i] = eventlog.StreamAppend{Stream: p.Stream, Expected: eventlog.Any, Events: p.Events}
	}
	_, err := s.l.AppendMulti(ctx, sa...)
	return err
}

// ScanBorrowed is ScanAll through Log.ScanBorrowed, as a fold reads: each
// event in place (Iterator.Current).
func (s *logStore) ScanBorrowed() (int, error) { return countEventsIn(s.l.ScanBorrowed(1), true) }

func (s *logStore) ScanAll() (int, error) { return countEvents(s.l.Scan(1, eventlog.Forward)) }

func (s *logStore) ReadStream(stream string) (int, error) {
	return countEvents(s.l.ReadStream(stream, 1))
}

// countEvents reads it to the end and closes it, checking each event.
func countEvents(it *eventlog.Iterator) (int, error) { return countEventsIn(it, false) }

// countEventsIn is countEvents; inPlace reads each event in place
// (Iterator.Current) rather than a copy (Iterator.Event).
func countEventsIn(it *eventlog.Iterator, inPlace bool) (int, error) {
	n := 0
	for it.Next() {
		var seq uint64
		if inPlace {
			seq = it.Current().Seq
		} else {
			seq = it.Event().Seq
		}
		if seq == 0 {
			it.Close()
			return n, errors.New("bad event")
		}
		n++
	}
	return n, it.Close()
}

func (s *logStore) Close() error { return s.l.Close() }

// Counters reports the log's group-commit counters.
func (s *logStore) Counters() eventlog.Stats { return s.l.Stats() }

// counters is implemented by stores that can say how they batched.
type counters interface{ Counters() eventlog.Stats }

// rawStore writes exactly the keys and records the log writes (event,
// stream index, id index; causation index when set), encoded with the same
// codec, one synced batch per append. Sequences come from an atomic counter
// and versions from a mutex-guarded map: the least a correct writer must do.
type rawStore struct {
	db  *pebble.DB
	seq atomic.Uint64

	mu       sync.Mutex
	versions map[string]uint64
	entropy  *ulid.MonotonicEntropy
}

// OpenRaw opens a bare Pebble database with the log's Pebble settings.
func OpenRaw(dir string) (Store, error) {
	db, err := pebble.Open(dir, &pebble.Options{
		CacheSize:    cacheSize,
		MemTableSize: memTableSize,
		Logger:       quietLogger{},
	})
	if err != nil {
		return nil, err
	}
	return &rawStore{db: db, versions: map[string]uint64{}, entropy: ulid.Monotonic(rand.New(rand.NewSource(1)), 0)}, nil
}

func (s *rawStore) Append(ctx context.Context, stream string, evs []eventlog.Event) error {
	return s.AppendMulti(ctx, []Part{{Stream: stream, Events: evs}})
}

func (s *rawStore) AppendMulti(_ context.Context, parts []Part) error {
	n := 0
	for _, p := range parts {
		n += len(p.Events)
	}
	ids := make([]ulid.ULID, n)
	first := make([]uint64, len(parts))
	s.mu.Lock()
	for i, p := range parts {
		first[i] = s.versions[p.Stream]
		s.versions[p.Stream] += uint64(len(p.Events))
	}
	ms := ulid.Now()
	for i := range ids {
		ids[i] = ulid.MustNew(ms, s.entropy)
	}
	s.mu.Unlock()
	seq := s.seq.Add(uint64(n)) - uint64(n)
	b := s.db.NewBatch()
	defer b.Close()
	k := 0
	for i, p := range parts {
		for j, ev := range p.Events {
			seq++
			ev.ID, ev.Seq, ev.Stream, ev.Version = ids[k], seq, p.Stream, first[i]+uint64(j)+1
			k++
			ev.Correlation = ev.ID
			if ev.Time.IsZero() {
				ev.Time = time.Now()
			}
			rec, err := eventlog.EncodeCompactRecord(ev)
			if err != nil {
				return err
			}
			seqv := eventlog.EncodeSeqValue(ev.Seq)
			b.Set(eventlog.EventKey(ev.Seq), rec, nil)
			b.Set(eventlog.StreamIndexKey(ev.Stream, ev.Version), seqv, nil)
			b.Set(eventlog.IDIndexKey(ev.ID), seqv, nil)
			if ev.Causation != (ulid.ULID{}) {
				b.Set(eventlog.CausationIndexKey(ev.Causation, ev.Seq), nil, nil)
			}
		}
	}
	return b.Commit(pebble.Sync)
}

func (s *rawStore) ScanAll() (int, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{eventlog.PrefixEvent}, UpperBound: []byte{eventlog.PrefixEvent + 1}})
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		ev, err := eventlog.DecodeRecord(it.Value())
		if err != nil || ev.Seq == 0 {
			it.Close()
			return n, fmt.Errorf("bad event: %v", err)
		}
		n++
	}
	return n, it.Close()
}

func (s *rawStore) ReadStream(stream string) (int, error) {
	lower := eventlog.StreamIndexKey(stream, 1)
	upper := eventlog.StreamIndexKey(stream, ^uint64(0))
	idx, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, err
	}
	defer idx.Close()
	data, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{eventlog.PrefixEvent}, UpperBound: []byte{eventlog.PrefixEvent + 1}})
	if err != nil {
		return 0, err
	}
	defer data.Close()
	n := 0
	for ok := idx.First(); ok; ok = idx.Next() {
		seq, _ := eventlog.DecodeSeqValue(idx.Value())
		if !data.SeekGE(eventlog.EventKey(seq)) {
			return n, errors.New("missing record")
		}
		ev, err := eventlog.DecodeRecord(data.Value())
		if err != nil || ev.Seq != seq {
			return n, fmt.Errorf("bad event: %v", err)
		}
		n++
	}
	return n, idx.Error()
}

func (s *rawStore) Close() error { return s.db.Close() }

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
