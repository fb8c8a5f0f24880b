package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
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
	// Lookups reports that an index disagreed with the records (in the
	// count or the digest of its entries), so the audit ran again looking
	// every entry up, to name each disagreement (see Verify).
	Lookups bool
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
// versions gap-free from 1. It is VerifyWith without progress.
//
// A nil error means the log is sound. If problems are found, the error is
// the first problem as a *CorruptionError and the Report lists them. Other
// errors (I/O, ctx) mean verification did not complete.
func (l *Log) Verify(ctx context.Context) (Report, error) {
	return l.VerifyWith(ctx, nil)
}

// VerifyOptions configures VerifyWith.
type VerifyOptions struct {
	// OnProgress, if set, is called as the audit goes, about every 1,024
	// keys and at the start of each phase, from the calling goroutine.
	// The default value is nil (no progress).
	OnProgress func(VerifyProgress)
}

// VerifyProgress says how far an audit is.
type VerifyProgress struct {
	// Phase names the key space being walked: "records", "holes",
	// "stream index", "id index", "causation index", "other keys", then,
	// only when an index disagreed with the records, the same again
	// prefixed with "lookups: ".
	Phase string
	// Done counts the keys of the phase walked so far; Total is how many
	// the phase expects (the head for the records, the entries the records
	// call for in an index), 0 when unknown.
	Done, Total uint64
}

// VerifyWith is Verify with options.
//
// The audit reads every key space once, in key order: the records, then
// each index. It does not look the records' index entries up one by one:
// the walk over the records adds the entries each record calls for to a
// digest per index (a count and two sums of 64-bit hashes of key and
// value, so the order of the entries does not matter), and the walk over
// each index adds the entries it finds to another. Equal digests mean the
// index holds exactly the entries the records call for, no more, no less,
// each with the right value (but for a hash collision: about 2^-64 per
// disagreement); the walk over the index also checks each entry's format
// and that each stream's versions are gap-free from 1. When an index
// disagrees, the audit runs again with a point lookup for every entry in
// both directions, which names each disagreement (Report.Lookups): a sound
// log costs sequential reads only, a damaged one about six random reads
// per event more. Memory stays bounded either way: no map of the log.
func (l *Log) VerifyWith(ctx context.Context, o *VerifyOptions) (Report, error) {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return Report{}, ErrClosed
	}
	snap := l.db.NewSnapshot()
	defer snap.Close()
	v := l.newVerifier(ctx, snap, o)
	v.start()
	return v.finish(v.run())
}

// newVerifier is an audit of r, a snapshot of l.
func (l *Log) newVerifier(ctx context.Context, r pebble.Reader, o *VerifyOptions) *verifier {
	v := &verifier{ctx: ctx, r: r, hash: newEntryHasher()}
	if o != nil {
		v.progress = o.OnProgress
	}
	v.start = func() {
		if loss := l.loss; loss != nil && l.readOnly {
			// Found missing at Open: the first problem, at the first lost seq.
			v.rep.add(Problem{Seq: loss.Head + 1, File: loss.File, Offset: loss.Offset, Reason: loss.Error()})
		}
	}
	return v
}

// finish ends an audit whose passes returned err: when an index disagreed
// with the records, it audits again looking every entry up, to say where.
func (v *verifier) finish(err error) (Report, error) {
	if err == nil && v.want != v.got {
		v.rep, v.lookups, v.want, v.got = Report{Lookups: true}, true, [nIndexes]digest{}, [nIndexes]digest{}
		v.start()
		err = v.run()
	}
	if err != nil {
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

// The indexes the audit digests.
const (
	idxStream = iota
	idxID
	idxCausation
	nIndexes
)

// digest is an order-independent fingerprint of a set of index entries:
// how many, and two sums of 64-bit hashes of each entry.
type digest struct{ n, a, b uint64 }

// entryHasher hashes index entries with two independent seeds.
type entryHasher struct {
	s1, s2 maphash.Seed
	buf    []byte
}

func newEntryHasher() *entryHasher {
	return &entryHasher{s1: maphash.MakeSeed(), s2: maphash.MakeSeed()}
}

// add adds the entry (key, val) to d. The key's length ends the hashed
// bytes, so that no two (key, value) pairs hash the same bytes.
func (h *entryHasher) add(d *digest, key, val []byte) {
	h.buf = append(append(h.buf[:0], key...), val...)
	h.buf = binary.AppendUvarint(h.buf, uint64(len(key)))
	d.n++
	d.a += maphash.Bytes(h.s1, h.buf)
	d.b += maphash.Bytes(h.s2, h.buf)
}

type verifier struct {
	ctx   context.Context
	r     pebble.Reader
	rep   Report
	steps int
	key   []byte
	ev    Event
	// lookups makes the index checks point lookups (the second run, after
	// a digest disagreed); otherwise they fill want and got.
	lookups   bool
	hash      *entryHasher
	want, got [nIndexes]digest
	seqBuf    [8]byte
	progress  func(VerifyProgress)
	phase     VerifyProgress
	// look has an iterator per index key space for point lookups, apart
	// from the one each pass walks.
	look map[byte]*pebble.Iterator
	// holes is over the hole keys, for gaps in pass 1.
	holes  *pebble.Iterator
	format uint32
	head   uint64 // the last record's sequence, for progress
	// start adds the problems known before the audit (a loss found at
	// Open); it runs again with the lookups.
	start func()
}

func (v *verifier) iter(prefix byte) (*pebble.Iterator, error) {
	return v.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
}

func (v *verifier) tick() error {
	v.steps++
	v.phase.Done++
	if v.steps%1024 == 0 {
		if v.progress != nil {
			v.progress(v.phase)
		}
		return v.ctx.Err()
	}
	return nil
}

// begin starts a phase of the progress.
func (v *verifier) begin(phase string, total uint64) {
	if v.lookups {
		phase = "lookups: " + phase
	}
	v.phase = VerifyProgress{Phase: phase, Total: total}
	if v.progress != nil {
		v.progress(v.phase)
	}
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
	defer v.close()
	if err := v.open(); err != nil {
		return err
	}
	v.begin("records", v.head)
	if err := v.checkLog(); err != nil {
		return err
	}
	return v.afterRecords()
}

// open checks the format key and opens the iterators the passes look
// records and entries up with; close closes them.
func (v *verifier) open() error {
	v.checkFormat()
	v.look = map[byte]*pebble.Iterator{}
	for _, p := range []byte{PrefixEvent, PrefixStream, PrefixID, PrefixCausation} {
		it, err := v.iter(p)
		if err != nil {
			return err
		}
		v.look[p] = it
	}
	if ev := v.look[PrefixEvent]; ev.Last() {
		v.head, _ = ParseEventKey(ev.Key())
	} else if err := ev.Error(); err != nil {
		return err
	}
	var err error
	v.holes, err = newHoleIter(v.r)
	return err
}

func (v *verifier) close() {
	for _, it := range v.look {
		it.Close()
	}
	v.look = nil
	if v.holes != nil {
		v.holes.Close()
		v.holes = nil
	}
}

// afterRecords makes the passes after the records'.
func (v *verifier) afterRecords() error {
	for _, pass := range []struct {
		phase string
		total func() uint64
		run   func() error
	}{
		{"holes", nil, v.checkHoles},
		{"stream index", func() uint64 { return v.want[idxStream].n }, v.checkStreamIndex},
		{"id index", func() uint64 { return v.want[idxID].n }, v.checkIDIndex},
		{"causation index", func() uint64 { return v.want[idxCausation].n }, v.checkCausationIndex},
		{"other keys", nil, v.checkStrays},
	} {
		var total uint64
		if pass.total != nil {
			total = pass.total()
		}
		v.begin(pass.phase, total)
		if err := pass.run(); err != nil {
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
	if !knownFormat(v.format) {
		v.rep.add(Problem{Key: FormatKey, Reason: fmt.Sprintf("format version value %x, want %d, %d, %d or %d",
			val, FormatVersion1, FormatVersion1Archived, FormatVersion, FormatVersionArchived)})
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
// has its stream, id and causation index entries (digested for the index
// passes to compare with; looked up in the second run). It sets the
// Report's Head, which the index passes check against.
func (v *verifier) checkLog() error {
	next := uint64(1)
	return v.walk(PrefixEvent, func(it *pebble.Iterator) error {
		_, err := v.record(it, &next)
		return err
	})
}

// record is pass 1 on the record it is at; next is the sequence expected
// there. It returns the record, decoded with its stream, type and body
// borrowed from it, or nil when the record has a problem (reported).
func (v *verifier) record(it *pebble.Iterator, next *uint64) (*Event, error) {
	seq, ok := ParseEventKey(it.Key())
	if !ok {
		v.rep.add(Problem{Key: it.Key(), Reason: "malformed event key"})
		return nil, nil
	}
	if seq != *next {
		// Report from the first sequence no hole covers.
		if u, err := uncovered(v.holes, *next, seq-1); err != nil {
			v.rep.add(Problem{Seq: *next, Reason: fmt.Sprintf("records %d to %d missing", *next, seq-1)})
		} else if u < seq {
			v.rep.add(Problem{Seq: u, Reason: fmt.Sprintf("records %d to %d missing", u, seq-1)})
		}
	}
	*next = seq + 1
	v.rep.Head = seq
	v.rep.Events++
	val, err := it.ValueAndErr()
	if err != nil {
		return nil, err
	}
	if err := decodeAtAs(val, seq, &v.ev, decodeBorrow); err != nil { // v.ev is not kept
		v.rep.add(Problem{Seq: seq, Reason: reasonOf(err)})
		return nil, nil
	}
	ev := &v.ev
	if !v.lookups {
		v.digestRecord(ev)
		return ev, nil
	}
	if err := v.checkStreamEntry(ev); err != nil {
		return nil, err
	}
	v.key = appendIDIndexKey(v.key[:0], ev.ID)
	v.checkSeqEntry(v.look[PrefixID], seq, "id index entry for "+ev.ID.String())
	if ev.Causation != (ulid.ULID{}) {
		v.key = appendCausationIndexKey(v.key[:0], ev.Causation, seq)
		if _, ok, err := exact(v.look[PrefixCausation], v.key); err != nil {
			return nil, err
		} else if !ok {
			v.rep.add(Problem{Seq: seq, Reason: "causation index entry for " + ev.Causation.String() + " missing"})
		}
	}
	return ev, nil
}

// digestRecord adds the index entries a record calls for to the digests
// the index passes compare with what they find.
func (v *verifier) digestRecord(ev *Event) {
	seq := binary.BigEndian.AppendUint64(v.seqBuf[:0], ev.Seq)
	v.key = appendStreamIndexKey(v.key[:0], ev.Stream, ev.Version)
	v.hash.add(&v.want[idxStream], v.key, seq)
	v.key = appendIDIndexKey(v.key[:0], ev.ID)
	v.hash.add(&v.want[idxID], v.key, seq)
	if ev.Causation != (ulid.ULID{}) {
		v.key = appendCausationIndexKey(v.key[:0], ev.Causation, ev.Seq)
		v.hash.add(&v.want[idxCausation], v.key, nil)
	}
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
		if v.rep.Holes == 0 && !archivedFormat(v.format) {
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
	if decodeAtAs(val, seq, &v.ev, decodeBorrow) != nil {
		return nil, false, nil // reported in pass 1
	}
	return &v.ev, true, nil
}

// checkStreamIndex is pass 2: each stream's versions are gap-free from 1
// and each entry points to the records of that stream and its versions
// (by the digest; looked up in the second run). An entry covering several
// versions is taken as the per-event entries it stands for: each (key of
// the version, its seq) is digested, as the records pass digests them.
func (v *verifier) checkStreamIndex() error {
	var curStream string
	var want uint64
	return v.walk(PrefixStream, func(it *pebble.Iterator) error {
		v.rep.StreamEntries++
		stream, last, ok := ParseStreamIndexKey(it.Key())
		e, ok2 := parseStreamEntry(it.Key(), it.Value())
		if !ok || !ok2 || e.seq == 0 || e.seqOf(e.last) > v.rep.Head {
			if !ok || !ok2 {
				v.rep.add(Problem{Key: it.Key(), Reason: "malformed stream index entry"})
			} else {
				// Not expanded: a damaged count could stand for more
				// versions than the log holds.
				at := e.seq
				if at != 0 && at <= v.rep.Head {
					at = v.rep.Head + 1
				}
				v.rep.add(Problem{Key: it.Key(), Reason: fmt.Sprintf("index entry points to seq %d, outside the log [1, %d]", at, v.rep.Head)})
			}
			if !v.lookups {
				v.hash.add(&v.got[idxStream], it.Key(), it.Value()) // the digests then disagree
			}
			return nil
		}
		if stream != curStream || v.rep.Streams == 0 {
			curStream, want = stream, 1
			v.rep.Streams++
		}
		if e.first != want {
			if e.first > want {
				v.rep.add(Problem{Key: it.Key(), Seq: e.seq, Reason: fmt.Sprintf("stream %q versions %d to %d missing", stream, want, e.first-1)})
			} else {
				v.rep.add(Problem{Key: it.Key(), Seq: e.seq, Reason: fmt.Sprintf("stream %q versions %d to %d indexed twice", stream, e.first, min(last, want-1))})
			}
		}
		want = last + 1
		if e.first != last && v.format < FormatVersion {
			v.rep.add(Problem{Key: it.Key(), Seq: e.seq, Reason: fmt.Sprintf(
				"stream index entry of %d events in a log at format version %d", last-e.first+1, v.format)})
		}
		v.phase.Done += last - e.first // tick counted one
		for ver := e.first; ver <= last; ver++ {
			seq := e.seqOf(ver)
			if !v.lookups {
				v.key = appendStreamIndexKey(v.key[:0], stream, ver)
				v.hash.add(&v.got[idxStream], v.key, binary.BigEndian.AppendUint64(v.seqBuf[:0], seq))
				continue
			}
			ev, ok, err := v.recordAt(it.Key(), seq)
			if err != nil {
				return err
			}
			if ok && (ev.Stream != stream || ev.Version != ver) {
				v.rep.add(Problem{Key: it.Key(), Seq: seq, Reason: fmt.Sprintf(
					"stream index says (%q, %d), record says (%q, %d)", stream, ver, ev.Stream, ev.Version)})
			}
		}
		return nil
	})
}

// checkStreamEntry checks, in the second run, that the stream index has
// the entry covering ev's version and that it gives ev's seq.
func (v *verifier) checkStreamEntry(ev *Event) error {
	what := fmt.Sprintf("stream index entry (%q, %d)", ev.Stream, ev.Version)
	it := v.look[PrefixStream]
	v.key = appendStreamIndexKey(v.key[:0], ev.Stream, ev.Version)
	if !it.SeekGE(v.key) || !bytes.HasPrefix(it.Key(), v.key[:len(v.key)-8]) || len(it.Key()) != len(v.key) {
		if err := it.Error(); err != nil {
			return err
		}
		v.rep.add(Problem{Seq: ev.Seq, Reason: what + " missing"})
		return nil
	}
	val, err := it.ValueAndErr()
	if err != nil {
		return err
	}
	e, ok := parseStreamEntry(it.Key(), val)
	switch {
	case !ok:
		v.rep.add(Problem{Seq: ev.Seq, Reason: what + ": malformed entry"})
	case e.first > ev.Version:
		v.rep.add(Problem{Seq: ev.Seq, Reason: what + " missing"})
	case e.seqOf(ev.Version) != ev.Seq:
		v.rep.add(Problem{Seq: ev.Seq, Reason: fmt.Sprintf("%s points to %d, not %d", what, e.seqOf(ev.Version), ev.Seq)})
	}
	return nil
}

// checkIDIndex is pass 3: each id entry points to the record with that id
// (by the digest; looked up in the second run).
func (v *verifier) checkIDIndex() error {
	return v.walk(PrefixID, func(it *pebble.Iterator) error {
		v.rep.IDEntries++
		if !v.lookups {
			v.hash.add(&v.got[idxID], it.Key(), it.Value())
		}
		id, ok := ParseIDIndexKey(it.Key())
		seq, ok2 := DecodeSeqValue(it.Value())
		if !ok || !ok2 {
			v.rep.add(Problem{Key: it.Key(), Reason: "malformed id index entry"})
			return nil
		}
		if !v.lookups {
			return nil // the digests compare the entry with the records
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
// caused by that event (by the digest; looked up in the second run).
func (v *verifier) checkCausationIndex() error {
	return v.walk(PrefixCausation, func(it *pebble.Iterator) error {
		v.rep.CausationEntries++
		if !v.lookups {
			v.hash.add(&v.got[idxCausation], it.Key(), it.Value())
		}
		c, seq, ok := ParseCausationIndexKey(it.Key())
		if !ok || len(it.Value()) != 0 {
			v.rep.add(Problem{Key: it.Key(), Reason: "malformed causation index entry"})
			return nil
		}
		if !v.lookups {
			return nil // the digests compare the entry with the records
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
