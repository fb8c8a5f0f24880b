package traces

import (
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Build maps the events of one task tree (the root task's stream and the
// streams of its descendants, as replay.TraceEvents gathers them, in log
// order) to spans. The first span is the root task's.
//
// TODO: only the task spans are drawn so far.
func Build(events []eventlog.Event, opt Options) []Span {
	if len(events) == 0 {
		return nil
	}
	root := events[0]
	corr := root.Correlation
	if corr == (ulid.ULID{}) {
		corr = root.ID
	}
	trace := TraceID(corr)
	_ = opt
	var spans []Span
	byTask := map[string]int{}
	for _, ev := range events {
		i, ok := byTask[ev.Stream]
		if !ok {
			s := Span{TraceID: trace, SpanID: SpanID(ev.ID), Name: "task " + ev.Stream, Kind: KindTask, Task: ev.Stream, Start: ev.Time, End: ev.Time, Open: true}
			if len(spans) > 0 {
				s.Parent = spans[0].SpanID
			}
			spans = append(spans, s)
			i = len(spans) - 1
			byTask[ev.Stream] = i
		}
		spans[i].End = ev.Time
	}
	return spans
}
