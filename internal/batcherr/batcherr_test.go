package batcherr

import (
	"context"
	"errors"
	"slices"
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

// racingLog is a log whose first AppendMulti finds raced stored by
// another request meanwhile, and refuses the append whole as the log does.
type racingLog struct {
	getter
	raced   eventlog.Event
	appends [][]string // the streams of each append
}

func (l *racingLog) Append(ctx context.Context, stream string, expected eventlog.ExpectedVersion, events ...eventlog.Event) (eventlog.AppendResult, error) {
	res, err := l.AppendMulti(ctx, eventlog.StreamAppend{Stream: stream, Expected: expected, Events: events})
	if err != nil {
		return eventlog.AppendResult{}, err
	}
	return res[0], nil
}

func (l *racingLog) AppendMulti(_ context.Context, appends ...eventlog.StreamAppend) ([]eventlog.AppendResult, error) {
	var streams []string
	for _, sa := range appends {
		streams = append(streams, sa.Stream)
	}
	l.appends = append(l.appends, streams)
	if _, ok := l.getter[l.raced.ID]; !ok {
		l.getter[l.raced.ID] = l.raced
		return nil, eventlog.ErrIDReused
	}
	out := make([]eventlog.AppendResult, len(appends))
	for i, sa := range appends {
		ev := sa.Events[0]
		ev.Stream, ev.Seq = sa.Stream, uint64(10+i)
		l.getter[ev.ID] = ev
		out[i] = eventlog.AppendResult{LastSeq: ev.Seq}
	}
	return out, nil
}

func TestCommit(t *testing.T) {
	evs := make([]eventlog.Event, 4)
	for i := range evs {
		id := ulid.Make()
		evs[i] = eventlog.Event{ID: id, Type: "T", Schema: 1, Body: []byte{byte(i)}}
	}
	stored := func(i int) eventlog.Event { ev := evs[i]; ev.Stream = ev.ID.String(); return ev }
	// evs[0] is a retry's, stored before; evs[1] a retry's that another
	// request stores during the first append; evs[2] and evs[3] are new,
	// evs[3] under an id drawn for the batch.
	l := &racingLog{getter: getter{evs[0].ID: stored(0)}, raced: stored(1)}
	held, last, err := Commit(context.Background(), l, l, evs, []bool{false, false, false, true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, false, false}; !slices.Equal(held, want) {
		t.Errorf("held %v, want %v", held, want)
	}
	if last != 11 {
		t.Errorf("last %d, want 11", last)
	}
	if len(l.appends) != 2 || len(l.appends[0]) != 3 || !slices.Equal(l.appends[1], []string{evs[2].ID.String(), evs[3].ID.String()}) {
		t.Errorf("appends %v", l.appends)
	}

	// An id stored with other content refuses the batch, naming the item.
	other := stored(2)
	other.Body = []byte("other")
	l = &racingLog{getter: getter{evs[2].ID: other}, raced: stored(1)}
	_, _, err = Commit(context.Background(), l, l, evs, make([]bool, len(evs)))
	var be *Error
	if !errors.As(err, &be) || len(be.Items) != 1 || be.Items[0].Index != 2 || !errors.Is(err, eventlog.ErrIDReused) || len(l.appends) != 0 {
		t.Errorf("other content: %v, appends %v", err, l.appends)
	}
}
