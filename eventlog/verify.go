package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
)

// MaxReportedProblems bounds Report.Problems so that verifying a badly
// damaged log does not use unbounded memory.
const MaxReportedProblems = 100

// Problem is one inconsistency found by Verify.
type Problem struct {
	// Seq is the global sequence involved, or 0.
	Seq uint64
	// Key is the raw Pebble key involved, or nil.
	Key []byte
	// File and Offset name a damaged file of the directory (a WAL, an
	// sstable, the head marker) and where in it, when the problem is in a
	// file rather than a record; Offset is -1 when unknown.
	File   string
	Offset int64
	// Reason says what is wrong.
	Reason string
}

func (p Problem) String() string { return p.err().Error() }

func (p Problem) err() *CorruptionError {
	if p.File == "" {
		p.Offset = -1
	}
	return &CorruptionError{Seq: p.Seq, Key: p.Key, File: p.File, Offset: p.Offset, Reason: p.Reason}
}

// isPebbleCorruption reports whether err is Pebble finding a damaged file.
func isPebbleCorruption(err error) bool { return pebble.IsCorruptionError(err) }

// pebbleProblem turns Pebble's corruption error into a Problem naming the
// file ("000010.sst") and Pebble's description (block offset and checksum);
// never a host path.
func pebbleProblem(err error) Problem {
	msg, _, _ := strings.Cut(err.Error(), "\n") // Pebble appends detail lines
	p := Problem{Offset: -1, Reason: msg}
	// Pebble says "pebble: file 000010: block 850/420: ...".
	if i := strings.Index(msg, "file "); i >= 0 {
		j := i + len("file ")
		k := j
		for k < len(msg) && msg[k] >= '0' && msg[k] <= '9' {
			k++
		}
		if k > j {
			p.File = msg[j:k] + ".sst"
			if rest := msg[k:]; strings.HasPrefix(rest, ": block ") {
				var off, n int64
				if _, serr := fmt.Sscanf(rest, ": block %d/%d", &off, &n); serr == nil {
					p.Offset = off
				}
			}
		}
	}
	return p
}

// Report is the result of Verify.
type Report struct {
	Head             uint64 // highest sequence in the log
	Events           uint64 // records checked
	Streams          uint64 // distinct streams in the stream index
	StreamEntries    uint64
	IDEntries        uint64
	CausationEntries uint64
	AuxKeys          uint64
	// Holes counts the ranges a retention run removed (Retire), Retired
	// the sequences in them: gaps the audit accepts because a hole key
	// and its TypeEventsArchived event record them.
	Holes, Retired uint64
	// Problems lists the first MaxReportedProblems problems, the first
	// found first (pass order: log records by seq, then the stream, id and
	// causation indexes in key order, then stray keys).
	Problems []Problem
	// ProblemCount counts every problem, including unlisted ones.
	ProblemCount int
}

// OK reports whether no problem was found.
func (r *Report) OK() bool { return r.ProblemCount == 0 }

func (r *Report) add(p Problem) {
	r.ProblemCount++
	if len(r.Problems) < MaxReportedProblems {
		if p.Key != nil {
			p.Key = append([]byte(nil), p.Key...)
		}
		r.Problems = append(r.Problems, p)
	}
}

// Verify checks the whole log against a consistent snapshot: the format key;
// every record's checksum and envelope; that sequences are gap-free from 1;
// that every record has its stream, id and causation index entries; and
// that every index entry points to a record that agrees with it, with stream
// versions gap-free from 1. Memory stays bounded (it zips sorted key spaces
// and uses point lookups, never a map of the log).
//
// A nil error means the log is sound. If problems are found, the error is
// the first problem as a *CorruptionError and the Report lists them. Other
// errors (I/O, ctx) mean verification did not complete.
func (l *Log) Verify(ctx context.Context) (Report, error) {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return Report{}, ErrClosed
	}
	snap := l.db.NewSnapshot()
	defer snap.Close()
	v := verifier{ctx: ctx, r: snap}
	if loss := l.loss; loss != nil && l.readOnly {
		// Found missing at Open: the first problem, at the first lost seq.
		v.rep.add(Problem{Seq: loss.Head + 1, File: loss.File, Offset: loss.Offset, Reason: loss.Error()})
	}
	if err := v.run(); err != nil {
		// Pebble could not read a file (a corrupt sstable block): a
		// problem of the log, reported with the file, not a failed audit.
		if !isPebbleCorruption(err) {
			return v.rep, err
		}
		v.rep.add(pebbleProblem(err))
	}
	if !v.rep.OK() {
		return v.rep, v.rep.Problems[0].err()
	}
	return v.rep, nil
}

type verifier struct {
	ctx   context.Context
	r     pebble.Reader
	rep   Report
	steps int
	key   []byte
	ev    Event
	// look has an iterator per index key space for point lookups, apart
	// from the one each pass walks.
	look map[byte]*pebble.Iterator
	// holes is over the hole keys, for gaps in pass 1.
	holes  *pebble.Iterator
	format uint32
}

func (v *verifier) iter(prefix byte) (*pebble.Iterator, error) {
	return v.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
}

func (v *verifier) tick() error {
	v.steps++
	if v.steps%1024 == 0 {
		return v.ctx.Err()
	}
	return nil
}

// exact positions it on key and returns its value, or ok=false.
func exact(it *pebble.Iterator, key []byte) (val []byte, ok bool, err error) {
	if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
		return nil, false, it.Error()
	}
	val, err = it.ValueAndErr()
	return val, err == nil, err
}

// run checks the format key, then makes the passes in the order the
// Report promises. A pass returns an error only when it cannot go on (I/O,
// ctx); what it finds wrong goes to the Report.
func (v *verifier) run() error {
	v.checkFormat()
	v.look = map[byte]*pebble.Iterator{}
	defer func() {
		for _, it := range v.look {
			it.Close()
		}
	}()
	for _, p := range []byte{PrefixEvent, PrefixStream, PrefixID, PrefixCausation} {
		it, err := v.iter(p)
		if err != nil {
			return err
		}
		v.look[p] = it
	}
	var err error
	if v.holes, err = newHoleIter(v.r); err != nil {
		return err
	}
	defer v.holes.Close()
	for _, pass := range []func() error{v.checkLog, v.checkHoles, v.checkStreamIndex, v.checkIDIndex, v.checkCausationIndex, v.checkStrays} {
		if err := pass(); err != nil {
			return err
		}
	}
	return nil
}

// checkFormat checks the format version key.
func (v *verifier) checkFormat() {
	val, closer, err := v.r.Get(FormatKey)
	if err != nil {
		v.rep.add(Problem{Key: FormatKey, Reason: "format version key missing"})
		return
	}
	defer closer.Close()
	if len(val) == 4 {
		v.format = binary.BigEndian.Uint32(val)
	}
	if v.format != FormatVersion && v.format != FormatVersionArchived {
		v.rep.add(Problem{Key: FormatKey, Reason: fmt.Sprintf("format version value %x, want %d or %d", val, FormatVersion, FormatVersionArchived)})
	}
}

// walk calls fn on every key of prefix's key space in order, checking ctx
// as it goes.
func (v *verifier) walk(prefix byte, fn func(it *pebble.Iterator) error) error {
	it, err := v.iter(prefix)
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := v.tick(); err != nil {
			return err
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	return it.Error()
}

// checkLog is pass 1: the records are gap-free from 1 and decode, and each
// has its stream, id and causation index entries. It sets the Report's
// Head, which the index passes check against.
func (v *verifier) checkLog() error {
	next := uint64(1)
	return v.walk(PrefixEvent, func(it *pebble.Iterator) error {
		seq, ok := ParseEventKey(it.Key())
		if !ok {
			v.rep.add(Problem{Key: it.Key(), Reason: "malformed event key"})
			return nil
		}
		if seq != next {
			// Report from the first sequence no hole covers.
			if u, err := uncovered(v.holes, next, seq-1); err != nil {
				v.rep.add(Problem{Seq: next, Reason: fmt.Sprintf("records %d to %d missing", next, seq-1)})
			} else if u < seq {
				v.rep.add(Problem{Seq: u, Reason: fmt.Sprintf("records %d to %d missing", u, seq-1)})
			}
		}
		next = seq + 1
		v.rep.Head = seq
		v.rep.Events++
		val, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := decodeAt(val, seq, &v.ev); err != nil {
			v.rep.add(Problem{Seq: seq, Reason: reasonOf(err)})
			return nil
		}
		ev := &v.ev
		v.key = appendStreamIndexKey(v.key[:0], ev.Stream, ev.Version)
		v.checkSeqEntry(v.look[PrefixStream], seq, fmt.Sprintf("stream index entry (%q, %d)", ev.Stream, ev.Version))
		v.key = appendIDIndexKey(v.key[:0], ev.ID)
		v.checkSeqEntry(v.look[PrefixID], seq, "id index entry for "+ev.ID.String())
		if ev.Causation != (ulid.ULID{}) {
			v.key = appendCausationIndexKey(v.key[:0], ev.Causation, seq)
			if _, ok, err := exact(v.look[PrefixCausation], v.key); err != nil {
				return err
			} else if !ok {
				v.rep.add(Problem{Seq: seq, Reason: "causation index entry for " + ev.Causation.String() + " missing"})
			}
		}
		return nil
	})
}

// checkHoles is pass 1b: every hole key is well formed, holes do not
// overlap, no record is left inside one, and each points to the
// TypeEventsArchived event on SystemStream that records its removal,
// after it. A log with holes has format FormatVersionArchived.
func (v *verifier) checkHoles() error {
	var prev Hole
	var manifest Event
	return v.walk(PrefixMeta, func(it *pebble.Iterator) error {
		if !bytes.HasPrefix(it.Key(), holePrefix) {
			return nil
		}
		h, ok := parseHole(it.Key(), it.Value())
		if !ok {
			v.rep.add(Problem{Key: it.Key(), Reason: "malformed hole key"})
			return nil
		}
		if v.rep.Holes == 0 && v.format != FormatVersionArchived {
			v.rep.add(Problem{Key: FormatKey, Reason: fmt.Sprintf("the log has holes but format version %d", v.format)})
		}
		v.rep.Holes++
		v.rep.Retired += h.Last - h.First + 1
		if prev.Last >= h.First {
			v.rep.add(Problem{Key: it.Key(), Seq: h.First, Reason: fmt.Sprintf("hole [%d, %d] overlaps hole [%d, %d]", h.First, h.Last, prev.First, prev.Last)})
		}
		prev = h
		ev := v.look[PrefixEvent]
		if ev.SeekGE(EventKey(h.First)) && bytes.Compare(ev.Key(), EventKey(h.Last+1)) < 0 {
			s, _ := ParseEventKey(ev.Key())
			v.rep.add(Problem{Key: it.Key(), Seq: s, Reason: fmt.Sprintf("record %d inside the archived range [%d, %d]", s, h.First, h.Last)})
		} else if err := ev.Error(); err != nil {
			return err
		}
		if manifest.Seq != h.Manifest {
			val, ok, err := exact(ev, EventKey(h.Manifest))
			if err != nil {
				return err
			}
			manifest = Event{}
			if !ok || decodeAt(val, h.Manifest, &manifest) != nil || manifest.Stream != SystemStream || manifest.Type != TypeEventsArchived {
				v.rep.add(Problem{Key: it.Key(), Seq: h.First, Reason: fmt.Sprintf(
					"hole [%d, %d] points to seq %d, which is not a %s event on %s", h.First, h.Last, h.Manifest, TypeEventsArchived, SystemStream)})
				manifest = Event{}
			}
		}
		return nil
	})
}

// recordAt decodes the record an index entry (key) points to; ok=false
// when there is none to compare with, reported here or in pass 1.
func (v *verifier) recordAt(key []byte, seq uint64) (*Event, bool, error) {
	head := v.rep.Head
	if seq == 0 || seq > head {
		v.rep.add(Problem{Key: key, Reason: fmt.Sprintf("index entry points to seq %d, outside the log [1, %d]", seq, head)})
		return nil, false, nil
	}
	val, ok, err := exact(v.look[PrefixEvent], EventKey(seq))
	if err != nil || !ok {
		if err == nil {
			v.rep.add(Problem{Key: key, Seq: seq, Reason: "index entry points to a missing record"})
		}
		return nil, false, err
	}
	if decodeAt(val, seq, &v.ev) != nil {
		return nil, false, nil // reported in pass 1
	}
	return &v.ev, true, nil
}

// checkStreamIndex is pass 2: each stream's versions are gap-free from 1
// and each entry points to the record of that stream and version.
func (v *verifier) checkStreamIndex() error {
	var curStream string
	var want uint64
	return v.walk(PrefixStream, func(it *pebble.Iterator) error {
		v.rep.StreamEntries++
		stream, ver, ok := ParseStreamIndexKey(it.Key())
		seq, ok2 := DecodeSeqValue(it.Value())
		if !ok || !ok2 {
			v.rep.add(Problem{Key: it.Key(), Reason: "malformed stream index entry"})
			return nil
		}
		if stream != curStream || v.rep.Streams == 0 {
			curStream, want = stream, 1
			v.rep.Streams++
		}
		if ver != want {
			v.rep.add(Problem{Key: it.Key(), Seq: seq, Reason: fmt.Sprintf("stream %q versions %d to %d missing", stream, want, ver-1)})
		}
		want = ver + 1
		ev, ok, err := v.recordAt(it.Key(), seq)
		if err != nil {
			return err
		}
		if ok && (ev.Stream != stream || ev.Version != ver) {
			v.rep.add(Problem{Key: it.Key(), Seq: seq, Reason: fmt.Sprintf(
				"stream index says (%q, %d), record says (%q, %d)", stream, ver, ev.Stream, ev.Version)})
		}
		return nil
	})
}

// checkIDIndex is pass 3: each id entry points to the record with that id.
func (v *verifier) checkIDIndex() error {
	return v.walk(PrefixID, func(it *pebble.Iterator) error {
		v.rep.IDEntries++
		id, ok := ParseIDIndexKey(it.Key())
		seq, ok2 := DecodeSeqValue(it.Value())
		if !ok || !ok2 {
			v.rep.add(Problem{Key: it.Key(), Reason: "malformed id index entry"})
			return nil
		}
		ev, ok, err := v.recordAt(it.Key(), seq)
		if err != nil {
			return err
		}
		if ok && ev.ID != id {
			v.rep.add(Problem{Key: it.Key(), Seq: seq, Reason: fmt.Sprintf("id index says %s, record says %s", id, ev.ID)})
		}
		return nil
	})
}

// checkCausationIndex is pass 4: each causation entry points to a record
// caused by that event.
func (v *verifier) checkCausationIndex() error {
	return v.walk(PrefixCausation, func(it *pebble.Iterator) error {
		v.rep.CausationEntries++
		c, seq, ok := ParseCausationIndexKey(it.Key())
		if !ok || len(it.Value()) != 0 {
			v.rep.add(Problem{Key: it.Key(), Reason: "malformed causation index entry"})
			return nil
		}
		ev, ok, err := v.recordAt(it.Key(), seq)
		if err != nil {
			return err
		}
		if ok && ev.Causation != c {
			v.rep.add(Problem{Key: it.Key(), Seq: seq, Reason: fmt.Sprintf("causation index says %s, record says %s", c, ev.Causation)})
		}
		return nil
	})
}

// checkStrays is pass 5: no key outside the known namespaces; it counts
// the aux keys.
func (v *verifier) checkStrays() error {
	all, err := v.r.NewIter(nil)
	if err != nil {
		return err
	}
	defer all.Close()
	for ok := all.First(); ok; {
		if err := v.tick(); err != nil {
			return err
		}
		k := all.Key()
		if len(k) == 0 {
			v.rep.add(Problem{Key: []byte{}, Reason: "empty key"})
			ok = all.Next()
			continue
		}
		switch k[0] {
		case PrefixCausation, PrefixEvent, PrefixID, PrefixStream:
			ok = all.SeekGE([]byte{k[0] + 1})
			continue
		case PrefixMeta:
			if !bytes.Equal(k, FormatKey) && !bytes.Equal(k, markerKey) && !bytes.HasPrefix(k, holePrefix) {
				v.rep.add(Problem{Key: k, Reason: "unknown meta key"})
			}
		case PrefixAux:
			v.rep.AuxKeys++
		default:
			v.rep.add(Problem{Key: k, Reason: "key outside every namespace"})
		}
		ok = all.Next()
	}
	return all.Error()
}

// checkSeqEntry checks that v.key exists in it and holds seq.
func (v *verifier) checkSeqEntry(it *pebble.Iterator, seq uint64, what string) {
	val, ok, err := exact(it, v.key)
	switch {
	case err != nil:
		v.rep.add(Problem{Seq: seq, Reason: what + ": " + err.Error()})
	case !ok:
		v.rep.add(Problem{Seq: seq, Reason: what + " missing"})
	default:
		if s, ok := DecodeSeqValue(val); !ok || s != seq {
			v.rep.add(Problem{Seq: seq, Reason: fmt.Sprintf("%s points to %x, not %d", what, val, seq)})
		}
	}
}

func reasonOf(err error) string {
	if ce, ok := err.(*CorruptionError); ok {
		return ce.Reason
	}
	return err.Error()
}
