package batcherr

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Getter reads an event by its id (*eventlog.Log does).
type Getter interface {
	Get(id ulid.ULID) (eventlog.Event, error)
}

// Stored reports whether log holds ev's id as the first event of the
// stream named by that id with ev's type, schema and body: a create sent
// again (an Idempotency-Key's retry). The id stored as anything else is
// an error wrapping eventlog.ErrIDReused.
func Stored(log Getter, ev *eventlog.Event) (bool, error) {
	prev, err := log.Get(ev.ID)
	if errors.Is(err, eventlog.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if prev.Stream != ev.ID.String() || prev.Type != ev.Type || prev.Schema != ev.Schema || string(prev.Body) != string(ev.Body) {
		return false, fmt.Errorf("%w: %s is already event %d of stream %q with different content",
			eventlog.ErrIDReused, ev.ID, prev.Seq, prev.Stream)
	}
	return true, nil
}

// commitAttempts bounds how many times Commit looks again after an append
// that met an event stored meanwhile.
const commitAttempts = 4

// Commit appends each event of evs as the first of the stream its id
// names, all in one synced AppendMulti, but for those log holds already
// (Stored): held[i] says evs[i] was stored before, and is answered, not
// written again. drawn[i] says evs[i]'s id was drawn for this batch, so
// that no log holds it yet and the first look is spared. An append that
// meets an event another request stored meanwhile (a retry racing its
// first attempt) is refused whole, and Commit looks again. It returns the
// last sequence appended, 0 when nothing was. An id stored with other
// content refuses the batch with an *Error; the append's own error is
// returned as it is.
func Commit(ctx context.Context, log Getter, app eventlog.Appender, evs []eventlog.Event, drawn []bool) (held []bool, last uint64, err error) {
	return CommitWith(ctx, log, app, evs, drawn, nil)
}

// CommitWith is Commit where the stream of evs[i] takes the events
// after(i) after evs[i] (nil: none) in the same commit, when evs[i] is
// written.
func CommitWith(ctx context.Context, log Getter, app eventlog.Appender, evs []eventlog.Event, drawn []bool, after func(i int) []eventlog.Event) (held []bool, last uint64, err error) {
	held = make([]bool, len(evs))
	for attempt := 0; ; attempt++ {
		var bad Error
		appends := make([]eventlog.StreamAppend, 0, len(evs))
		for i := range evs {
			if held[i] {
				continue
			}
			if !drawn[i] || attempt > 0 {
				ok, err := Stored(log, &evs[i])
				if err != nil {
					bad.Add(i, err)
					continue
				}
				if held[i] = ok; ok {
					continue
				}
			}
			sa := eventlog.StreamAppend{Stream: evs[i].ID.String(), Expected: eventlog.NoStream, Events: evs[i : i+1]}
			if after != nil {
				if more := after(i); len(more) > 0 {
					sa.Events = append([]eventlog.Event{evs[i]}, more...)
				}
			}
			appends = append(appends, sa)
		}
		if err := bad.Err(); err != nil {
			return nil, 0, err
		}
		if len(appends) == 0 {
			return held, 0, nil
		}
		res, err := app.AppendMulti(ctx, appends...)
		if (errors.Is(err, eventlog.ErrIDReused) || errors.Is(err, eventlog.ErrConflict)) && attempt < commitAttempts-1 {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		for _, r := range res {
			last = max(last, r.LastSeq)
		}
		return held, last, nil
	}
}
