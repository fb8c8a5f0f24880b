package fsm

import (
	"errors"
	"fmt"
)

// Sentinel errors. Callers test for them with errors.Is; the typed errors
// below carry the details.
var (
	// ErrInvalidTransition is returned (wrapped in a *TransitionError) when an
	// event type is not legal in the task's current state, whatever its body.
	// It agrees with CanTransition.
	ErrInvalidTransition = errors.New("fsm: invalid transition")

	// ErrInvalidEvent is returned (wrapped in an *EventError) when an event
	// is legal in the current state but cannot be applied: a malformed or
	// mismatched body, a step that is not the current step, an invalid plan,
	// a fact recorded twice, or an out-of-order stream version.
	ErrInvalidEvent = errors.New("fsm: invalid event")

	// ErrUnknownEvent is returned by Decode and Encode for an event type
	// without a body type in this package.
	ErrUnknownEvent = errors.New("fsm: unknown event type")

	// ErrUnknownMachine is returned by MachineFor, and by Apply for a task or
	// a TASK_CREATED body naming a machine this build does not know.
	ErrUnknownMachine = errors.New("fsm: unknown machine")

	// ErrSchema is returned by Decode for a body schema version this build
	// cannot read.
	ErrSchema = errors.New("fsm: unsupported body schema")

	// ErrMalformed is returned by Decode and DecodeTask for bytes that are
	// not a valid encoding.
	ErrMalformed = errors.New("fsm: malformed encoding")
)

// TransitionError says that an event type is not legal in a state. Apply
// returns one exactly when CanTransition(From, Event) is false.
type TransitionError struct {
	From  State
	Event EventType
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("fsm: invalid transition: %s -(%s)->", e.From, e.Event)
}

// Unwrap returns ErrInvalidTransition.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// EventError says why an event whose type is legal in the current state was
// refused anyway. The task is left unchanged.
type EventError struct {
	State  State     // the task's state when the event was refused
	Event  EventType // the envelope's event type
	Reason string    // what is wrong, in a few words
	Err    error     // an underlying cause (for example ErrUnknownMachine), or nil
}

func (e *EventError) Error() string {
	return fmt.Sprintf("fsm: invalid event: %s in %s: %s", e.Event, e.State, e.Reason)
}

// Unwrap returns ErrInvalidEvent and, when set, the underlying cause.
func (e *EventError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidEvent, e.Err}
	}
	return []error{ErrInvalidEvent}
}

func eventErr(s State, et EventType, format string, args ...any) *EventError {
	return &EventError{State: s, Event: et, Reason: fmt.Sprintf(format, args...)}
}

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
