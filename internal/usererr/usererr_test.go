package usererr

import (
	"errors"
	"fmt"
	"testing"
)

func TestMessage(t *testing.T) {
	errNotFound := errors.New("broker: not found")
	err := fmt.Errorf("requeue: %w", Errorf(errNotFound, "no such task %q", "T"))
	if !errors.Is(err, errNotFound) {
		t.Errorf("errors.Is(%v, the sentinel) = false", err)
	}
	if got, want := err.Error(), `requeue: broker: not found: no such task "T"`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, ok := Message(err); !ok || got != `no such task "T"` {
		t.Errorf("Message = %q, %v", got, ok)
	}
	if got, ok := Message(errNotFound); ok || got != "" {
		t.Errorf("Message of a bare sentinel = %q, %v; want none", got, ok)
	}
}
