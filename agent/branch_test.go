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
