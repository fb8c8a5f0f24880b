package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestStoppedError: the error a daemon exits with names the storage's
// reason when there is one, and has no empty reason when there is not (a
// lost lease: "stopped: : cluster: ..." before).
func TestStoppedError(t *testing.T) {
	lost := fmt.Errorf("lease: %w", cluster.ErrFenced)
	if got, want := stoppedError(lost).Error(), "stopped: lease: "+cluster.ErrFenced.Error(); got != want {
		t.Errorf("lost lease: %q, want %q", got, want)
	}
	full := fmt.Errorf("%w: commit: disk", eventlog.ErrFailed)
	if got := stoppedError(full).Error(); got != "stopped: the event log refuses writes after a storage I/O error; pegasusd restarts to recover (docs/operations.md): "+full.Error() {
		t.Errorf("storage failure: %q", got)
	}
	if !errors.Is(stoppedError(lost), cluster.ErrFenced) {
		t.Error("the cause is not wrapped")
	}
}
