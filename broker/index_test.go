package broker

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/randfill"
)

// TestSchedulingCopyKeepsWhatTheMachineReads: the index's copy of a
// dispatch task (schedulingCopy) gives the machine's answers the whole
// task gives, for random tasks in every dispatch state, so that a field
// the machine starts to read and the copy leaves out fails here rather
// than in a schedule.
func TestSchedulingCopyKeepsWhatTheMachineReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	states := []fsm.State{fsm.StatePending, fsm.StateAssigned, fsm.StateInProgress, fsm.StateCompleted,
		fsm.StateFailed, fsm.StateTimedOut}
	for i := range 4000 {
		var task fsm.Task
		randfill.Fill(rng, reflect.ValueOf(&task).Elem())
		task.Machine, task.State = fsm.DispatchMachine, states[i%len(states)]
		if task.Dispatch == nil {
			task.Dispatch = &fsm.Dispatch{}
		}
		c := schedulingCopy(&task)
		if got, want := fsm.Next(&c), fsm.Next(&task); !reflect.DeepEqual(got, want) {
			t.Fatalf("task %d (%s): Next of the copy %v, of the task %v", i, task.State, got, want)
		}
		gotAt, gotWhy := fsm.DispatchDeadline(&c)
		wantAt, wantWhy := fsm.DispatchDeadline(&task)
		if !gotAt.Equal(wantAt) || gotWhy != wantWhy {
			t.Fatalf("task %d (%s): deadline of the copy %v %v, of the task %v %v", i, task.State, gotAt, gotWhy, wantAt, wantWhy)
		}
		gotDue, gotRetryWhy := fsm.DispatchRetryDue(&c)
		wantDue, wantRetryWhy := fsm.DispatchRetryDue(&task)
		if gotDue != wantDue || !reflect.DeepEqual(gotRetryWhy, wantRetryWhy) {
			t.Fatalf("task %d (%s): retry due of the copy %v %v, of the task %v %v", i, task.State, gotDue, gotRetryWhy, wantDue, wantRetryWhy)
		}
	}
}
