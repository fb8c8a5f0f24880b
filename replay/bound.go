package replay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// ErrBoundNotFound is returned when a bound names an event that is not in
// the source.
var ErrBoundNotFound = errors.New("replay: bound event not found")

// Bound says where a fold stops: "the state as of" a global sequence, an
// event id or a time. Bounds are inclusive: the event at the sequence, the
// event with the id, and events stamped exactly at the time are folded. The
// zero Bound folds everything.
//
// A time bound stops before the first event stamped after it. Events
// stamped by the log's clock are in time order; an event given an explicit
// earlier time by its writer does not move the bound back.
type Bound struct {
	Seq  uint64    // fold events with Seq <= this; 0: no sequence bound
	ID   ulid.ULID // fold up to and including this event; zero: none
	Time time.Time // fold events up to the first one stamped after this; zero: none
}

// AtSeq is the bound "up to and including global sequence seq".
func AtSeq(seq uint64) Bound { return Bound{Seq: seq} }

// AtID is the bound "up to and including the event with this id".
func AtID(id ulid.ULID) Bound { return Bound{ID: id} }

// AtTime is the bound "up to the first event stamped after t".
func AtTime(t time.Time) Bound { return Bound{Time: t} }

// IsZero reports whether b is no bound at all (fold everything).
func (b Bound) IsZero() bool { return b.Seq == 0 && !b.hasID() && b.Time.IsZero() }

func (b Bound) hasID() bool { return b.ID != (ulid.ULID{}) }

// String describes the bound for messages: "seq 42", "event 01J...",
// "time 2025-...", or "head".
func (b Bound) String() string {
	switch {
	case b.Seq != 0:
		return "seq " + strconv.FormatUint(b.Seq, 10)
	case b.hasID():
		return "event " + b.ID.String()
	case !b.Time.IsZero():
		return "time " + b.Time.UTC().Format(time.RFC3339Nano)
	}
	return "head"
}

// ParseBound reads the --at argument of the CLI: a decimal sequence, a
// 26-character event id (ULID), or an RFC 3339 time.
func ParseBound(s string) (Bound, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Bound{}, fmt.Errorf("replay: empty bound: give a sequence, an event id or an RFC 3339 time")
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n == 0 {
			return Bound{}, fmt.Errorf("replay: bound: sequences start at 1")
		}
		return AtSeq(n), nil
	}
	if len(s) == ulid.EncodedSize {
		if id, err := ulid.ParseStrict(s); err == nil {
			return AtID(id), nil
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return AtTime(t), nil
	}
	return Bound{}, fmt.Errorf("replay: bound %q is not a sequence, an event id or an RFC 3339 time", s)
}

// admit says whether ev is inside the bound and whether the fold stops
// after it (or, when in is false, before it).
func (b Bound) admit(ev *eventlog.Event) (in, stop bool) {
	switch {
	case b.Seq != 0:
		if ev.Seq > b.Seq {
			return false, true
		}
		if ev.Seq == b.Seq {
			return true, true
		}
	case b.hasID():
		if ev.ID == b.ID {
			return true, true
		}
	case !b.Time.IsZero():
		if ev.Time.After(b.Time) {
			return false, true
		}
	}
	return true, false
}

// resolve turns an id bound into a sequence bound when the source can look
// the id up, so that per-task folds can stop at the right place in another
// stream. An unknown id is ErrBoundNotFound.
func (b Bound) resolve(ctx context.Context, r Reader) (Bound, error) {
	if !b.hasID() || r == nil {
		return b, nil
	}
	ev, err := r.Get(ctx, b.ID)
	if errors.Is(err, eventlog.ErrNotFound) {
		return b, fmt.Errorf("%w: %s", ErrBoundNotFound, b.ID)
	}
	if err != nil {
		return b, err
	}
	return AtSeq(ev.Seq), nil
}
