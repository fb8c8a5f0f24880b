package batcherr

import (
	"errors"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

var errBad = errors.New("bad")

func TestError(t *testing.T) {
	var e Error
	if e.Err() != nil {
		t.Fatal("an empty Error is an error")
	}
	for i := range 7 {
		e.Add(i*2, errBad)
	}
	err := e.Err()
	if !errors.Is(err, errBad) || !strings.Contains(err.Error(), "tasks[2]: bad") || !strings.Contains(err.Error(), "and 2 more") {
		t.Fatalf("%v", err)
	}
}

type getter map[ulid.ULID]eventlog.Event

func (g getter) Get(id ulid.ULID) (eventlog.Event, error) {
	if ev, ok := g[id]; ok {
		return ev, nil
	}
	return eventlog.Event{}, eventlog.ErrNotFound
}

func TestStored(t *testing.T) {
	id := ulid.Make()
	ev := eventlog.Event{ID: id, Stream: id.String(), Type: "T", Schema: 1, Body: []byte("b")}
	if ok, err := Stored(getter{}, &ev); ok || err != nil {
		t.Fatalf("absent: %v %v", ok, err)
	}
	if ok, err := Stored(getter{id: ev}, &ev); !ok || err != nil {
		t.Fatalf("the same: %v %v", ok, err)
	}
	other := ev
	other.Body = []byte("c")
	if ok, err := Stored(getter{id: other}, &ev); ok || !errors.Is(err, eventlog.ErrIDReused) {
		t.Fatalf("other content: %v %v", ok, err)
	}
}
