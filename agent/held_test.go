package agent

import (
	"reflect"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestHeldRoom: the events an outcome builds in the room after the held
// events (held.room) are appended with them without a new array, in
// order; events held in an array the held does not own are never written
// past (take copies them).
func TestHeldRoom(t *testing.T) {
	id := func(n int) ulid.ULID { return ulid.MustNew(uint64(n), nil) }
	ids := func(evs []eventlog.Event) []ulid.ULID {
		out := make([]ulid.ULID, len(evs))
		for i := range evs {
			out[i] = evs[i].ID
		}
		return out
	}
	h := &held{base: 3, evs: []eventlog.Event{{ID: id(1)}, {ID: id(2)}}, own: true}
	evs := h.room(2)
	evs = append(evs, eventlog.Event{ID: id(3)}, eventlog.Event{ID: id(4)})
	arr := &h.evs[:1][0]
	v, all, took := h.take(9, evs)
	if v != 3 || !took || !reflect.DeepEqual(ids(all), []ulid.ULID{id(1), id(2), id(3), id(4)}) || h.evs != nil {
		t.Fatalf("take: version %d, took %v, ids %v, left %v", v, took, ids(all), h.evs)
	}
	if &all[0] != arr {
		t.Errorf("the events were copied to a new array")
	}
	// More events than the room: still all of them, in order.
	h = &held{base: 3, evs: []eventlog.Event{{ID: id(1)}}, own: true}
	evs = h.room(1)
	for n := 2; n <= 6; n++ {
		evs = append(evs, eventlog.Event{ID: id(n)})
	}
	if _, all, _ = h.take(9, evs); !reflect.DeepEqual(ids(all), []ulid.ULID{id(1), id(2), id(3), id(4), id(5), id(6)}) {
		t.Fatalf("take past the room: ids %v", ids(all))
	}
	// Not owned: the array's room stays untouched.
	shared := make([]eventlog.Event, 1, 4)
	shared[0].ID = id(1)
	h = &held{base: 3, evs: shared}
	evs = h.room(2)
	evs = append(evs, eventlog.Event{ID: id(2)})
	if _, all, _ = h.take(9, evs); !reflect.DeepEqual(ids(all), []ulid.ULID{id(1), id(2)}) || shared[:2][1].ID != (ulid.ULID{}) {
		t.Fatalf("take of a shared array: ids %v, the array's room holds %v", ids(all), shared[:2][1].ID)
	}
}
