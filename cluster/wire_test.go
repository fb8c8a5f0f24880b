package cluster

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// The follower takes a message of this node's own append in flight as the
// event it sent, without parsing it: that must be exactly what parsing
// gives, and a message whose bytes differ (another node's content under
// the same id) must be parsed.
func TestOwnMessageIsWhatParsingGives(t *testing.T) {
	loc := time.FixedZone("X", 3600)
	r := &ReplicatedLog{}
	evs := []eventlog.Event{
		{ID: ulid.Make(), Stream: "task-1", Type: "TASK_CREATED", Schema: 3, Time: time.Now(), Body: []byte{0x80}},
		{ID: ulid.Make(), Stream: "task-1", Type: "X", Time: time.Date(2026, 1, 2, 3, 4, 5, 6, loc), Metadata: map[string]string{}, Body: []byte{},
			Causation: ulid.Make(), Correlation: ulid.Make()},
		{ID: ulid.Make(), Stream: "$system", Type: "SYSTEM_STARTED", Schema: 1, Time: time.Now().UTC(), Metadata: map[string]string{"k": "v"}, Body: []byte("not msgpack")},
	}
	parts := []eventlog.StreamAppend{{Stream: "task-1", Events: evs[:2]}, {Stream: "$system", Events: evs[2:]}}
	wire, err := wireOf(parts)
	if err != nil {
		t.Fatal(err)
	}
	forget := r.noteSent(parts, wire)
	for k, ev := range evs {
		h := nats.Header{}
		h.Set(jetstream.MsgIDHeader, ev.ID.String())
		h.Set(HeaderBatch, "1/1")
		h.Set(HeaderSchema, "7")
		if k != 0 {
			h.Set(HeaderSchema, map[uint16]string{0: "0", 1: "1"}[ev.Schema])
		}
		want, _, _, err := decodeEvent(h, wire[k], uint64(100+k))
		if err != nil {
			t.Fatal(err)
		}
		got, i, n, ok := r.ownMessage(h, wire[k], uint64(100+k))
		if k == 0 {
			// The schema header differs from the event's: parsed.
			if ok {
				t.Fatalf("event %d: a message with another schema was taken as sent", k)
			}
			continue
		}
		if !ok || i != 1 || n != 1 {
			t.Fatalf("event %d: own message not recognised (%v %d/%d)", k, ok, i, n)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("event %d:\nown    %#v\nparsed %#v", k, got, want)
		}
		other := append([]byte(nil), wire[k]...)
		other[len(other)-2] ^= 1
		if _, _, _, ok := r.ownMessage(h, other, 1); ok {
			t.Fatalf("event %d: other bytes under the same id taken as sent", k)
		}
	}
	if evs[1].Metadata == nil || len(evs[1].Metadata) != 0 || len(evs[2].Metadata) != 1 {
		t.Fatal("the caller's metadata was changed")
	}
	forget()
	h := nats.Header{}
	h.Set(jetstream.MsgIDHeader, evs[2].ID.String())
	h.Set(HeaderBatch, "1/1")
	h.Set(HeaderSchema, "1")
	if _, _, _, ok := r.ownMessage(h, wire[2], 1); ok {
		t.Fatal("a forgotten message taken as sent")
	}
}
