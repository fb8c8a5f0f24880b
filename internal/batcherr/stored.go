package batcherr

import (
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
