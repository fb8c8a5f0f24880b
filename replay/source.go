package replay

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Iterator is a forward iterator over events. *eventlog.Iterator is one.
// Always Close it.
type Iterator interface {
	Next() bool
	Event() eventlog.Event
	Err() error
	Close() error
}

// Source is where a fold reads events.
type Source interface {
	// Events returns the events with Seq >= from in increasing Seq order.
	// A source may return earlier events too; the fold skips what it has
	// already folded.
	Events(ctx context.Context, from uint64) Iterator
}

// Reader is a Source with random access, for the per-task queries (state
// at a bound, timeline, causation). The Pebble log (FromLog) and an
// in-memory log (MemLog, also what an NDJSON export loads into) are
// Readers.
type Reader interface {
	Source
	// Stream returns one stream's events from version fromVersion (0 means
	// 1) in version order.
	Stream(ctx context.Context, stream string, fromVersion uint64) Iterator
	// Get returns the event with id, or an error wrapping
	// eventlog.ErrNotFound.
	Get(ctx context.Context, id ulid.ULID) (eventlog.Event, error)
	// Children returns the events caused by id, in Seq order.
	Children(ctx context.Context, id ulid.ULID) Iterator
	// Head returns the highest sequence in the source.
	Head() uint64
}

// LogReader reads a Pebble log: a running daemon's, a read-only data
// directory or a checkpoint copy (open it with eventlog.Options.ReadOnly).
// It also gives the per-task queries access to the persisted snapshots.
type LogReader struct {
	Log *eventlog.Log
}

// FromLog returns a Reader over l.
func FromLog(l *eventlog.Log) *LogReader { return &LogReader{Log: l} }

func (r *LogReader) Events(_ context.Context, from uint64) Iterator {
	return r.Log.Scan(from, eventlog.Forward)
}

func (r *LogReader) borrowedEvents(_ context.Context, from uint64) Iterator {
	return r.Log.ScanBorrowed(from)
}

func (r *LogReader) Stream(_ context.Context, stream string, fromVersion uint64) Iterator {
	return r.Log.ReadStream(stream, fromVersion)
}

func (r *LogReader) Get(_ context.Context, id ulid.ULID) (eventlog.Event, error) {
	return r.Log.Get(id)
}

func (r *LogReader) Children(_ context.Context, id ulid.ULID) Iterator {
	return r.Log.Children(id)
}

func (r *LogReader) Head() uint64 { return r.Log.Head() }

// Live returns a Source that follows l: the events from the requested
// sequence, then every event as it commits, until the context ends. It is
// what View.Follow folds.
func Live(l *eventlog.Log) Source { return liveSource{l} }

type liveSource struct{ l *eventlog.Log }

func (s liveSource) Events(ctx context.Context, from uint64) Iterator {
	return &liveIter{ctx: ctx, sub: s.l.Subscribe(ctx, from)}
}

type liveIter struct {
	ctx context.Context
	sub *eventlog.Subscription
	ev  eventlog.Event
	err error
}

func (it *liveIter) Next() bool {
	if it.err != nil {
		return false
	}
	ev, err := it.sub.Next(it.ctx)
	if err != nil {
		it.err = err
		return false
	}
	it.ev = ev
	return true
}

func (it *liveIter) Event() eventlog.Event { return it.ev }
func (it *liveIter) Err() error            { return it.err }
func (it *liveIter) Close() error          { return it.sub.Close() }

// Once turns an Iterator into a Source that can be folded once, such as
// an NDJSON export being read from a pipe.
func Once(it Iterator) Source { return &onceSource{it: it} }

type onceSource struct{ it Iterator }

func (s *onceSource) Events(context.Context, uint64) Iterator {
	it := s.it
	s.it = nil
	if it == nil {
		return sliceIter(nil, fmt.Errorf("replay: a Once source can be folded only once"))
	}
	return it
}

// streamSource folds one stream of a Reader.
type streamSource struct {
	r           Reader
	stream      string
	fromVersion uint64
}

func (s streamSource) Events(ctx context.Context, _ uint64) Iterator {
	return s.r.Stream(ctx, s.stream, s.fromVersion)
}

// MemLog is an in-memory log: what an NDJSON export or events fetched from
// a daemon's HTTP API load into, and where `fork` appends its what-if
// events. Sequences must increase but may have gaps (a filtered export).
// It is a Reader. Not safe for concurrent use while appending.
type MemLog struct {
	events   []eventlog.Event
	byID     map[ulid.ULID]int
	streams  map[string][]int
	children map[ulid.ULID][]int
}

// NewMemLog returns a MemLog holding evs, which must be in increasing Seq
// order with unique ids and, per stream, increasing versions.
func NewMemLog(evs ...eventlog.Event) (*MemLog, error) {
	m := &MemLog{byID: map[ulid.ULID]int{}, streams: map[string][]int{}, children: map[ulid.ULID][]int{}}
	for _, ev := range evs {
		if err := m.add(ev); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *MemLog) add(ev eventlog.Event) error {
	if n := len(m.events); n > 0 && ev.Seq <= m.events[n-1].Seq {
		return fmt.Errorf("replay: event seq %d after seq %d: sequences must increase", ev.Seq, m.events[n-1].Seq)
	}
	if ev.Seq == 0 {
		return fmt.Errorf("replay: event %s has no sequence", ev.ID)
	}
	if _, dup := m.byID[ev.ID]; dup {
		return fmt.Errorf("replay: event id %s appears twice", ev.ID)
	}
	if s := m.streams[ev.Stream]; len(s) > 0 && ev.Version <= m.events[s[len(s)-1]].Version {
		return fmt.Errorf("replay: stream %q version %d after version %d", ev.Stream, ev.Version, m.events[s[len(s)-1]].Version)
	}
	i := len(m.events)
	m.events = append(m.events, ev)
	m.byID[ev.ID] = i
	m.streams[ev.Stream] = append(m.streams[ev.Stream], i)
	if ev.Causation != (ulid.ULID{}) {
		m.children[ev.Causation] = append(m.children[ev.Causation], i)
	}
	return nil
}

// Append adds events after the last one, assigning Seq (head+1, ...) and
// each stream's next Version, as the log would. An event without an ID gets
// a deterministic one derived from its position; one without a Time gets
// the time of the event before it; an empty Correlation is its causation's
// correlation, or its own id. It returns the events as stored.
func (m *MemLog) Append(evs ...eventlog.Event) ([]eventlog.Event, error) {
	out := make([]eventlog.Event, 0, len(evs))
	for _, ev := range evs {
		if ev.Stream == "" || ev.Type == "" {
			return out, fmt.Errorf("replay: append: an event needs a stream and a type")
		}
		ev.Seq = m.Head() + 1
		ev.Version = 1
		if s := m.streams[ev.Stream]; len(s) > 0 {
			ev.Version = m.events[s[len(s)-1]].Version + 1
		}
		if ev.Time.IsZero() && len(m.events) > 0 {
			ev.Time = m.events[len(m.events)-1].Time
		}
		if ev.ID == (ulid.ULID{}) {
			ev.ID = derivedID(&ev)
		}
		if ev.Correlation == (ulid.ULID{}) {
			ev.Correlation = ev.ID
			if i, ok := m.byID[ev.Causation]; ok && ev.Causation != (ulid.ULID{}) {
				ev.Correlation = m.events[i].Correlation
			}
		}
		if err := m.add(ev); err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// derivedID makes a reproducible ULID for an event appended without one:
// its time and a hash of its position, so that a what-if shows the same ids
// every time it is run.
func derivedID(ev *eventlog.Event) ulid.ULID {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%s", ev.Stream, ev.Version, ev.Seq, ev.Type))
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(ev.Time))
	_ = id.SetEntropy(h[:10])
	return id
}

// Len returns the number of events.
func (m *MemLog) Len() int { return len(m.events) }

// All returns the events in order. The slice is shared: do not modify it.
func (m *MemLog) All() []eventlog.Event { return m.events }

func (m *MemLog) Head() uint64 {
	if len(m.events) == 0 {
		return 0
	}
	return m.events[len(m.events)-1].Seq
}

func (m *MemLog) Events(_ context.Context, from uint64) Iterator {
	i := sort.Search(len(m.events), func(i int) bool { return m.events[i].Seq >= from })
	return sliceIter(m.events[i:], nil)
}

func (m *MemLog) Stream(_ context.Context, stream string, fromVersion uint64) Iterator {
	var out []eventlog.Event
	for _, i := range m.streams[stream] {
		if m.events[i].Version >= fromVersion {
			out = append(out, m.events[i])
		}
	}
	return sliceIter(out, nil)
}

func (m *MemLog) Get(_ context.Context, id ulid.ULID) (eventlog.Event, error) {
	i, ok := m.byID[id]
	if !ok {
		return eventlog.Event{}, fmt.Errorf("%w: event %s", eventlog.ErrNotFound, id)
	}
	return m.events[i], nil
}

func (m *MemLog) Children(_ context.Context, id ulid.ULID) Iterator {
	var out []eventlog.Event
	for _, i := range m.children[id] {
		out = append(out, m.events[i])
	}
	return sliceIter(out, nil)
}

// sliceIter iterates a slice of events, then reports err.
func sliceIter(evs []eventlog.Event, err error) Iterator {
	return &memIter{evs: evs, i: -1, err: err}
}

type memIter struct {
	evs []eventlog.Event
	i   int
	err error
}

func (it *memIter) Next() bool {
	if it.i+1 >= len(it.evs) {
		it.i = len(it.evs)
		return false
	}
	it.i++
	return true
}

func (it *memIter) Event() eventlog.Event {
	if it.i < 0 || it.i >= len(it.evs) {
		return eventlog.Event{}
	}
	return it.evs[it.i]
}

func (it *memIter) Err() error {
	if it.i >= len(it.evs) {
		return it.err
	}
	return nil
}

func (it *memIter) Close() error { return nil }
