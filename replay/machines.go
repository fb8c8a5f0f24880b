package replay

import (
	"context"
	"fmt"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// Outcome is what one machine made of one event: the state it moved the
// task to, or why it refused the event.
type Outcome struct {
	State   fsm.State `json:"state,omitempty"`
	Refused string    `json:"refused,omitempty"`
}

func (o Outcome) String() string {
	if o.Refused != "" {
		return "refused: " + o.Refused
	}
	return string(o.State)
}

// MachineDiff is the result of folding one task's recorded events through
// two machines: "same", or the first event where they disagree.
type MachineDiff struct {
	TaskID   string         `json:"task_id"`
	Recorded fsm.MachineRef `json:"recorded"` // the machine the task was created under
	From     fsm.MachineRef `json:"from"`
	To       fsm.MachineRef `json:"to"`
	Events   int            `json:"events"` // events compared
	Same     bool           `json:"same"`
	// At the first disagreement (Same false):
	Seq     uint64        `json:"seq,omitempty"`
	Version uint64        `json:"version,omitempty"`
	Type    fsm.EventType `json:"type,omitempty"`
	FromGot *Outcome      `json:"from_outcome,omitempty"`
	ToGot   *Outcome      `json:"to_outcome,omitempty"`
}

// DiffMachines folds task id's recorded stream through two machines, each
// as if the task had been created under it, and reports the first event
// where they disagree: one accepts it and the other refuses it, or both
// accept it into different states. Both refusing is agreement (the task is
// unchanged under both). Nothing runs but the pure machines: a recorded
// log replayed under another version of the code, without re-running the
// model or the tools.
func DiffMachines(ctx context.Context, r Reader, id string, from, to fsm.Machine) (MachineDiff, error) {
	d := MachineDiff{TaskID: id, From: from.Ref(), To: to.Ref(), Same: true}
	it := r.Stream(ctx, id, 0)
	defer it.Close()
	var a, b fsm.Task
	for it.Next() {
		raw := it.Event()
		ev, err := Decode(raw)
		if err != nil {
			return d, fmt.Errorf("replay: task %s, seq %d: %w", id, raw.Seq, err)
		}
		if d.Events == 0 {
			d.Recorded = fsm.CurrentMachine
			if ref, ok := creatingMachine(ev); ok {
				d.Recorded = ref
			}
		}
		d.Events++
		na, errA := from.Apply(a, as(ev, from.Ref()))
		nb, errB := to.Apply(b, as(ev, to.Ref()))
		oa, ob := outcome(na, errA), outcome(nb, errB)
		if (errA == nil) != (errB == nil) || oa.State != ob.State {
			d.Same = false
			d.Seq, d.Version, d.Type, d.FromGot, d.ToGot = raw.Seq, raw.Version, ev.Type, &oa, &ob
			return d, nil
		}
		a, b = na, nb
	}
	if err := it.Err(); err != nil {
		return d, err
	}
	if d.Events == 0 {
		return d, fmt.Errorf("%w: %s", projection.ErrTaskNotFound, id)
	}
	return d, nil
}

func outcome(t fsm.Task, err error) Outcome {
	if err != nil {
		return Outcome{Refused: err.Error()}
	}
	return Outcome{State: t.State}
}

// creatingMachine is the machine a creating event names, if it names one.
func creatingMachine(ev fsm.Event) (fsm.MachineRef, bool) {
	switch b := ev.Body.(type) {
	case *fsm.TaskCreatedBody:
		return b.Machine, b.Machine != (fsm.MachineRef{})
	case *fsm.Input:
		if b.Machine != nil {
			return *b.Machine, true
		}
	}
	return fsm.MachineRef{}, false
}

// as returns ev with the machine its creating body names replaced by ref,
// so that a machine folds a task recorded under another as its own. Bodies
// are copied: the recorded one is never modified.
func as(ev fsm.Event, ref fsm.MachineRef) fsm.Event {
	switch b := ev.Body.(type) {
	case *fsm.TaskCreatedBody:
		if b != nil {
			c := *b
			c.Machine = ref
			ev.Body = &c
		}
	case *fsm.Input:
		if b != nil {
			c := *b
			c.Machine = &ref // ignored unless the input creates the task
			ev.Body = &c
		}
	}
	return ev
}
