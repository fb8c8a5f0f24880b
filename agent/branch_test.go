package agent

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// TestBranchSharesNothingWritten: a stage predicts on branch(t) while t
// (the view's task) goes on: after any prefix of a task's life, the
// branch extended by one event and t extended by another are each what
// the same event makes of a deep copy. The arrays Apply appends to have
// room to spare (History from the start, Messages as they grow), which a
// branch that shared them would overwrite.
func TestBranchSharesNothingWritten(t *testing.T) {
	const id = "01JBRANCHTESTTASK000000000"
	at := time.Unix(1_800_000_000, 0).UTC()
	seq := 0
	ev := func(b fsm.Body) fsm.Event {
		seq++
		return fsm.Event{ID: ulid.MustNew(uint64(seq), nil), Type: b.EventType(), Stream: id, Time: at.Add(time.Duration(seq) * time.Second), Body: b}
	}
	life := []fsm.Event{
		ev(&fsm.Input{Kind: fsm.MessageReceived, Text: "start", Source: "api", TaskType: TypeGeneral}),
		ev(&fsm.TaskCreatedBody{TaskType: TypeGeneral, InputText: "start", Source: "api"}),
	}
	for i := range 6 {
		life = append(life, ev(&fsm.TaskSuspendedBody{Reason: "wait"}),
			ev(&fsm.Input{Kind: fsm.MessageReceived, Text: "message " + strconv.Itoa(i), Source: "api"}))
	}
	var task fsm.Task
	for i, next := range life {
		if task.State != fsm.StateNone {
			// The branch's event: another message if the task waits for
			// one, else a cancel.
			var other fsm.Event
			if task.State == fsm.StateSuspended {
				other = ev(&fsm.Input{Kind: fsm.MessageReceived, Text: "the branch's message", Source: "api"})
			} else {
				other = ev(&fsm.TaskFailedBody{Reason: "cancelled", Error: "cancelled"})
			}
			other.Version, next.Version = task.Version+1, task.Version+1
			wantBranch, err := fsm.Apply(task.Clone(), other)
			if err != nil {
				t.Fatalf("event %d: the branch's %s: %v", i, other.Type, err)
			}
			wantTask, err := fsm.Apply(task.Clone(), next)
			if err != nil {
				t.Fatalf("event %d: %s: %v", i, next.Type, err)
			}
			b := branch(&task)
			if !predict(&b, &eventlog.Event{ID: other.ID}, other.Body, other.Time) {
				t.Fatalf("event %d: the branch refused %s", i, other.Type)
			}
			got, err := fsm.Apply(task, next)
			if err != nil {
				t.Fatalf("event %d: %s: %v", i, next.Type, err)
			}
			if !reflect.DeepEqual(b, wantBranch) {
				t.Fatalf("event %d: the branch is\n%+v\nwant\n%+v", i, b, wantBranch)
			}
			if !reflect.DeepEqual(got, wantTask) {
				t.Fatalf("event %d: the task is\n%+v\nwant\n%+v", i, got, wantTask)
			}
			task = got
			continue
		}
		next.Version = 1
		var err error
		if task, err = fsm.Apply(task, next); err != nil {
			t.Fatalf("event %d: %s: %v", i, next.Type, err)
		}
	}
	if n := len(task.Context.Messages); n < 6 {
		t.Fatalf("the task has %d messages, want at least 6 (one per message)", n)
	}
}

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
