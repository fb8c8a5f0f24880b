package cliconv

import (
	"errors"
	"fmt"
	"testing"
)

// TestMessage: package prefixes of wrapped sentinels are not the
// operator's business; the rest of the text is kept.
func TestMessage(t *testing.T) {
	sentinel := errors.New("replay: bad export header")
	err := fmt.Errorf(`export "x.ndjson": %w: eventlog: not a log (a replay: b)`, sentinel)
	if got, want := Message(err), `export "x.ndjson": bad export header: not a log (a b)`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := Message(fmt.Errorf("%w: task %q", errors.New("broker: not found"), "T")), `not found: task "T"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := Message(fmt.Errorf("line 1: not an event: %w", errors.New(`json: unknown field "x"`))), `line 1: not an event: unknown field "x"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if Code(Kind(ErrNotFound, err)) != ExitNotFound || Code(Usagef("x")) != ExitUsage || Code(err) != ExitFailed {
		t.Error("exit codes")
	}
}
