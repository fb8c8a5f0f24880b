package replay

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"

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
// task gives no events and no error. TraceGatherer applies the same rule
// to the log as it is read.
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
				if startsTask(c) && !seen[c.Stream] {
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

// startsTask reports whether ev is the first event of a task's stream (not
// of a "$" stream): the event by whose causation TraceEvents and
// TraceGatherer join the stream to a trace.
func startsTask(ev eventlog.Event) bool {
	return ev.Version == 1 && !strings.HasPrefix(ev.Stream, "$")
}

// TraceGatherer gathers, from events added in log order, the events that
// TraceEvents would read for each root task whose first event it was
// given: the root's stream, and the streams whose first event one of the
// tree's events caused, recursively. The live trace export uses it to map
// a root's trace at its ending without reading the log.
//
// It holds at most maxTree bytes of event bodies per tree and maxAll in
// all: a tree that grows beyond maxTree is let go, and a root that starts
// while maxAll is held is not gathered (Take gives nil: the caller reads
// the log).
//
// Add and Take are called from one goroutine; Recycle from any.
type TraceGatherer struct {
	maxTree, maxAll int
	byStream        map[string]*traceTree
	// byEvent finds the tree of an event by its id, for the streams whose
	// first event it caused. It is filled lazily: only a stream's first
	// event with a causation looks an id up (none of a workload without
	// child tasks), so the events are indexed then, those added since the
	// last lookup at once (the trees in dirty), rather than each as it is
	// added. The log's event ids are unique.
	byEvent map[ulid.ULID]*traceTree
	dirty   []*traceTree // trees whose latest events are not in byEvent yet
	clean   int          // len(dirty) after its last compaction
	bytes   int
	free    []*traceTree // trees Take let go, for the next roots

	mu    sync.Mutex
	spare [][]eventlog.Event // arrays of events given back (Recycle)
}

type traceTree struct {
	root    string
	streams []string
	events  []eventlog.Event
	indexed int  // events[:indexed] are in byEvent
	inDirty bool // the tree is in the gatherer's dirty list
	bytes   int
	dropped bool
	// The usual tree's one task, in the same allocation.
	firstStream [1]string
}

// Bounds of what a TraceGatherer keeps for reuse: trees, arrays of
// events, and the events an array may hold (a larger one is let go).
const (
	keptTrees  = 256
	keptArrays = 1024
	keptEvents = 64
)

// newTree is an empty tree for root, one Take let go if there is one,
// its events in an array Recycle gave back if there is one (room for a
// task's usual events otherwise).
func (g *TraceGatherer) newTree(root string) *traceTree {
	var t *traceTree
	if n := len(g.free); n > 0 {
		t, g.free = g.free[n-1], g.free[:n-1]
	} else {
		t = new(traceTree)
	}
	t.root, t.streams = root, t.firstStream[:0]
	g.mu.Lock()
	if n := len(g.spare); n > 0 {
		t.events, g.spare[n-1], g.spare = g.spare[n-1], nil, g.spare[:n-1]
	}
	g.mu.Unlock()
	if t.events == nil {
		t.events = make([]eventlog.Event, 0, 8)
	}
	return t
}

// Recycle gives back the events Take returned once the caller no longer
// uses them (nor the slice): the next trees gather into their array. The
// events' bodies are not reused (what was mapped from them stays valid).
func (g *TraceGatherer) Recycle(evs []eventlog.Event) {
	if cap(evs) == 0 || cap(evs) > keptEvents {
		return
	}
	clear(evs[:cap(evs)])
	g.mu.Lock()
	if len(g.spare) < keptArrays {
		g.spare = append(g.spare, evs[:0])
	}
	g.mu.Unlock()
}

// NewTraceGatherer returns an empty TraceGatherer with those bounds.
func NewTraceGatherer(maxTree, maxAll int) *TraceGatherer {
	return &TraceGatherer{maxTree: maxTree, maxAll: maxAll,
		byStream: map[string]*traceTree{}, byEvent: map[ulid.ULID]*traceTree{}}
}

// Add adds the log's next event; isRoot tells that ev is the first event
// of a root task (the caller's rule: TraceEvents takes the root as given).
func (g *TraceGatherer) Add(ev eventlog.Event, isRoot bool) {
	t := g.byStream[ev.Stream]
	if t == nil && startsTask(ev) {
		if !ev.Causation.IsZero() { // the log gives no event a zero id
			t = g.treeOf(ev.Causation)
		}
		if t == nil && g.bytes < g.maxAll && isRoot {
			t = g.newTree(ev.Stream)
		}
		if t != nil {
			g.byStream[ev.Stream] = t
			t.streams = append(t.streams, ev.Stream)
		}
	}
	if t == nil || t.dropped {
		return
	}
	t.events = append(t.events, ev)
	if !t.inDirty {
		t.inDirty = true
		g.dirty = append(g.dirty, t)
		if len(g.dirty) >= 2*g.clean+64 {
			g.compactDirty()
		}
	}
	t.bytes += len(ev.Body)
	g.bytes += len(ev.Body)
	if t.bytes > g.maxTree {
		t.dropped = true
		g.bytes -= t.bytes
		g.unindex(t)
		t.events = nil
	}
}

// treeOf is the tree holding the event of that id, if one does: the
// events added since the last lookup are indexed first.
func (g *TraceGatherer) treeOf(id ulid.ULID) *traceTree {
	if t := g.byEvent[id]; t != nil {
		return t
	}
	if len(g.dirty) == 0 {
		return nil
	}
	for i, t := range g.dirty {
		for _, ev := range t.events[t.indexed:] {
			g.byEvent[ev.ID] = t
		}
		t.indexed = len(t.events)
		t.inDirty = false
		g.dirty[i] = nil
	}
	g.dirty, g.clean = g.dirty[:0], 0
	return g.byEvent[id]
}

// compactDirty drops from the dirty list the trees with nothing left to
// index (taken or let go since they were listed): without lookups, the
// list holds about the trees being gathered, not every tree since the
// last lookup.
func (g *TraceGatherer) compactDirty() {
	n := 0
	for _, t := range g.dirty {
		if t.indexed < len(t.events) {
			g.dirty[n] = t
			n++
		} else {
			t.inDirty = false
		}
	}
	clear(g.dirty[n:])
	g.dirty, g.clean = g.dirty[:n], n
}

// unindex takes t's indexed events out of byEvent.
func (g *TraceGatherer) unindex(t *traceTree) {
	for _, ev := range t.events[:t.indexed] {
		delete(g.byEvent, ev.ID)
	}
	t.indexed = 0
}

// Take returns the events of root task id's tree, as TraceEvents gives
// them, and lets the tree go (a later ending reads the log), or nil when
// the gatherer does not hold them.
func (g *TraceGatherer) Take(id string) []eventlog.Event {
	t := g.byStream[id]
	if t == nil || t.root != id {
		return nil
	}
	for _, s := range t.streams {
		delete(g.byStream, s)
	}
	g.unindex(t)
	evs := t.events
	if !t.dropped {
		g.bytes -= t.bytes
	}
	dropped := t.dropped
	clear(t.streams)
	t.root, t.streams, t.events, t.bytes, t.dropped = "", nil, nil, 0, false
	if len(g.free) < keptTrees {
		g.free = append(g.free, t)
	}
	if dropped {
		return nil
	}
	return evs
}
