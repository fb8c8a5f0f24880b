package eventlog

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// findMissing looks for records missing below head, as a MANIFEST that
// lost a table leaves them: the keys are in no table Pebble lists, so
// nothing reads them, and a log that opened over them would look whole
// until a read crossed the hole. It reads no record where Pebble's own
// metadata answers (the list of tables is in memory once the database is
// open):
//
//   - every table this build wrote carries recordsProperty, the lowest and
//     highest record it holds and how many: a table holds its whole range
//     unless the count says otherwise (a compaction that merged the tables
//     on both sides of a hole), and then the range is read;
//   - other tables (written by an older build, or narrowed by Pebble) give
//     the range between their bounds, and where a bound lies beyond the
//     records (a flush holds index keys on both sides) their first and
//     last record are read;
//   - the sequences no table holds are then read through (the memtable
//     holds what the WAL replayed) and checked against the holes Retire
//     recorded.
//
// The cost is one properties block per table, a few block reads per table
// without the property, a seek per gap between tables and, after Retire,
// a pass over the hole keys: it does not grow with the number of records. What it cannot see: a table without
// the property (an older build's) that lost records inside its range, and
// a hole smaller than the retired records a table still holds (Retire's
// range deletions not compacted yet) in the same table. Verify sees those,
// and so does any read that crosses them. The result is nil when nothing
// is missing.
func (l *Log) findMissing(head uint64) (*CorruptionError, error) {
	if head == 0 {
		return nil, nil
	}
	levels, err := l.db.SSTables(pebble.WithProperties())
	if err != nil {
		if pebble.IsCorruptionError(err) {
			// A table whose footer or properties do not read back.
			return nil, &CorruptionError{File: tableAfter(err.Error(), "backing file "), Offset: -1, Reason: err.Error()}
		}
		return nil, fmt.Errorf("eventlog: list tables: %w", err)
	}
	holes, err := newHoleIter(l.db)
	if err != nil {
		return nil, err
	}
	defer holes.Close()
	var spans []seqSpan
	var ro *sstable.ReaderOptions
	for _, tables := range levels {
		for _, t := range tables {
			s, n, ok := propertyRecords(t)
			if ok {
				if n == 0 {
					continue
				}
				if n < s.hi-s.lo+1 {
					// Fewer records than the range: retired ones, or a hole.
					retired, err := retiredWithin(holes, s.lo, s.hi)
					if err != nil {
						return nil, err
					}
					if n+retired < s.hi-s.lo+1 {
						if ce, err := l.checkGap(holes, s.lo, s.hi, head); ce != nil || err != nil {
							return ce, err
						}
					}
				}
				spans = append(spans, s)
				continue
			}
			s, ok = eventSpan(t.Smallest.UserKey, t.Largest.UserKey)
			if ok && (s.lo == 0 || s.hi == math.MaxUint64) {
				// A bound beyond the records: read which records the
				// table holds, or keep the bounds' wider range if it
				// cannot be read (a read of the table reports that).
				if ro == nil {
					po := &pebble.Options{}
					po.EnsureDefaults()
					o := po.MakeReaderOptions()
					ro = &o
				}
				if r, found, err := l.tableRecords(t, ro); err == nil {
					s, ok = r, found
				}
			}
			if ok {
				spans = append(spans, s)
			}
		}
	}
	slices.SortFunc(spans, func(a, b seqSpan) int { return cmp.Compare(a.lo, b.lo) })
	next := uint64(1) // the lowest sequence no table seen so far can hold
	for _, s := range spans {
		if next > head {
			break
		}
		if s.lo > next {
			if ce, err := l.checkGap(holes, next, min(s.lo-1, head), head); ce != nil || err != nil {
				return ce, err
			}
		}
		if s.hi >= next {
			if s.hi == math.MaxUint64 {
				return nil, nil
			}
			next = s.hi + 1
		}
	}
	if next <= head {
		return l.checkGap(holes, next, head, head)
	}
	return nil, nil
}

// recordsProperty names the table property recordsCollector writes: the
// lowest and highest record sequence in the table and how many records it
// holds, three uvarints (nothing when it holds none). Persisted in every
// table: do not rename or change the encoding.
const recordsProperty = "pegasus.records"

// recordsCollector is a Pebble block property collector used only for its
// table-level value, recordsProperty. Pebble calls it for every table it
// writes (flushes and compactions).
type recordsCollector struct {
	lo, hi, n uint64
}

func newRecordsCollector() pebble.BlockPropertyCollector { return &recordsCollector{} }

func (c *recordsCollector) Name() string { return recordsProperty }

// AddPointKey counts each record once: keys come in order, and the
// versions of one key (never written twice by the log) next to each other.
func (c *recordsCollector) AddPointKey(k sstable.InternalKey, _ []byte) error {
	if kind := k.Kind(); kind != sstable.InternalKeyKindSet && kind != sstable.InternalKeyKindSetWithDelete {
		return nil
	}
	seq, ok := ParseEventKey(k.UserKey)
	if !ok || (c.n > 0 && seq == c.hi) {
		return nil
	}
	if c.n == 0 {
		c.lo = seq
	}
	c.hi = seq
	c.n++
	return nil
}

func (c *recordsCollector) AddRangeKeys(sstable.Span) error { return nil }

func (c *recordsCollector) AddCollectedWithSuffixReplacement([]byte, []byte, []byte) error {
	return fmt.Errorf("eventlog: %s does not support suffix replacement", recordsProperty)
}

func (c *recordsCollector) SupportsSuffixReplacement() bool { return false }

func (c *recordsCollector) FinishDataBlock(buf []byte) ([]byte, error) { return buf, nil }

func (c *recordsCollector) AddPrevDataBlockToIndexBlock() {}

func (c *recordsCollector) FinishIndexBlock(buf []byte) ([]byte, error) { return buf, nil }

func (c *recordsCollector) FinishTable(buf []byte) ([]byte, error) {
	if c.n > 0 {
		buf = binary.AppendUvarint(buf, c.lo)
		buf = binary.AppendUvarint(buf, c.hi)
		buf = binary.AppendUvarint(buf, c.n)
	}
	*c = recordsCollector{}
	return buf, nil
}

// propertyRecords reads recordsProperty of t: the range of records it
// holds and how many. ok is false when t has no usable property: written
// by an older build, or virtual (its properties are its file's, which
// holds more than it).
func propertyRecords(t pebble.SSTableInfo) (s seqSpan, n uint64, ok bool) {
	if t.Virtual || t.Properties == nil {
		return seqSpan{}, 0, false
	}
	v, found := t.Properties.UserProperties[recordsProperty]
	if !found || len(v) == 0 {
		return seqSpan{}, 0, false
	}
	b := []byte(v[1:]) // Pebble's one-byte id of the collector first
	if len(b) == 0 {
		return seqSpan{}, 0, true
	}
	var w int
	for _, p := range []*uint64{&s.lo, &s.hi, &n} {
		if *p, w = binary.Uvarint(b); w <= 0 {
			return seqSpan{}, 0, false
		}
		b = b[w:]
	}
	if n == 0 || s.lo > s.hi || n > s.hi-s.lo+1 {
		return seqSpan{}, 0, false
	}
	return s, n, true
}

// retiredWithin counts the sequences of [lo, hi] that Retire removed.
func retiredWithin(holes *pebble.Iterator, lo, hi uint64) (uint64, error) {
	var n uint64
	ok := holes.SeekLT(holeKey(lo + 1))
	if !ok {
		ok = holes.First()
	}
	for ; ok; ok = holes.Next() {
		h, valid := parseHole(holes.Key(), holes.Value())
		if !valid {
			return 0, corruptKey(holes.Key(), "malformed hole key")
		}
		if h.First > hi {
			break
		}
		if from, to := max(h.First, lo), min(h.Last, hi); from <= to {
			n += to - from + 1
		}
	}
	return n, holes.Error()
}

// tableRecords reads the first and last record of table t within its
// bounds (a virtual table's are narrower than its file's): the sequences it
// holds. found is false when it holds none.
func (l *Log) tableRecords(t pebble.SSTableInfo, ro *sstable.ReaderOptions) (s seqSpan, found bool, err error) {
	defer func() {
		// Pebble's table reader asserts with panics; a table it cannot
		// read is the reads' to report, not a reason to stop Open.
		if r := recover(); r != nil {
			s, found, err = seqSpan{}, false, fmt.Errorf("eventlog: read table %s: %v", t.BackingSSTNum, r)
		}
	}()
	if t.BackingType != pebble.BackingTypeLocal {
		return seqSpan{}, false, fmt.Errorf("eventlog: table %s is not local", t.BackingSSTNum)
	}
	f, err := l.opts.FS.Open(l.opts.FS.PathJoin(l.dir, t.BackingSSTNum.String()+".sst"))
	if err != nil {
		return seqSpan{}, false, err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		f.Close()
		return seqSpan{}, false, err
	}
	r, err := sstable.NewReader(context.Background(), readable, *ro)
	if err != nil {
		readable.Close()
		return seqSpan{}, false, err
	}
	defer r.Close()
	lower, upper := []byte{PrefixEvent}, []byte{PrefixEvent + 1}
	if bytes.Compare(t.Smallest.UserKey, lower) > 0 {
		lower = t.Smallest.UserKey
	}
	if bytes.Compare(t.Largest.UserKey, upper) < 0 {
		upper = append(append([]byte(nil), t.Largest.UserKey...), 0)
	}
	it, err := r.NewIter(sstable.NoTransforms, lower, upper, sstable.AssertNoBlobHandles)
	if err != nil {
		return seqSpan{}, false, err
	}
	defer it.Close()
	// Seeks, not First and Last: Pebble's table iterators want those
	// without bounds.
	first := it.SeekGE(lower, 0)
	if first == nil {
		return seqSpan{}, false, it.Error()
	}
	s.lo = seqBound(first.K.UserKey[1:], 0x00)
	last := it.SeekLT(upper, 0)
	if last == nil {
		return seqSpan{}, false, it.Error()
	}
	s.hi = seqBound(last.K.UserKey[1:], 0xff)
	return s, true, nil
}

// seqSpan is the range of event sequences a table's bounds allow.
type seqSpan struct{ lo, hi uint64 }

// eventSpan is the range of event sequences between a table's smallest
// and largest keys, or false if the table holds no event key. Bounds
// that are not event keys widen the range (a table from the causation
// index to the id index spans the whole log).
func eventSpan(smallest, largest []byte) (seqSpan, bool) {
	e := []byte{PrefixEvent}
	if bytes.Compare(largest, e) < 0 || (len(smallest) > 0 && smallest[0] > PrefixEvent) {
		return seqSpan{}, false
	}
	s := seqSpan{lo: 0, hi: math.MaxUint64}
	if len(smallest) > 0 && smallest[0] == PrefixEvent {
		s.lo = seqBound(smallest[1:], 0x00)
	}
	if largest[0] == PrefixEvent {
		s.hi = seqBound(largest[1:], 0xff)
	}
	return s, true
}

// seqBound reads a sequence from the bytes after an event key's prefix,
// padding a short key with pad.
func seqBound(b []byte, pad byte) uint64 {
	buf := [8]byte{pad, pad, pad, pad, pad, pad, pad, pad}
	copy(buf[:], b)
	return binary.BigEndian.Uint64(buf[:])
}

// checkGap reads the records of [lo, hi], which no table holds whole:
// records there are in the memtable or a table, or removed by Retire (a
// hole key covers them), or missing. It returns the first missing run.
func (l *Log) checkGap(holes *pebble.Iterator, lo, hi, head uint64) (*CorruptionError, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: EventKey(lo), UpperBound: EventKey(hi + 1)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	want := lo
	for ok := it.First(); ; ok = it.Next() {
		present := hi + 1 // the next record present, past the gap if none
		if ok {
			seq, valid := ParseEventKey(it.Key())
			if !valid {
				return nil, corruptKey(it.Key(), "malformed event key")
			}
			present = seq
		} else if err := it.Error(); err != nil {
			return nil, readError(want, err)
		}
		if present > want {
			first, err := uncovered(holes, want, present-1)
			if err != nil {
				return nil, err
			}
			if first < present {
				return missingRun(holes, first, present-1, head)
			}
		}
		if !ok {
			return nil, nil
		}
		want = present + 1
	}
}

// missingRun reports the records from first missing up to the next hole
// Retire recorded or last, whichever comes first.
func missingRun(holes *pebble.Iterator, first, last, head uint64) (*CorruptionError, error) {
	if holes.SeekGE(holeKey(first)) {
		h, ok := parseHole(holes.Key(), holes.Value())
		if !ok {
			return nil, corruptKey(holes.Key(), "malformed hole key")
		}
		last = min(last, h.First-1)
	} else if err := holes.Error(); err != nil {
		return nil, err
	}
	return &CorruptionError{Seq: first, Offset: -1, Reason: fmt.Sprintf("records %d to %d (%d events) are missing below the head %d: "+
		"no table the MANIFEST lists holds them (the MANIFEST is damaged or a table was lost)", first, last, last-first+1, head)}, nil
}
