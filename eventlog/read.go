package eventlog

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
)

type iterKind uint8

const (
	iterScan iterKind = iota
	iterStream
	iterChildren
	iterAux
)

// Iterator streams events from the log: it holds one Pebble iterator (two
// for index reads), never a result set, so memory does not grow with the log.
//
// An Iterator sees the log as of its creation: events up to the head at that
// moment. It is not safe for concurrent use, except that Log.Close may end it
// from another goroutine (Next then returns false and Err returns ErrClosed).
// Always Close it.
//
// Missing or corrupt records are never skipped: Next returns false and Err
// returns a *CorruptionError naming the position. Scan and ScanBorrowed
// leave each record's checksum to Pebble's block checksums (ScanChecked).
type Iterator struct {
	l    *Log
	mu   sync.Mutex
	kind iterKind
	dir  Direction
	it   *pebble.Iterator // over the log or the index
	data *pebble.Iterator // over the log, for index reads
	// holes is over the hole keys (scans): a gap is read as a hole
	// only where Retire recorded one.
	holes *pebble.Iterator
	head  uint64

	lower, upper []byte
	started      bool
	next         uint64 // expected next seq (scan) or version (stream)
	stream       string
	causation    ulid.ULID
	key          []byte
	borrow       bool // ScanBorrowed
	checked      bool // ScanChecked: check every record's checksum
	// entry is the stream index entry a stream read is in (versions up
	// to entry.last are read from it before the next entry); entered is
	// set once the first entry was read.
	entry   streamEntry
	entered bool
	ended   bool // a stream read reached events newer than head

	ev     Event
	err    error
	closed bool
}

// Next advances to the next event and reports whether there is one.
func (it *Iterator) Next() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed || it.err != nil || it.ended {
		return false
	}
	if it.kind == iterStream && it.entered && it.next <= it.entry.last {
		ok, err := it.streamEmit()
		if err != nil {
			it.err, it.ev = err, Event{}
		}
		return ok
	}
	var ok bool
	switch {
	case !it.started:
		it.started = true
		if it.dir == Backward {
			ok = it.it.Last()
		} else {
			ok = it.it.First()
		}
	case it.dir == Backward:
		ok = it.it.Prev()
	default:
		ok = it.it.Next()
	}
	if !ok {
		if err := it.it.Error(); err != nil {
			var at uint64
			if it.kind == iterScan {
				at = it.next // the record it could not reach
			}
			it.err = readError(at, err)
		} else if it.kind == iterScan && ((it.dir == Forward && it.next <= it.head) || (it.dir == Backward && it.next >= 1)) {
			// The bounds say every seq from 1 to head exists (but holes):
			// running out early is corruption, not the end of the log.
			lo, hi := it.next, it.head
			if it.dir == Backward {
				lo, hi = 1, it.next
			}
			if covered, err := holesCover(it.holes, lo, hi); err != nil {
				it.err = err
			} else if !covered {
				it.err = corruptSeq(it.next, "record missing")
			}
		}
		return false
	}
	var err error
	switch it.kind {
	case iterScan:
		err = it.scanStep()
	case iterStream:
		ok, err = it.streamStep()
	case iterChildren:
		ok, err = it.childStep()
	}
	if err != nil {
		it.err = err
		it.ev = Event{}
		return false
	}
	return ok
}

func (it *Iterator) scanStep() error {
	seq, ok := ParseEventKey(it.it.Key())
	if !ok {
		return corruptKey(it.it.Key(), "malformed event key")
	}
	if seq != it.next {
		lo, hi := it.next, seq-1
		if it.dir == Backward {
			lo, hi = seq+1, it.next
		}
		covered, err := holesCover(it.holes, lo, hi)
		if err != nil {
			return err
		}
		if !covered {
			return corruptSeq(it.next, "record missing (next record is %d)", seq)
		}
		it.next = seq
	}
	if it.dir == Backward {
		it.next--
	} else {
		it.next++
	}
	v, err := it.it.ValueAndErr()
	if err != nil {
		return readError(seq, err)
	}
	// A bulk scan: Pebble checksummed the block the record came from.
	mode := decodeTrusted
	if it.checked {
		mode = 0
	}
	if it.borrow {
		// Straight to the fast path (decodeRecordAs's first step);
		// decodeAtAs decodes again what it declines and reports why.
		if decodeCompact(v, &it.ev, mode) && it.ev.Seq == seq {
			return nil
		}
		mode |= decodeBorrow
	}
	return decodeAtAs(v, seq, &it.ev, mode)
}

func (it *Iterator) streamStep() (bool, error) {
	// The bounds guarantee the stream prefix; only the length can be wrong.
	key := it.it.Key()
	if len(key) != len(it.lower) {
		return false, corruptKey(key, "malformed stream index key")
	}
	e, ok := parseStreamEntry(key, it.it.Value())
	if !ok {
		return false, corruptKey(key, "malformed stream index value")
	}
	// The first entry is the one whose last version is at or past the
	// start (the lower bound); it must cover the start, and every later
	// one must begin where the one before ended.
	if e.first > it.next || (it.entered && e.first != it.next) {
		return false, corruptKey(key, "stream %q version %d missing from the index (next is %d)", it.stream, it.next, e.first)
	}
	it.entered = true
	it.entry = e
	return it.streamEmit()
}

// streamEmit reads version it.next of the current stream index entry.
func (it *Iterator) streamEmit() (bool, error) {
	ver := it.next
	seq := it.entry.seqOf(ver)
	if seq > it.head {
		it.ended = true   // the rest are newer too
		return false, nil // committed after this iterator was created
	}
	it.next++
	if err := it.fetch(seq); err != nil {
		return false, err
	}
	if it.ev.Stream != it.stream || it.ev.Version != ver {
		return false, corruptSeq(seq, "stream index says %q version %d, record says %q version %d",
			it.stream, ver, it.ev.Stream, it.ev.Version)
	}
	return true, nil
}

func (it *Iterator) childStep() (bool, error) {
	c, seq, ok := ParseCausationIndexKey(it.it.Key())
	if !ok || c != it.causation {
		return false, corruptKey(it.it.Key(), "malformed causation index key")
	}
	if seq > it.head {
		return false, nil // entries are in seq order: the rest are newer too
	}
	if err := it.fetch(seq); err != nil {
		return false, err
	}
	if it.ev.Causation != it.causation {
		return false, corruptSeq(seq, "causation index says caused by %s, record says %s", it.causation, it.ev.Causation)
	}
	return true, nil
}

// fetch reads the record at seq through the data iterator.
func (it *Iterator) fetch(seq uint64) error {
	it.key = appendEventKey(it.key[:0], seq)
	if !it.data.SeekGE(it.key) || !bytes.Equal(it.data.Key(), it.key) {
		if err := it.data.Error(); err != nil {
			return readError(seq, err)
		}
		return corruptSeq(seq, "indexed record missing")
	}
	v, err := it.data.ValueAndErr()
	if err != nil {
		return readError(seq, err)
	}
	return decodeAt(v, seq, &it.ev)
}

// decodeAt decodes the record stored at seq and checks that it says so.
func decodeAt(v []byte, seq uint64, ev *Event) error { return decodeAtAs(v, seq, ev, 0) }

// decodeAtAs is decodeAt in a decodeMode.
func decodeAtAs(v []byte, seq uint64, ev *Event, mode decodeMode) error {
	if err := decodeRecordAs(v, ev, mode); err != nil {
		var ce *CorruptionError
		if errors.As(err, &ce) {
			ce.Seq = seq
		}
		return err
	}
	if ev.Seq != seq {
		return corruptSeq(seq, "record claims seq %d", ev.Seq)
	}
	return nil
}

// Event returns the current event. The caller owns it.
func (it *Iterator) Event() Event {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.ev
}

// Current is the current event in place, without Event's copy: valid
// until the next call to Next or Close, and not to be changed. For a
// reader that reads each event once and copies what it keeps (a fold
// over ScanBorrowed); from the goroutine that calls Next.
func (it *Iterator) Current() *Event { return &it.ev }

// Err returns the error that ended the iteration, if any.
func (it *Iterator) Err() error {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.err
}

// Close releases the iterator. It returns the iteration error, if any.
func (it *Iterator) Close() error {
	it.mu.Lock()
	if it.closed {
		err := it.err
		it.mu.Unlock()
		if errors.Is(err, ErrClosed) {
			return nil
		}
		return err
	}
	it.closeLocked()
	err := it.err
	it.mu.Unlock()
	if it.l != nil {
		it.l.itersMu.Lock()
		delete(it.l.iters, it)
		it.l.itersMu.Unlock()
	}
	return err
}

func (it *Iterator) closeLocked() {
	it.closed = true
	if it.it != nil {
		it.it.Close()
		it.it = nil
	}
	if it.data != nil {
		it.data.Close()
		it.data = nil
	}
	if it.holes != nil {
		it.holes.Close()
		it.holes = nil
	}
}

// forceClose is called by Log.Close with itersMu held.
func (it *Iterator) forceClose(err error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return
	}
	it.closeLocked()
	if it.err == nil {
		it.err = err
	}
}

func errIterator(err error) *Iterator {
	return &Iterator{err: err, closed: true}
}

// newIterator opens the Pebble iterators for it and registers it so that
// Close can end it.
func (l *Log) newIterator(it *Iterator, withData bool) *Iterator {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return errIterator(ErrClosed)
	}
	var err error
	it.l = l
	it.it, err = l.db.NewIter(&pebble.IterOptions{LowerBound: it.lower, UpperBound: it.upper})
	if err != nil {
		return errIterator(err)
	}
	if withData {
		it.data, err = l.db.NewIter(&pebble.IterOptions{
			LowerBound: []byte{PrefixEvent},
			UpperBound: []byte{PrefixEvent + 1},
		})
		if err != nil {
			it.it.Close()
			return errIterator(err)
		}
	}
	if it.kind == iterScan {
		// Opened after the scan's iterator: holes only grow, so this one
		// knows every hole the scan can run into.
		if it.holes, err = newHoleIter(l.db); err != nil {
			it.closeLocked()
			return errIterator(err)
		}
	}
	l.itersMu.Lock()
	l.iters[it] = struct{}{}
	l.itersMu.Unlock()
	return it
}

// Scan iterates the global log from seq from (inclusive) in direction dir,
// up to the head at the time of the call. Forward from 0 starts at 1;
// forward from head+1 yields nothing; forward from beyond head+1 fails with
// ErrBeyondHead (the caller saw a sequence this log does not hold). Backward
// from a seq above the head starts at the head. It makes every check of a
// record but its checksum, which Pebble's block checksums stand for on a
// bulk read (ScanChecked makes it too).
func (l *Log) Scan(from uint64, dir Direction) *Iterator {
	head := l.Head()
	it := &Iterator{kind: iterScan, dir: dir, head: head}
	switch dir {
	case Forward:
		from = max(from, 1)
		if from > head {
			if from-1 > head {
				return errIterator(beyondHead(from, head))
			}
			return errIterator(nil)
		}
		it.lower, it.upper, it.next = EventKey(from), EventKey(head+1), from
	case Backward:
		from = min(from, head)
		if from == 0 {
			return errIterator(nil)
		}
		it.lower, it.upper, it.next = EventKey(1), EventKey(from+1), from
	default:
		return errIterator(invalidf("direction %d", dir))
	}
	return l.newIterator(it, false)
}

// ScanBorrowed is Scan forward for a reader that copies what it keeps: the
// Stream, Type and Body of the current event alias the log's memory, valid
// only until the next call to Next or Close (Metadata is a copy). A full
// fold reads every record once and keeps little of most; this saves a copy
// of each.
func (l *Log) ScanBorrowed(from uint64) *Iterator {
	it := l.Scan(from, Forward)
	it.borrow = true // before the first Next; an iterator that failed at once reads nothing
	return it
}

// ScanChecked is Scan forward (ScanBorrowed if borrowed) for an audit:
// it checks every record's checksum, as Verify and point reads (Get,
// GetSeq, ReadStream, Children) do. Scan and ScanBorrowed do not: Pebble
// checksummed the block each record came from, so what they would miss is
// a record damaged before Pebble stored it (format.md, "Which reads check
// the checksum").
func (l *Log) ScanChecked(from uint64, borrowed bool) *Iterator {
	it := l.Scan(from, Forward)
	it.borrow, it.checked = borrowed, true // before the first Next
	return it
}

// ReadStream iterates one stream from version fromVersion (inclusive; 0 means
// 1) in version order.
func (l *Log) ReadStream(stream string, fromVersion uint64) *Iterator {
	if err := ValidateStream(stream); err != nil {
		return errIterator(err)
	}
	fromVersion = max(fromVersion, 1)
	prefix := appendStreamPrefix(nil, stream)
	it := &Iterator{
		kind: iterStream, head: l.Head(), stream: stream, next: fromVersion,
		lower: StreamIndexKey(stream, fromVersion), upper: prefixEnd(prefix),
	}
	return l.newIterator(it, true)
}

// Children iterates the events whose Causation is id, in seq order.
func (l *Log) Children(id ulid.ULID) *Iterator {
	prefix := append([]byte{PrefixCausation}, id[:]...)
	it := &Iterator{
		kind: iterChildren, head: l.Head(), causation: id,
		lower: prefix, upper: prefixEnd(prefix),
	}
	return l.newIterator(it, true)
}

// Get returns the event with the given id, or ErrNotFound.
func (l *Log) Get(id ulid.ULID) (Event, error) {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return Event{}, ErrClosed
	}
	head := l.Head()
	seq, err := l.getSeq(IDIndexKey(id))
	if err != nil {
		return Event{}, err
	}
	if seq > head {
		return Event{}, ErrNotFound
	}
	ev, err := l.readEvent(seq)
	if err != nil {
		return Event{}, err
	}
	if ev.ID != id {
		return Event{}, corruptSeq(seq, "id index entry for %s points to event %s", id, ev.ID)
	}
	return ev, nil
}

// GetSeq returns the event at a global sequence, or ErrNotFound.
func (l *Log) GetSeq(seq uint64) (Event, error) {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return Event{}, ErrClosed
	}
	if seq == 0 || seq > l.Head() {
		return Event{}, ErrNotFound
	}
	ev, err := l.readEvent(seq)
	if err != nil && IsCorruption(err) {
		if h, herr := newHoleIter(l.db); herr == nil {
			covered, _ := holesCover(h, seq, seq)
			h.Close()
			if covered {
				return Event{}, fmt.Errorf("%w: seq %d was removed by retention (archived)", ErrNotFound, seq)
			}
		}
	}
	return ev, err
}

// StreamVersion returns the stream's current (visible) version; 0 if the
// stream has no events.
func (l *Log) StreamVersion(stream string) (uint64, error) {
	if err := ValidateStream(stream); err != nil {
		return 0, err
	}
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return 0, ErrClosed
	}
	v, _, err := l.lastStreamEntry(stream, l.Head())
	return v, err
}

// lastStreamEntry returns the highest version of stream whose seq is at most
// maxSeq, and that seq.
func (l *Log) lastStreamEntry(stream string, maxSeq uint64) (version, seq uint64, err error) {
	prefix := appendStreamPrefix(nil, stream)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, 0, err
	}
	defer it.Close()
	for ok := it.Last(); ok; ok = it.Prev() {
		e, ok := parseStreamEntry(it.Key(), it.Value())
		if !ok || len(it.Key()) != len(prefix)+8 {
			return 0, 0, corruptKey(it.Key(), "malformed stream index entry")
		}
		if e.seq > maxSeq {
			continue
		}
		if last := e.seqOf(e.last); last > maxSeq {
			return e.last - (last - maxSeq), maxSeq, nil
		}
		return e.last, e.seqOf(e.last), nil
	}
	return 0, 0, it.Error()
}

func (l *Log) getSeq(key []byte) (uint64, error) {
	v, closer, err := l.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, readError(0, err)
	}
	defer closer.Close()
	seq, ok := DecodeSeqValue(v)
	if !ok {
		return 0, corruptKey(key, "malformed index value")
	}
	return seq, nil
}

func (l *Log) readEvent(seq uint64) (Event, error) {
	v, closer, err := l.db.Get(EventKey(seq))
	if errors.Is(err, pebble.ErrNotFound) {
		return Event{}, corruptSeq(seq, "indexed record missing")
	}
	if err != nil {
		return Event{}, readError(seq, err)
	}
	defer closer.Close()
	var ev Event
	err = decodeAt(v, seq, &ev)
	return ev, err
}

func beyondHead(from, head uint64) error {
	return fmt.Errorf("%w: asked to start at seq %d, the log ends at %d", ErrBeyondHead, from, head)
}

// storageError is readError for reads that are not of one record (the
// format and marker keys, the head, aux keys): corruption Pebble reports
// becomes a *CorruptionError naming the file, anything else is wrapped
// with what was being read.
func storageError(what string, err error) error {
	if pebble.IsCorruptionError(err) {
		return readError(0, err)
	}
	return fmt.Errorf("eventlog: %s: %w", what, err)
}

// readError wraps a Pebble read error. Corruption Pebble found in a file (a
// bad sstable block) becomes a *CorruptionError naming the file and block,
// so that callers match it with IsCorruption and never see a host path.
func readError(seq uint64, err error) error {
	if !pebble.IsCorruptionError(err) {
		if seq != 0 {
			return fmt.Errorf("eventlog: read seq %d: %w", seq, err)
		}
		return fmt.Errorf("eventlog: read: %w", err)
	}
	p := pebbleProblem(err)
	return &CorruptionError{Seq: seq, File: p.File, Offset: p.Offset, Reason: p.Reason}
}
