package replay

import (
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// CheckHandovers has f called with every event whose handed-over body
// (View.Expect) the fold takes, and that body, until the returned func is
// called.
func CheckHandovers(f func(ev eventlog.Event, body fsm.Body)) (restore func()) {
	handoverCheck = f
	return func() { handoverCheck = nil }
}
