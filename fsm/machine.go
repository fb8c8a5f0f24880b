package fsm

import (
	"fmt"
	"strconv"
	"strings"
)

// MachineName is the name of the task machine this package implements.
//
// Persisted: recorded in every TASK_CREATED; never change it.
const MachineName = "pegasus.task"

// MachineVersion is the version of the task machine implemented by
// taskMachineV1.
//
// Persisted: a version number is never reused for different behaviour. A
// change to what a recorded log folds into is a new version living beside
// the old one.
const MachineVersion = 1

// CurrentMachine is the machine new tasks are created under (never assign
// to it; a new default is a code change). A TASK_CREATED
// body with an empty Machine means this one; Apply records the resolved ref
// in Task.Machine, so a task never depends on what "current" meant later.
var CurrentMachine = MachineRef{Name: MachineName, Version: MachineVersion}

// Machine is one named, versioned task state machine. Implementations are
// pure and stateless; the package-level Apply picks the machine a task was
// created under.
type Machine interface {
	// Ref names the machine and its version.
	Ref() MachineRef
	// Apply folds one event into t. See the package-level Apply.
	Apply(t Task, ev Event) (Task, error)
	// CanTransition reports whether an event of type et is legal in state s,
	// whatever its body. Apply refuses an event with a *TransitionError
	// exactly when this is false.
	CanTransition(s State, et EventType) bool
	// Legal lists the event types legal in s, in a stable order.
	Legal(s State) []EventType
	// States lists the machine's states in a stable order.
	States() []State
	// Next returns the work due for t, a task of this machine: what the
	// loop that drives it must do next. Pure, like Apply.
	Next(t *Task) Action
}

// machines holds every machine this build can fold. It is never modified
// after package initialisation.
var machines = map[MachineRef]Machine{
	CurrentMachine:        taskMachineV1{},
	taskMachineV0{}.Ref(): taskMachineV0{},
	DispatchMachine:       dispatchMachine{},
}

// Machines lists every machine this build can fold, oldest version first.
func Machines() []Machine { return []Machine{taskMachineV0{}, taskMachineV1{}, dispatchMachine{}} }

// ParseMachineRef reads a machine reference written as NAME@VERSION
// ("pegasus.task@0") or NAME/vVERSION, and checks that this build has it.
func ParseMachineRef(s string) (MachineRef, error) {
	name, ver, ok := strings.Cut(s, "@")
	if !ok {
		name, ver, ok = strings.Cut(s, "/v")
	}
	n, err := strconv.Atoi(ver)
	if !ok || err != nil || name == "" {
		return MachineRef{}, fmt.Errorf("%w: %q: want NAME@VERSION, for example %s", ErrUnknownMachine, s, CurrentMachine)
	}
	ref := MachineRef{Name: name, Version: n}
	if _, err := MachineFor(ref); err != nil {
		return MachineRef{}, err
	}
	return ref, nil
}

// String renders r as NAME@VERSION, the form ParseMachineRef reads.
func (r MachineRef) String() string {
	// The machines of this build, without building the string: the fold
	// names a task's machine in its stats and summary.
	switch {
	case r.Name == MachineName && r.Version == 1:
		return MachineName + "@1"
	case r.Name == MachineName && r.Version == 0:
		return MachineName + "@0"
	case r.Name == DispatchMachineName && r.Version == 1:
		return DispatchMachineName + "@1"
	}
	return r.Name + "@" + strconv.Itoa(r.Version)
}

// MachineFor returns the machine named by ref. The empty ref is not resolved
// here: only a TASK_CREATED body may leave it empty (meaning CurrentMachine).
func MachineFor(ref MachineRef) (Machine, error) {
	if ref == (taskMachineV1{}).Ref() { // the common case, without hashing the name
		return taskMachineV1{}, nil
	}
	if m, ok := machines[ref]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("%w: %q version %d", ErrUnknownMachine, ref.Name, ref.Version)
}

// DefaultMachine returns the machine named by CurrentMachine.
func DefaultMachine() Machine { return machines[CurrentMachine] }

// Apply folds one event into a task and returns the new task: the pure step
// function every consumer calls (recovery, the live agent, replay, audit).
//
// The zero Task (StateNone) accepts only the events that create a task:
// TASK_CREATED, which names the machine (empty: CurrentMachine) and starts
// it, or an external input, which creates the task in idle under the
// current machine. Every later event is applied by the machine recorded in
// t.Machine.
//
// On error the returned task is t, unchanged, and the error is a
// *TransitionError (the type is not legal in t's state, see CanTransition),
// an *EventError (legal type, but the event cannot be applied), or an error
// wrapping ErrUnknownMachine when t names a machine this build lacks.
//
// Apply may reuse the backing arrays of t's slices (History, Messages,
// ActionsDone), the way append does: the returned task and t must not both be
// extended afterwards. Use Task.Clone to branch. Apply never writes to memory
// that t can observe, so t itself stays a valid snapshot.
//
// The returned task may share memory with ev.Body (the reasoning, the
// plan, the pending call, the reflection, maps and strings) and never
// modifies it: treat an applied body as immutable, as the log does.
func Apply(t Task, ev Event) (Task, error) {
	m, err := machineOf(&t, &ev)
	if err != nil {
		return t, err
	}
	if _, ok := m.(taskMachineV1); ok {
		// The common case, without copying the task through an interface
		// call: replay folds millions of events.
		n := t
		if err := applyEvent(1, &n, &ev); err != nil {
			return t, err
		}
		return n, nil
	}
	return m.Apply(t, ev)
}

// machineOf picks the machine that applies ev to t. It takes pointers:
// a call not inlined copied the task and the event (600 bytes) each time.
func machineOf(t *Task, ev *Event) (Machine, error) {
	if t.State == StateNone {
		// Not created yet. The creating event names the machine (TASK_CREATED
		// in its body, an input in its Machine field); anything else is
		// refused by the default machine as a transition from idle.
		if ev.Type == DispatchCreated {
			return dispatchMachine{}, nil
		}
		var ref MachineRef
		switch b := ev.Body.(type) {
		case *TaskCreatedBody:
			if b != nil && ev.Type == TaskCreated {
				ref = b.Machine
			}
		case *Input:
			if b != nil && b.Machine != nil {
				ref = *b.Machine
			}
		}
		if ref != (MachineRef{}) && ref.Name == MachineName { // other machines start with their own event
			if m, err := MachineFor(ref); err == nil {
				return m, nil
			}
			// Let the default machine refuse it with an *EventError.
		}
		return DefaultMachine(), nil
	}
	return MachineFor(t.Machine)
}

// CanTransition reports whether an event of type et is legal in state s of
// the current machine, whatever its body. Apply returns a *TransitionError
// exactly when it is false.
func CanTransition(s State, et EventType) bool {
	return DefaultMachine().CanTransition(s, et)
}

// CanTransition reports whether an event of type et is legal in t's state
// under the machine t was created with (false for an unknown machine).
func (t Task) CanTransition(et EventType) bool {
	if t.State == StateNone {
		return et == DispatchCreated || DefaultMachine().CanTransition(t.State, et)
	}
	m, err := MachineFor(t.Machine)
	if err != nil {
		return false
	}
	return m.CanTransition(t.State, et)
}

// IsTerminal reports whether t is completed or failed; a dispatch task
// that failed or timed out is terminal once dead-lettered (until it is
// requeued), since before that a retry may be due.
func (t Task) IsTerminal() bool {
	if t.Dispatch != nil {
		return t.State == StateCompleted || t.Dispatch.DeadLettered
	}
	return t.State.IsTerminal()
}

// IsActive reports whether t is reasoning or acting.
func (t Task) IsActive() bool { return t.State.IsActive() }
