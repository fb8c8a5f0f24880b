package replay

import (
	"context"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// TestHandoverTakesOnlyWhatTheLogHolds hands a View the bodies of a
// history's task events, some paired with bytes the log does not hold for
// that id, and checks that the fold takes exactly the others and ends in
// the state of a fold that decodes every body.
func TestHandoverTakesOnlyWhatTheLogHolds(t *testing.T) {
	evs := replaytest.Generate(testSeed(t), replaytest.Config{Tasks: 30, Concurrency: 8, Finish: true})
	ref := dump(t, foldMem(t, mustMem(t, evs)))
	l, _ := logWith(t, evs)
	defer l.Close()
	v, err := NewView(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[ulid.ULID]bool{}
	wrong := 0
	var prev *eventlog.Event // the last task event handed over, by type
	for i := range evs {
		ev := &evs[i]
		if projection.KindOf(ev.Stream) != projection.KindTask {
			continue
		}
		fe, err := Decode(*ev)
		if err != nil || fe.Body == nil {
			continue
		}
		switch {
		case i%2 == 0 && prev != nil && prev.Type == ev.Type && string(prev.Body) != string(ev.Body):
			// Another event's body and bytes: the log holds other bytes.
			other, err := Decode(*prev)
			if err != nil {
				t.Fatal(err)
			}
			v.Expect(ev.ID, prev.Body, other.Body)
			wrong++
		default:
			v.Expect(ev.ID, ev.Body, fe.Body)
			want[ev.ID] = true
		}
		prev = ev
	}
	if wrong == 0 || len(want) == 0 {
		t.Fatalf("%d bodies handed over with their bytes, %d with other bytes; want some of each", len(want), wrong)
	}
	taken := map[ulid.ULID]bool{}
	handoverCheck = func(ev eventlog.Event, _ fsm.Body) { taken[ev.ID] = true }
	defer func() { handoverCheck = nil }()
	if _, err := Fold(context.Background(), v, FromLog(l), FoldOptions{}); err != nil {
		t.Fatal(err)
	}
	sameState(t, "fold with bodies handed over", ref, dump(t, v))
	if len(taken) != len(want) {
		t.Errorf("the fold took %d handed-over bodies; want %d", len(taken), len(want))
	}
	for id := range taken {
		if !want[id] {
			t.Errorf("event %s: the fold took a body whose bytes the log does not hold", id)
		}
	}
	if n := v.hand.n.Load(); n != 0 {
		t.Errorf("%d handed-over bodies left after the fold; want 0", n)
	}
}

// TestHandoverForgetsOldBodies: bodies handed over for events never
// folded are dropped after two generations.
func TestHandoverForgetsOldBodies(t *testing.T) {
	var h handover
	b := &fsm.TaskCompletedBody{Result: "r"}
	for i := range 5 * handoverGen {
		var id ulid.ULID
		id[0], id[1], id[2] = byte(i), byte(i>>8), byte(i>>16)
		h.put(id, nil, b)
	}
	if n := h.n.Load(); n > 2*handoverGen || n != int64(len(h.cur)+len(h.old)) {
		t.Fatalf("%d bodies held (%d + %d); want at most %d", n, len(h.cur), len(h.old), 2*handoverGen)
	}
}

// TestHandoverForgetsUnfoldedBodies: a body whose event is never folded
// goes after two generations of task events folded.
func TestHandoverForgetsUnfoldedBodies(t *testing.T) {
	var h handover
	h.put(ulid.ULID{1}, nil, &fsm.TaskCompletedBody{Result: "never appended"})
	ev := eventlog.Event{Stream: ulid.ULID{2}.String(), Type: string(fsm.TaskCompleted)}
	for range 2 * handoverGen {
		if h.take(&ev) != nil {
			t.Fatal("took a body handed over for another event")
		}
	}
	if n := h.n.Load(); n != 0 || len(h.cur)+len(h.old) != 0 {
		t.Fatalf("%d bodies held after two generations of events folded; want 0", n)
	}
}
