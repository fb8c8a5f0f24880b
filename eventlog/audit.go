package eventlog

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
)

// Audit is VerifyWith in steps, for a caller that reads every record as
// the audit walks them, so that the records are read once (replay's verify
// folds them in that walk): Next walks the records, the audit's first
// pass, and hands out each sound one; Finish makes the rest of the audit
// and returns what VerifyWith returns on the same log.
//
// An Audit holds a snapshot of the log; Close (or Finish) releases it, and
// closing the log ends it (ErrClosed). One goroutine at a time.
type Audit struct {
	l        *Log
	snap     *pebble.Snapshot
	v        *verifier
	walk     *pebble.Iterator // pass 1, over the records
	next     uint64           // the sequence pass 1 expects next
	archived bool
	ev       Event
	err      error // ended pass 1: I/O, a corrupt block, ctx
	started  bool
	ended    bool // pass 1 walked every record
	closed   bool
}

// NewAudit starts an audit of the log as it is now.
func (l *Log) NewAudit(ctx context.Context, o *VerifyOptions) (*Audit, error) {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return nil, ErrClosed
	}
	a := &Audit{l: l, snap: l.db.NewSnapshot(), next: 1}
	a.v = l.newVerifier(ctx, a.snap, o)
	a.v.start()
	err := a.v.open()
	if err == nil {
		a.archived = a.v.holes.First()
		err = a.v.holes.Error()
	}
	if err == nil {
		a.walk, err = a.v.iter(PrefixEvent)
	}
	if err != nil {
		a.closeLocked()
		return nil, err
	}
	a.v.begin("records", a.v.head)
	l.itersMu.Lock()
	if l.audits == nil {
		l.audits = map[*Audit]struct{}{}
	}
	l.audits[a] = struct{}{}
	l.itersMu.Unlock()
	return a, nil
}

// Archived reports whether a retention run removed records from the log
// (it has holes: Report.Holes > 0 once finished).
func (a *Audit) Archived() bool { return a.archived }

// Next advances the walk over the records to the next one and reports
// whether it is sound: it decodes, its checksum holds, its sequence
// follows the one before (but for holes Retire recorded), and nothing
// before it in the audit was wrong (Sound). It returns false at the end of
// the records and at the first problem; Finish audits the rest.
func (a *Audit) Next() bool {
	a.l.readMu.RLock()
	defer a.l.readMu.RUnlock()
	if !a.Sound() {
		return false
	}
	ev, ok := a.step()
	if !ok || ev == nil || !a.Sound() {
		return false
	}
	a.ev = *ev
	return true
}

// Sound reports whether the audit found nothing wrong so far and can go
// on: no problem, no error, the log not closed.
func (a *Audit) Sound() bool {
	return !a.closed && a.err == nil && a.v.rep.ProblemCount == 0
}

// Event is the record Next stopped at. Its Stream, Type and Body alias the
// log's memory, valid until the next call to Next, Finish or Close (as
// ScanBorrowed's).
func (a *Audit) Event() Event { return a.ev }

// Err is what ended the walk over the records early (I/O, a damaged
// block, a cancelled context, ErrClosed), if anything; Finish reports it
// as VerifyWith does.
func (a *Audit) Err() error {
	if a.closed && a.err == nil {
		return ErrClosed
	}
	return a.err
}

// step walks pass 1 one record on: ok=false at its end or on an error.
func (a *Audit) step() (*Event, bool) {
	if a.closed || a.err != nil || a.ended {
		return nil, false
	}
	var ok bool
	if !a.started {
		a.started, ok = true, a.walk.First()
	} else {
		ok = a.walk.Next()
	}
	if !ok {
		a.ended = true
		a.err = a.walk.Error()
		return nil, false
	}
	if a.err = a.v.tick(); a.err != nil {
		return nil, false
	}
	var ev *Event
	ev, a.err = a.v.record(a.walk, &a.next)
	return ev, a.err == nil
}

// Finish walks the records Next did not, makes the audit's other passes
// and returns the Report and error VerifyWith would; it closes the Audit.
func (a *Audit) Finish() (Report, error) {
	a.l.readMu.RLock()
	defer a.l.readMu.RUnlock()
	if a.closed {
		return Report{}, ErrClosed
	}
	defer a.closeLocked()
	for {
		if _, ok := a.step(); !ok {
			break
		}
	}
	err := a.err
	if err == nil {
		err = a.v.afterRecords()
	}
	a.v.close()
	return a.v.finish(err)
}

// Close ends the audit without finishing it.
func (a *Audit) Close() {
	a.l.readMu.RLock()
	defer a.l.readMu.RUnlock()
	a.closeLocked()
}

func (a *Audit) closeLocked() {
	if a.closed {
		return
	}
	a.release()
	a.l.itersMu.Lock()
	delete(a.l.audits, a)
	a.l.itersMu.Unlock()
}

// release closes what the audit holds; Log.Close calls it with itersMu
// held.
func (a *Audit) release() {
	a.closed = true
	if a.walk != nil {
		a.walk.Close()
		a.walk = nil
	}
	a.v.close()
	a.snap.Close()
}
