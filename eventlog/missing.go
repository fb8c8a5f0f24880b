package eventlog

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// findMissing looks for records missing below head, as a MANIFEST that
// lost a table leaves them: the keys are in no table Pebble lists, so
// nothing reads them, and a log that opened over them would look whole
// until a read crossed the hole. It reads no record: the tables' key
// bounds (Pebble's MANIFEST, in memory once the database is open) give
// the sequences no table can hold; each such range is then read through
// (the memtable holds what the WAL replayed) and checked against the
// holes Retire recorded. The cost is one pass over the list of tables and
// one seek per gap between tables, whatever the size of the log.
//
// A record missing inside a table's bounds (a table dropped while another
// table's bounds span its keys) is not found here; Verify finds it, and
// so does any read that crosses it. The result is nil when nothing is
// missing.
func (l *Log) findMissing(head uint64) (*CorruptionError, error) {
	if head == 0 {
		return nil, nil
	}
	levels, err := l.db.SSTables()
	if err != nil {
		return nil, fmt.Errorf("eventlog: list tables: %w", err)
	}
	var spans []seqSpan
	for _, tables := range levels {
		for _, t := range tables {
			if s, ok := eventSpan(t.Smallest.UserKey, t.Largest.UserKey); ok {
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
			if ce, err := l.checkGap(next, min(s.lo-1, head), head); ce != nil || err != nil {
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
		return l.checkGap(next, head, head)
	}
	return nil, nil
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

// checkGap reads the sequences [lo, hi] that no table's bounds hold:
// records there are in the memtable, or removed by Retire (a hole key
// covers them), or missing. It returns the first missing run.
func (l *Log) checkGap(lo, hi, head uint64) (*CorruptionError, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: EventKey(lo), UpperBound: EventKey(hi + 1)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	holes, err := newHoleIter(l.db)
	if err != nil {
		return nil, err
	}
	defer holes.Close()
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
