package cluster

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// wireEvents is events of every shape the stream carries: a schema, a
// time in another zone, empty metadata and body, a causation.
func wireEvents() []eventlog.Event {
	loc := time.FixedZone("X", 3600)
	return []eventlog.Event{
		{ID: ulid.Make(), Stream: "task-1", Type: "TASK_CREATED", Schema: 3, Time: time.Now(), Body: []byte{0x80}},
		{ID: ulid.Make(), Stream: "task-1", Type: "X", Time: time.Date(2026, 1, 2, 3, 4, 5, 6, loc), Metadata: map[string]string{}, Body: []byte{},
			Causation: ulid.Make(), Correlation: ulid.Make()},
		{ID: ulid.Make(), Stream: "task-1", Type: "Y", Schema: 12, Time: time.Now(), Body: []byte("b")},
		{ID: ulid.Make(), Stream: "$system", Type: "SYSTEM_STARTED", Schema: 1, Time: time.Now().UTC(), Metadata: map[string]string{"k": "v"}, Body: []byte("not msgpack")},
	}
}

// The follower takes a message of this node's own append in flight as the
// events it sent, without parsing it: that must be exactly what parsing
// gives, in both formats, and a message whose bytes or headers differ
// (another node's content under the same id) must be parsed.
func TestOwnMessageIsWhatParsingGives(t *testing.T) {
	evs := wireEvents()
	parts := []eventlog.StreamAppend{{Stream: "task-1", Events: evs[:3]}, {Stream: "$system", Events: evs[3:]}}
	for _, limit := range []int{0, 1 << 20} {
		r := &ReplicatedLog{}
		wire, err := wireOf(parts, limit)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int]int{0: 4, 1 << 20: 2}[limit]; len(wire) != want {
			t.Fatalf("limit %d: %d messages, want %d", limit, len(wire), want)
		}
		forget := r.noteSent(wire)
		var all []eventlog.Event
		for k := range wire {
			h := nats.Header{}
			wire[k].setHeader(h, k+1, len(wire))
			want, i, n, err := decodeEvents(h, wire[k].data, uint64(100+k))
			if err != nil || i != k+1 || n != len(wire) {
				t.Fatalf("limit %d, message %d: %d/%d, %v", limit, k, i, n, err)
			}
			all = append(all, want...)
			got, i, n, ok := r.ownMessage(h, wire[k].data, uint64(100+k))
			if !ok || i != k+1 || n != len(wire) {
				t.Fatalf("limit %d, message %d: own message not recognised (%v %d/%d)", limit, k, ok, i, n)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("limit %d, message %d:\nown    %#v\nparsed %#v", limit, k, got, want)
			}
			other := append([]byte(nil), wire[k].data...)
			other[len(other)-2] ^= 1
			if _, _, _, ok := r.ownMessage(h, other, 1); ok {
				t.Fatalf("limit %d, message %d: other bytes under the same id taken as sent", limit, k)
			}
			h.Set(HeaderSchema, "7"+h.Get(HeaderSchema))
			if _, _, _, ok := r.ownMessage(h, wire[k].data, 1); ok {
				t.Fatalf("limit %d, message %d: another schema taken as sent", limit, k)
			}
		}
		if len(all) != len(evs) {
			t.Fatalf("limit %d: %d events read back, want %d", limit, len(all), len(evs))
		}
		for k, ev := range all {
			if ev.ID != evs[k].ID || ev.Schema != evs[k].Schema || !ev.Time.Equal(evs[k].Time) || !bytes.Equal(ev.Body, evs[k].Body) {
				t.Fatalf("limit %d: event %d read back as %+v, want %+v", limit, k, ev, evs[k])
			}
		}
		forget()
		h := nats.Header{}
		wire[len(wire)-1].setHeader(h, 1, 1)
		if _, _, _, ok := r.ownMessage(h, wire[len(wire)-1].data, 1); ok {
			t.Fatalf("limit %d: a forgotten message taken as sent", limit)
		}
	}
	if evs[1].Metadata == nil || len(evs[1].Metadata) != 0 || len(evs[3].Metadata) != 1 {
		t.Fatal("the caller's metadata was changed")
	}
}

// A part's events fill messages up to the limit; an event larger than
// the limit goes alone, in the one-event format.
func TestWirePacksUpToTheLimit(t *testing.T) {
	var evs []eventlog.Event
	for _, size := range []int{100, 100, 100, 900, 100, 100} {
		evs = append(evs, eventlog.Event{ID: ulid.Make(), Stream: "task-1", Type: "X", Time: time.Now(), Body: bytes.Repeat([]byte("x"), size)})
	}
	one, err := wireOf([]eventlog.StreamAppend{{Stream: "task-1", Events: evs[:1]}}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	form := len(one[0].data) // an event of 100 bytes' form
	wire, err := wireOf([]eventlog.StreamAppend{{Stream: "task-1", Events: evs}}, 2*form+form/2)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, w := range wire {
		got = append(got, len(w.evs))
		if (len(w.evs) > 1) != (w.sizes != "") || strings.Count(w.schema, ",") != len(w.evs)-1 {
			t.Fatalf("message of %d events with sizes %q, schemas %q", len(w.evs), w.sizes, w.schema)
		}
	}
	if !reflect.DeepEqual(got, []int{2, 1, 1, 2}) || !wire[0].first || wire[1].first || wire[0].id != evs[0].ID.String() || wire[2].id != evs[3].ID.String() {
		t.Fatalf("messages of %v events, want [2 1 1 2] (first %v %v)", got, wire[0].first, wire[1].first)
	}
}

// A message with a format this build does not know, or whose sizes do
// not add up, is refused, not half read.
func TestDecodeEventsRefusesBadPacking(t *testing.T) {
	wire, err := wireOf([]eventlog.StreamAppend{{Stream: "task-1", Events: wireEvents()[:3]}}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(h nats.Header){
		"format 3":     func(h nats.Header) { h.Set(HeaderFormat, "3") },
		"sizes short":  func(h nats.Header) { h.Set(HeaderSizes, strings.Replace(h.Get(HeaderSizes), ",", ",1", 1)) },
		"one schema":   func(h nats.Header) { h.Set(HeaderSchema, "1") },
		"no format":    func(h nats.Header) { h.Del(HeaderFormat) },
		"bad size":     func(h nats.Header) { h.Set(HeaderSizes, "x,"+h.Get(HeaderSizes)) },
		"bytes beyond": func(h nats.Header) { h.Set(HeaderSizes, "1,1,1") },
	} {
		h := nats.Header{}
		wire[0].setHeader(h, 1, 1)
		edit(h)
		if evs, _, _, err := decodeEvents(h, wire[0].data, 9); err == nil {
			t.Errorf("%s: read as %d events", name, len(evs))
		}
	}
}
