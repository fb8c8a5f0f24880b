package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
)

// FormatVersionArchived is the format of a log from which a retention run
// removed events (Log.Retire): the same layout as FormatVersion plus hole
// keys ("m" "hole" first). Retire writes it in its batch, so a build that
// does not know holes refuses the log (ErrFormat) instead of calling the
// holes corruption. Persisted: do not change.
const FormatVersionArchived uint32 = 6

// FormatVersion3Archived is FormatVersion3 with holes: a log at format 3
// from which a retention run removed events.
const FormatVersion3Archived uint32 = 4

// FormatVersion1Archived is FormatVersion1 with holes: a log at format 1
// from which a retention run removed events.
const FormatVersion1Archived uint32 = 2

// archivedFormat reports whether a format version allows holes.
func archivedFormat(v uint32) bool {
	return v == FormatVersionArchived || v == FormatVersion3Archived || v == FormatVersion1Archived
}

// knownFormat reports whether this build reads a format version.
func knownFormat(v uint32) bool {
	return v == FormatVersion || v == FormatVersionArchived || v == FormatVersion3 || v == FormatVersion3Archived ||
		v == FormatVersion1 || v == FormatVersion1Archived
}

// TypeEventsArchived is the type of the event Retire appends to
// SystemStream: its body (the archive's manifest) is the caller's, its
// position is what every hole it made points to.
const TypeEventsArchived = "EVENTS_ARCHIVED"

// holePrefix starts every hole key: "m" "hole" | first seq (8) -> last seq
// (8) | seq of the EVENTS_ARCHIVED event (8).
var holePrefix = []byte{PrefixMeta, 'h', 'o', 'l', 'e'}

func holeKey(first uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), holePrefix...), first)
}

// Hole is a range of sequences removed by Retire. The sequences are never
// reused; Scan steps over them; Verify accepts them and no other gap.
type Hole struct {
	First, Last uint64 // inclusive
	// Manifest is the seq of the TypeEventsArchived event that records the
	// removal, appended in the same batch.
	Manifest uint64
}

func parseHole(key, val []byte) (Hole, bool) {
	if len(key) != len(holePrefix)+8 || !bytes.HasPrefix(key, holePrefix) || len(val) != 16 {
		return Hole{}, false
	}
	h := Hole{
		First:    binary.BigEndian.Uint64(key[len(holePrefix):]),
		Last:     binary.BigEndian.Uint64(val),
		Manifest: binary.BigEndian.Uint64(val[8:]),
	}
	return h, h.First >= 1 && h.First <= h.Last && h.Last < h.Manifest
}

// RetiredEvent is what the log needs to remove one event: its position and
// the keys of its index entries.
type RetiredEvent struct {
	Seq       uint64
	ID        ulid.ULID
	Causation ulid.ULID
}

// RetiredStream is a stream removed whole, with the version the caller read
// it at.
type RetiredStream struct {
	Stream  string
	Version uint64
}

// Retirement is one retention run's removal (see Retire).
type Retirement struct {
	// Streams are removed whole. Each must still be at Version when the
	// committer takes the request (a stream that grew since the caller
	// read it fails the request with a *ConflictError).
	Streams []RetiredStream
	// Events are every event of Streams, in increasing seq order: the
	// sum of the Versions.
	Events []RetiredEvent
	// Manifest is appended to SystemStream in the same batch; its Type
	// must be TypeEventsArchived. Give it an ID: a retry after an ambiguous
	// failure is then idempotent (the removal is not redone).
	Manifest Event
	// Aux, if set, adds aux-namespace writes to the same batch (the read
	// models forgetting the removed streams).
	Aux func(*AuxBatch) error
}

// Retire removes whole streams from the log and records the removal, in
// ONE synced batch: the Manifest event is appended to SystemStream; the
// records and every index entry of Events are deleted (range deletions over
// runs of consecutive sequences, point deletions for the index entries and
// the stream index's range); a hole key per run of removed sequences points
// to the Manifest's seq; the format key becomes FormatVersionArchived. A
// crash leaves all of it or none. Sequences are never reused: the head is
// the Manifest, past every hole.
//
// The removed streams' versions and ids are forgotten: an append with an
// id of a removed event is appended again, and a removed stream, appended
// to again, starts at version 1. Callers remove only streams that are
// finished (the retention package decides which).
func (l *Log) Retire(ctx context.Context, r Retirement) (AppendResult, error) {
	if r.Manifest.Type != TypeEventsArchived {
		return AppendResult{}, invalidf("retirement manifest of type %q, want %s", r.Manifest.Type, TypeEventsArchived)
	}
	if len(r.Streams) == 0 || len(r.Events) == 0 {
		return AppendResult{}, invalidf("retirement without streams or events")
	}
	var total uint64
	seen := make(map[string]bool, len(r.Streams))
	for _, s := range r.Streams {
		if err := ValidateStream(s.Stream); err != nil {
			return AppendResult{}, err
		}
		if s.Stream == SystemStream || seen[s.Stream] || s.Version == 0 {
			return AppendResult{}, invalidf("retirement of stream %q at version %d", s.Stream, s.Version)
		}
		seen[s.Stream] = true
		total += s.Version
	}
	if total != uint64(len(r.Events)) {
		return AppendResult{}, invalidf("retirement lists %d events, the streams hold %d", len(r.Events), total)
	}
	for i, e := range r.Events {
		if e.Seq == 0 || e.Seq > l.Head() || (i > 0 && e.Seq <= r.Events[i-1].Seq) || e.ID == (ulid.ULID{}) {
			return AppendResult{}, invalidf("retired event %d (seq %d) out of order or outside the log", i, e.Seq)
		}
	}
	// A retry of a committed retirement (its manifest is in the log) is
	// answered by the committer's idempotency check; its streams are gone.
	if _, err := l.Get(r.Manifest.ID); r.Manifest.ID == (ulid.ULID{}) || err != nil {
		if err := l.checkRetirement(&r); err != nil {
			return AppendResult{}, err
		}
	}
	if h := l.testHookRetire; h != nil {
		h()
	}
	rt := r
	rt.Streams = slices.Clone(r.Streams)
	rt.Events = slices.Clone(r.Events)
	return l.appendOne(ctx, StreamAppend{Stream: SystemStream, Expected: Any, Events: []Event{r.Manifest}}, &rt)
}

// checkRetirement makes sure the events are exactly the streams' (by
// their stream index entries) and that each id is the event's (by the id
// index), so that a wrong list can never delete another stream's records.
// The committer then only checks that the streams did not grow.
func (l *Log) checkRetirement(r *Retirement) error {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return ErrClosed
	}
	want := make(map[uint64]int, len(r.Events))
	for i, e := range r.Events {
		want[e.Seq] = i
	}
	seen := 0
	for _, s := range r.Streams {
		p := appendStreamPrefix(nil, s.Stream)
		it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			e, ok := parseStreamEntry(it.Key(), it.Value())
			if !ok {
				it.Close()
				return corruptKey(it.Key(), "malformed stream index entry")
			}
			for v := e.first; v <= e.last; v++ {
				seq := e.seqOf(v)
				if _, listed := want[seq]; !listed || seen >= len(r.Events) {
					it.Close()
					return invalidf("retirement of stream %q does not list its event at seq %d", s.Stream, seq)
				}
				seen++
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	if seen != len(r.Events) {
		return invalidf("retirement lists %d events, its streams hold %d", len(r.Events), seen)
	}
	for _, e := range r.Events {
		seq, err := l.getSeq(IDIndexKey(e.ID))
		if err != nil || seq != e.Seq {
			return invalidf("retired event %d: id %s is not its id", e.Seq, e.ID)
		}
	}
	return nil
}

// appendOne is Append with an optional retirement riding on the request.
func (l *Log) appendOne(ctx context.Context, sa StreamAppend, rt *Retirement) (AppendResult, error) {
	res, err := l.appendMulti(ctx, []StreamAppend{sa}, rt)
	if err != nil {
		return AppendResult{}, err
	}
	return res[0], nil
}

// checkRetire runs in the committer before the request's events get
// positions: every stream must still be at the version the caller read.
func (l *Log) checkRetire(rt *Retirement) error {
	for _, s := range rt.Streams {
		cur, err := l.currentVersion(s.Stream)
		if err != nil {
			return err
		}
		if cur != s.Version {
			return &ConflictError{Stream: s.Stream, Expected: Exactly(s.Version), Current: cur}
		}
	}
	return nil
}

// writeRetire adds the removal to the group's batch, after the manifest
// event (at seq manifest) was written. Run by the committer.
func (l *Log) writeRetire(rt *Retirement, aux *pebble.Batch, manifest uint64) error {
	g := &l.group
	b := g.batch
	for _, s := range rt.Streams {
		p := appendStreamPrefix(nil, s.Stream)
		if err := b.DeleteRange(p, prefixEnd(p), nil); err != nil {
			return err
		}
		g.versions[s.Stream] = 0
	}
	for _, e := range rt.Events {
		if err := b.Delete(IDIndexKey(e.ID), nil); err != nil {
			return err
		}
		if e.Causation != (ulid.ULID{}) {
			if err := b.Delete(CausationIndexKey(e.Causation, e.Seq), nil); err != nil {
				return err
			}
		}
	}
	for _, h := range holesOf(rt.Events, manifest) {
		var err error
		if h.First == h.Last {
			err = b.Delete(EventKey(h.First), nil)
		} else {
			err = b.DeleteRange(EventKey(h.First), EventKey(h.Last+1), nil)
		}
		if err != nil {
			return err
		}
		v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), h.Last)
		if err := b.Set(holeKey(h.First), binary.BigEndian.AppendUint64(v, h.Manifest), nil); err != nil {
			return err
		}
	}
	if err := b.Set(FormatKey, binary.BigEndian.AppendUint32(nil, FormatVersionArchived), nil); err != nil {
		return err
	}
	if aux != nil {
		return b.Apply(aux, nil)
	}
	return nil
}

// retireAux runs the retirement's Aux on a batch of its own before the
// request is queued, so that a failing Aux fails the request alone and the
// committer only copies the batch into the group's.
func (l *Log) retireAux(rt *Retirement) (*pebble.Batch, error) {
	if rt.Aux == nil {
		return nil, nil
	}
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return nil, ErrClosed
	}
	b := l.db.NewBatch()
	if err := rt.Aux(&AuxBatch{b: b}); err != nil {
		b.Close()
		return nil, fmt.Errorf("eventlog: retirement aux writes: %w", err)
	}
	return b, nil
}

// holesOf turns sorted removed events into runs of consecutive sequences.
func holesOf(evs []RetiredEvent, manifest uint64) []Hole {
	var out []Hole
	for _, e := range evs {
		if n := len(out); n > 0 && out[n-1].Last+1 == e.Seq {
			out[n-1].Last = e.Seq
			continue
		}
		out = append(out, Hole{First: e.Seq, Last: e.Seq, Manifest: manifest})
	}
	return out
}

// Holes returns every hole of the log in seq order.
func (l *Log) Holes() ([]Hole, error) {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return nil, ErrClosed
	}
	it, err := newHoleIter(l.db)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Hole
	for ok := it.First(); ok; ok = it.Next() {
		h, ok := parseHole(it.Key(), it.Value())
		if !ok {
			return nil, corruptKey(it.Key(), "malformed hole key")
		}
		out = append(out, h)
	}
	return out, it.Error()
}

func newHoleIter(r pebble.Reader) (*pebble.Iterator, error) {
	return r.NewIter(&pebble.IterOptions{LowerBound: holePrefix, UpperBound: prefixEnd(holePrefix)})
}

// holesCover reports whether the holes seen by it cover every sequence of
// [from, to] (adjacent holes of different runs included).
func holesCover(it *pebble.Iterator, from, to uint64) (bool, error) {
	u, err := uncovered(it, from, to)
	return u > to, err
}

// uncovered returns the first sequence of [from, to] no hole covers, or
// to+1 if holes cover them all.
func uncovered(it *pebble.Iterator, from, to uint64) (uint64, error) {
	for from <= to {
		if !it.SeekLT(holeKey(from + 1)) {
			return from, it.Error()
		}
		h, ok := parseHole(it.Key(), it.Value())
		if !ok {
			return from, corruptKey(it.Key(), "malformed hole key")
		}
		if h.Last < from {
			return from, nil
		}
		from = h.Last + 1
	}
	return from, nil
}

// CompactRetired asks Pebble to compact the key spaces a retention run
// deleted from, so that the space is given back now rather than whenever
// Pebble's own compactions reach those files. The log stays usable while it
// runs; ctx bounds it.
func (l *Log) CompactRetired(ctx context.Context, first, last uint64) error {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return ErrClosed
	}
	if l.readOnly {
		return ErrReadOnly
	}
	for _, r := range [][2][]byte{
		{EventKey(first), EventKey(last + 1)},
		{[]byte{PrefixCausation}, []byte{PrefixCausation + 1}},
		{[]byte{PrefixID}, []byte{PrefixID + 1}},
		{[]byte{PrefixStream}, []byte{PrefixStream + 1}},
		{[]byte{PrefixAux}, []byte{PrefixAux + 1}},
	} {
		if err := l.db.Compact(ctx, r[0], r[1], true); err != nil {
			return fmt.Errorf("eventlog: compact: %w", err)
		}
	}
	return nil
}
