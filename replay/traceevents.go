package replay

import (
	"context"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// TraceEvents gathers what traces.Build maps: the events of task id's
// stream and of the streams of the tasks it caused, in log order.
//
// TODO: descendants are not gathered yet.
func TraceEvents(ctx context.Context, r Reader, id string) ([]eventlog.Event, error) {
	it := r.Stream(ctx, id, 0)
	defer it.Close()
	var evs []eventlog.Event
	for it.Next() {
		evs = append(evs, it.Event())
	}
	return evs, it.Err()
}
