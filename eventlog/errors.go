package eventlog

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers match them with errors.Is; the typed errors below
// unwrap to them.
var (
	// ErrNotFound is returned when an event, id or aux key does not exist
	// (or is not yet visible, see Log.Head).
	ErrNotFound = errors.New("eventlog: not found")
	// ErrConflict is returned when an append's expected version does not
	// match the stream's current version. The concrete error is a
	// *ConflictError carrying the current version.
	ErrConflict = errors.New("eventlog: expected version mismatch")
	// ErrClosed is returned by every operation on a closed Log, and ends
	// iterators and subscriptions that were open when the Log was closed.
	ErrClosed = errors.New("eventlog: log is closed")
	// ErrReadOnly is returned by writes on a Log opened with Options.ReadOnly.
	ErrReadOnly = errors.New("eventlog: log is open read-only")
	// ErrIDReused is returned when an event's ID is already in the log with
	// different content, or when only some events of an append are already
	// in the log (a partial replay): an append is replayed all or nothing.
	ErrIDReused = errors.New("eventlog: event id already used")
	// ErrFailed is returned by every append after a synced commit failed.
	// The log is poisoned: the outcome of the failed commit is unknown (it
	// may or may not be on disk after a restart), so the log refuses to
	// guess and refuses further writes until it is reopened. Reads continue
	// to work and never show the failed commit.
	ErrFailed = errors.New("eventlog: log failed and refuses writes")
	// ErrDamaged is returned by every append to a log that holds damaged
	// data: records missing below the head, found at Open (a table the
	// MANIFEST no longer lists), or a corrupt file found while running (a
	// bad sstable block). Appending on top of damage would build on a log
	// that can no longer be audited or folded whole, so the log refuses,
	// and keeps refusing after a reopen while the damage is there: the
	// data must be restored (docs/operations.md). Reads of what is intact
	// continue. The error also carries the *CorruptionError that names the
	// damage (IsCorruption).
	ErrDamaged = errors.New("eventlog: log is damaged and refuses writes")
	// ErrInvalid is returned for malformed input: a bad stream name, an empty
	// type, an oversized event, an empty append, a duplicate id in one append.
	ErrInvalid = errors.New("eventlog: invalid argument")
	// ErrFormat is returned by Open when the directory does not hold a
	// Pegasus log or holds one in a format this build does not understand.
	ErrFormat = errors.New("eventlog: unsupported format")
	// ErrLocked is returned by Open when another process (or another Log in
	// this process) holds the data directory.
	ErrLocked = errors.New("eventlog: data directory is locked by another process; " +
		"open a checkpoint copy (Log.Checkpoint) or talk to the running daemon (--server)")
	// ErrCorruption is the sentinel every *CorruptionError unwraps to.
	ErrCorruption = errors.New("eventlog: corruption")
	// ErrDataLoss is returned by Open when events that were acknowledged
	// are missing: the log ends before the head that the head marker
	// (MarkerFile) recorded, or the database itself is gone while the marker
	// is not. The concrete error is a *DataLossError; it also matches
	// ErrCorruption. Options.AcceptDataLoss opens such a log anyway.
	ErrDataLoss = errors.New("eventlog: acknowledged events are missing")
	// ErrBeyondHead is returned by Scan (forward) and Subscription.Next when
	// asked to start after the head plus one: the caller has seen a sequence
	// this log does not hold (it resumes from a position of another log, or
	// of this log before data was lost). Resuming silently would skip events.
	ErrBeyondHead = errors.New("eventlog: position is beyond the head of the log")
)

// ConflictError reports an expected-version mismatch. It unwraps to
// ErrConflict.
type ConflictError struct {
	Stream   string
	Expected ExpectedVersion
	Current  uint64
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("eventlog: expected version mismatch on stream %q: expected %s, current version is %d",
		e.Stream, e.Expected, e.Current)
}

// Unwrap returns ErrConflict.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// CorruptionError reports data that fails validation: a bad checksum, a
// malformed record or key, or an index entry that disagrees with the log.
// Corrupt data is always reported with its position, never skipped.
type CorruptionError struct {
	// Seq is the global sequence of the bad record, or 0 when the problem is
	// not tied to one record (see Key).
	Seq uint64
	// Key is the raw Pebble key involved, if any.
	Key []byte
	// File is the name (not the path) of the damaged file in the data
	// directory, when the damage was found in a file rather than a record:
	// a WAL ("000012.log"), an sstable, a MANIFEST, the head marker.
	File string
	// Offset is the byte offset in File where the damage starts, or -1 when
	// unknown. Meaningful only with File.
	Offset int64
	// Reason says what is wrong.
	Reason string
}

func (e *CorruptionError) Error() string {
	switch {
	case e.File != "" && e.Offset >= 0:
		return fmt.Sprintf("eventlog: corruption in %s at offset %d: %s", e.File, e.Offset, e.Reason)
	case e.File != "":
		return fmt.Sprintf("eventlog: corruption in %s: %s", e.File, e.Reason)
	case e.Seq != 0:
		return fmt.Sprintf("eventlog: corruption at seq %d: %s", e.Seq, e.Reason)
	case e.Key != nil:
		return fmt.Sprintf("eventlog: corruption at key %q: %s", e.Key, e.Reason)
	default:
		return "eventlog: corruption: " + e.Reason
	}
}

// Unwrap returns ErrCorruption.
func (e *CorruptionError) Unwrap() error { return ErrCorruption }

// DataLossError reports acknowledged events missing from the log at Open. It
// unwraps to ErrDataLoss and ErrCorruption.
type DataLossError struct {
	// Head is the last sequence the log holds.
	Head uint64
	// Acknowledged is the head the marker recorded as acknowledged; every
	// sequence in (Head, Acknowledged] is lost.
	Acknowledged uint64
	// Reserved bounds every sequence the log may have handed out. With
	// Options.AcceptDataLoss the log continues after it, so that no
	// sequence is ever reused.
	Reserved uint64
	// File and Offset name the first damage found in the directory (a
	// WAL's last good offset, a missing MANIFEST, the missing WAL the
	// head marker names as the newest), when one was found; File is ""
	// when the damage could not be located (a deleted WAL the marker
	// does not name, such as an older one). Offset is -1 when there is
	// none.
	File   string
	Offset int64
	// Reason says what was found.
	Reason string
}

func (e *DataLossError) Error() string {
	var msg string
	switch {
	case e.Acknowledged == 0:
		msg = fmt.Sprintf("eventlog: acknowledged events may be missing: the log ends at seq %d", e.Head)
	case e.Head >= e.Acknowledged:
		// A WAL is gone that held what was written after the marker's
		// head was last recorded (a crash): how much is unknown.
		msg = fmt.Sprintf("eventlog: acknowledged events may be missing: the log ends at seq %d, and %s last recorded seq %d as acknowledged",
			e.Head, MarkerFile, e.Acknowledged)
	default:
		msg = fmt.Sprintf("eventlog: acknowledged events are missing: the log ends at seq %d but %s records seq %d as acknowledged",
			e.Head, MarkerFile, e.Acknowledged)
	}
	if e.Reason != "" {
		msg += "; " + e.Reason
	}
	if e.File != "" && e.Offset >= 0 {
		msg += fmt.Sprintf(" (first damage: %s at offset %d)", e.File, e.Offset)
	} else if e.File != "" {
		msg += fmt.Sprintf(" (first damage: %s)", e.File)
	}
	return msg
}

// Unwrap returns ErrDataLoss and ErrCorruption.
func (e *DataLossError) Unwrap() []error { return []error{ErrDataLoss, ErrCorruption} }

// IsCorruption reports whether err marks corrupt data.
func IsCorruption(err error) bool { return errors.Is(err, ErrCorruption) }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func corruptSeq(seq uint64, format string, args ...any) error {
	return &CorruptionError{Seq: seq, Offset: -1, Reason: fmt.Sprintf(format, args...)}
}

func corruptKey(key []byte, format string, args ...any) error {
	return &CorruptionError{Key: append([]byte(nil), key...), Offset: -1, Reason: fmt.Sprintf(format, args...)}
}
