package otlp

import (
	"context"
	"errors"
	"slices"
	"unsafe"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/traces"
)

// ErrNotRoot is returned by Collect for a task that another task caused:
// its spans belong to its root's trace.
var ErrNotRoot = errors.New("otlp: the task is not a root task: its spans are in its root's trace")

// Ends reports whether ev may end a root task's trace: a task's
// TASK_COMPLETED, TASK_FAILED or REFLECTION_COMPLETE (reflection runs
// after completion, its model calls are spans of the trace), a broker
// task's DISPATCH_COMPLETED, DISPATCH_DEAD_LETTERED or
// DISPATCH_CANCELLED. The live exporter sends a root task's trace at each
// of them: what it sent before is sent again unchanged, and backends keep
// one copy of identical spans.
func Ends(ev eventlog.Event) bool {
	switch fsm.EventType(ev.Type) {
	case fsm.TaskCompleted, fsm.TaskFailed, fsm.ReflectionComplete,
		fsm.DispatchCompleted, fsm.DispatchDeadLettered, fsm.DispatchCancelled:
		return true
	}
	return false
}

// IsRoot reports whether ev, a stream's first event, starts a root task:
// its input (MESSAGE_RECEIVED, WEBHOOK_TRIGGERED, SCHEDULE_FIRED),
// TASK_CREATED or DISPATCH_CREATED without a parent task, or with one but
// without a causation (nothing joins it to its parent's tree).
func IsRoot(ev eventlog.Event) bool {
	if ev.Version != 1 {
		return false
	}
	switch fsm.EventType(ev.Type) {
	case fsm.MessageReceived, fsm.WebhookTriggered, fsm.ScheduleFired, fsm.TaskCreated, fsm.DispatchCreated:
	default:
		return false // no other first event starts a task: not decoded
	}
	if ev.Stream == projection.MemoryStream || ev.Stream == projection.SystemStream {
		return false
	}
	// A task that names a parent but was caused by none of its events (a
	// broker task created through the API with parent_task_id) is in no
	// tree (replay.TraceEvents joins by causation): it is a root of its
	// own, whatever its body says.
	if ev.Causation == (ulid.ULID{}) {
		return true
	}
	// Nothing of the body outlives the call: decoded in place.
	body, err := fsm.DecodeShared(fsm.EventType(ev.Type), ev.Schema, unsafe.String(unsafe.SliceData(ev.Body), len(ev.Body)))
	if err != nil {
		return false
	}
	switch b := body.(type) {
	case *fsm.Input:
		return b.ParentTaskID == ""
	case *fsm.TaskCreatedBody:
		return b.ParentTaskID == ""
	case *fsm.DispatchCreatedBody:
		return b.ParentTaskID == ""
	}
	return false
}

// IsRootTask reports whether task id is a root task (IsRoot of its first
// event): ErrNotRoot if it is another task's descendant, false for an
// unknown task.
func IsRootTask(ctx context.Context, r replay.Reader, id string) (bool, error) {
	it := r.Stream(ctx, id, 0)
	defer it.Close()
	if !it.Next() {
		return false, it.Err()
	}
	if !IsRoot(it.Event()) {
		return false, ErrNotRoot
	}
	return true, nil
}

// RootTasks returns the ids of the root tasks of the source (IsRoot of
// their first event), in log order.
func RootTasks(ctx context.Context, src replay.Source) ([]string, error) {
	var ids []string
	it := src.Events(ctx, 1)
	defer it.Close()
	for it.Next() {
		if ev := it.Event(); IsRoot(ev) {
			ids = append(ids, ev.Stream)
		}
	}
	return ids, it.Err()
}

// Collect returns the spans of root task id's trace as its events up to
// sequence upTo (0: all) give them.
//
// A trace is sent at each of its root's endings (Ends), and a span once
// sent is never sent changed: backends keep one copy of identical spans
// only. So the spans are those of the mapping of the events up to the
// root's first ending, then the new spans (ids not seen yet) of the
// mapping up to each later ending (post-task reflection's model calls);
// what follows the last ending is left out. A task that has not ended yet
// is mapped as it is, its open spans included, or, with closedOnly, left
// out (a long task's finished spans, sent before it ends).
//
// A task that is not a root gives ErrNotRoot, an unknown one no spans.
func Collect(ctx context.Context, r replay.Reader, id string, upTo uint64, closedOnly bool, opt traces.Options) ([]traces.Span, error) {
	root, err := IsRootTask(ctx, r, id)
	if err != nil || !root {
		return nil, err
	}
	return CollectRoot(ctx, r, id, upTo, closedOnly, opt)
}

// CollectRoot is Collect for a task known to be a root (IsRoot of its
// first event).
func CollectRoot(ctx context.Context, r replay.Reader, id string, upTo uint64, closedOnly bool, opt traces.Options) ([]traces.Span, error) {
	evs, err := replay.TraceEvents(ctx, r, id)
	if err != nil {
		return nil, err
	}
	return CollectEvents(evs, id, upTo, closedOnly, opt), nil
}

// CollectEvents is CollectRoot over the events replay.TraceEvents gives
// for root task id (or the same events gathered otherwise, as the live
// export does while it follows the log). It may reorder evs.
func CollectEvents(evs []eventlog.Event, id string, upTo uint64, closedOnly bool, opt traces.Options) []traces.Span {
	return collectEvents(new(traces.Builder), false, evs, id, upTo, closedOnly, opt)
}

// CollectOwned is CollectEvents for events whose bodies are the caller's
// own copies, never changed while the spans are in use: the mapping
// decodes them without copying their strings (traces.BuildShared).
func CollectOwned(evs []eventlog.Event, id string, upTo uint64, closedOnly bool, opt traces.Options) []traces.Span {
	return collectEvents(new(traces.Builder), true, evs, id, upTo, closedOnly, opt)
}

// Batch holds the spans of several traces for one Export. It maps them
// with memory it keeps from one batch to the next (traces.Builder): the
// spans stay valid until Reset. A Batch is not safe for concurrent use;
// its zero value is ready.
type Batch struct {
	b     traces.Builder
	spans []traces.Span
}

// AddOwned adds the spans CollectOwned gives for the same arguments and
// returns how many.
func (x *Batch) AddOwned(evs []eventlog.Event, id string, upTo uint64, closedOnly bool, opt traces.Options) int {
	s := collectEvents(&x.b, true, evs, id, upTo, closedOnly, opt)
	x.spans = append(x.spans, s...)
	return len(s)
}

// Add adds spans mapped otherwise (Collect's).
func (x *Batch) Add(spans []traces.Span) { x.spans = append(x.spans, spans...) }

// Spans are the spans added since Reset, in order.
func (x *Batch) Spans() []traces.Span { return x.spans }

// Reset empties the batch and lets it reuse the memory of its spans,
// which must no longer be in use.
func (x *Batch) Reset() {
	clear(x.spans)
	x.spans = x.spans[:0]
	x.b.Reset()
}

// collectEvents is CollectEvents mapped with b (BuildShared if shared).
func collectEvents(b *traces.Builder, shared bool, evs []eventlog.Event, id string, upTo uint64, closedOnly bool, opt traces.Options) []traces.Span {
	build := (*traces.Builder).Build
	if shared {
		build = (*traces.Builder).BuildShared
	}
	var endsRoom [2]uint64
	ends := endsRoom[:0] // the sequences of the root's endings
	n := 0
	for _, ev := range evs {
		if upTo != 0 && ev.Seq > upTo {
			continue
		}
		evs[n] = ev
		if ev.Stream == id && Ends(ev) {
			ends = append(ends, ev.Seq)
		}
		n++
	}
	evs = evs[:n]
	if len(ends) == 0 {
		spans := build(b, evs, opt)
		if closedOnly {
			n := 0
			for _, s := range spans {
				if !s.Open {
					spans[n] = s
					n++
				}
			}
			spans = spans[:n]
		}
		return spans
	}
	slices.Sort(ends)
	if len(ends) == 1 && n > 0 && maxSeq(evs) <= ends[0] {
		// One ending and nothing after it (the live export's usual case):
		// one mapping of the events as they are.
		return build(b, evs, opt)
	}
	var spans []traces.Span
	seen := map[[8]byte]bool{}
	for _, e := range ends {
		// The events up to the ending, in TraceEvents' order.
		var upToEnd []eventlog.Event
		for _, ev := range evs {
			if ev.Seq <= e {
				upToEnd = append(upToEnd, ev)
			}
		}
		for _, s := range build(b, upToEnd, opt) {
			if !seen[s.SpanID] {
				seen[s.SpanID] = true
				spans = append(spans, s)
			}
		}
	}
	return spans
}

func maxSeq(evs []eventlog.Event) uint64 {
	var m uint64
	for _, ev := range evs {
		m = max(m, ev.Seq)
	}
	return m
}
