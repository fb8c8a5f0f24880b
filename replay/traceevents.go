package replay

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// TraceEvents gathers what traces.Build maps: the events of task id's
// stream and of the streams of the tasks it caused, in log order.
//
// A task is caused by the stream when its first event (its input, or the
// DISPATCH_CREATED of a broker task) is caused by one of the stream's
// events, through the causation index: a worker tool's broker task by its
// TOOL_CALL_STARTED, the task the built-in agent runs for a broker task
// by its DISPATCH_STARTED, a version 0 sub task by its parent's step. The
// tasks those caused are gathered too, recursively. Events on the streams
// that are not tasks' ($memory, $system, ...) are left out. An unknown
// task gives no events and no error.
func TraceEvents(ctx context.Context, r Reader, id string) ([]eventlog.Event, error) {
	var evs []eventlog.Event
	seen := map[string]bool{id: true}
	queue := []string{id}
	for len(queue) > 0 {
		stream := queue[0]
		queue = queue[1:]
		it := r.Stream(ctx, stream, 0)
		var own []eventlog.Event
		for it.Next() {
			own = append(own, it.Event())
		}
		err := it.Err()
		it.Close()
		if err != nil {
			return nil, err
		}
		evs = append(evs, own...)
		for _, ev := range own {
			ch := r.Children(ctx, ev.ID)
			for ch.Next() {
				c := ch.Event()
				if c.Version == 1 && !seen[c.Stream] && !strings.HasPrefix(c.Stream, "$") {
					seen[c.Stream] = true
					queue = append(queue, c.Stream)
				}
			}
			err := ch.Err()
			ch.Close()
			if err != nil {
				return nil, err
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(evs, func(a, b eventlog.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	return evs, nil
}
