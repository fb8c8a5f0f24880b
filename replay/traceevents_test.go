package replay

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestTraceEvents: a task's events and those of the tasks it caused,
// recursively (a broker task caused by its tool call, the task the
// built-in agent runs for that broker task), in log order, without
// another task's events, a later event another stream causes, or memory
// writes; the same from a Pebble log as from memory, and from a
// TraceGatherer given the log in order.
func TestTraceEvents(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var n uint64
	var evs []eventlog.Event
	vers := map[string]uint64{}
	add := func(stream string, typ string, cause ulid.ULID) eventlog.Event {
		n++
		id := ulid.MustNew(ulid.Timestamp(t0)+n, nil)
		if stream == "" {
			stream = id.String()
		}
		vers[stream]++
		ev := eventlog.Event{ID: id, Seq: n, Stream: stream, Version: vers[stream], Type: typ, Time: t0, Causation: cause, Schema: 1}
		evs = append(evs, ev)
		return ev
	}
	in := add("", "MESSAGE_RECEIVED", ulid.ULID{})
	task := in.Stream
	other := add("", "MESSAGE_RECEIVED", ulid.ULID{})
	created := add(task, "TASK_CREATED", in.ID)
	add(other.Stream, "TASK_CREATED", other.ID)
	started := add(task, "TOOL_CALL_STARTED", created.ID)
	add("$memory", "MEMORY_WRITTEN", started.ID)
	bt := add("", "DISPATCH_CREATED", started.ID)
	st := add(bt.Stream, "DISPATCH_STARTED", bt.ID)
	child := add("", "MESSAGE_RECEIVED", st.ID)
	add(other.Stream, "TASK_FAILED", child.ID) // caused by the tree, but not a task it created
	cdone := add(child.Stream, "TASK_COMPLETED", child.ID)
	add(bt.Stream, "DISPATCH_COMPLETED", cdone.ID)
	add(task, "TOOL_CALL_COMPLETED", started.ID)

	want := []string{task, task, task, bt.Stream, bt.Stream, child.Stream, child.Stream, bt.Stream, task}
	checkEvents := func(name string, got []eventlog.Event) {
		t.Helper()
		var streams []string
		for i, ev := range got {
			streams = append(streams, ev.Stream)
			if i > 0 && got[i-1].Seq >= ev.Seq {
				t.Errorf("%s: not in log order at %d", name, i)
			}
		}
		if len(streams) != len(want) {
			t.Fatalf("%s: got streams %v, want %v", name, streams, want)
		}
		for i := range want {
			if streams[i] != want[i] {
				t.Fatalf("%s: got streams %v, want %v", name, streams, want)
			}
		}
	}
	check := func(name string, r Reader) {
		got, err := TraceEvents(context.Background(), r, task)
		if err != nil {
			t.Fatal(err)
		}
		checkEvents(name, got)
		none, err := TraceEvents(context.Background(), r, ulid.Make().String())
		if err != nil || len(none) != 0 {
			t.Errorf("%s: an unknown task: %d events, %v", name, len(none), err)
		}
	}
	check("memory", mustMem(t, evs))
	l, _ := logWith(t, evs)
	check("log", FromLog(l))

	g := NewTraceGatherer(1<<20, 1<<20)
	for _, ev := range evs {
		g.Add(ev, ev.Version == 1 && ev.Causation.IsZero())
	}
	checkEvents("gatherer", g.Take(task))
	if again := g.Take(task); again != nil {
		t.Errorf("gatherer: a second Take gave %d events", len(again))
	}

	// Trees and arrays of events given back are reused: the same log
	// added again (the same ids: a gatherer of its own) gives the same
	// trees, while the events of a tree taken before and not given back
	// stay as they were.
	for round := range 3 {
		g := NewTraceGatherer(1<<20, 1<<20)
		var kept [][]eventlog.Event
		for i := range 4 {
			for _, ev := range evs {
				g.Add(ev, ev.Version == 1 && ev.Causation.IsZero())
			}
			got := g.Take(task)
			checkEvents("gatherer reused", got)
			if other := g.Take(other.Stream); len(other) != 3 {
				t.Fatalf("round %d: the other task: %d events", round, len(other))
			} else if (i+round)%2 == 0 {
				g.Recycle(other)
			}
			if i%2 == 0 {
				kept = append(kept, got)
			} else {
				g.Recycle(got)
			}
			g.Take(child.Stream) // not a root: nothing
			for _, k := range kept {
				checkEvents("a tree not given back", k)
			}
		}
	}
}

// TestTraceGathererBounds: a tree beyond its bound is let go (Take gives
// nil) and the gatherer keeps nothing of it once its root is taken; a
// root that starts while the gatherer holds its bound in all is not
// gathered.
func TestTraceGathererBounds(t *testing.T) {
	var n uint64
	vers := map[string]uint64{}
	ev := func(stream string, cause ulid.ULID, body int) eventlog.Event {
		n++
		id := ulid.MustNew(n, nil)
		if stream == "" {
			stream = id.String()
		}
		vers[stream]++
		return eventlog.Event{ID: id, Seq: n, Stream: stream, Version: vers[stream], Causation: cause, Body: make([]byte, body)}
	}
	g := NewTraceGatherer(100, 150)
	big := ev("", ulid.ULID{}, 10)
	g.Add(big, true)
	for range 5 {
		g.Add(ev(big.Stream, big.ID, 20), false) // the tree passes 100 bytes
	}
	small := ev("", ulid.ULID{}, 60)
	g.Add(small, true)
	late := ev("", ulid.ULID{}, 10) // 60 bytes held: below 150, gathered
	g.Add(late, true)
	if got := g.Take(big.Stream); got != nil {
		t.Errorf("the tree beyond its bound: Take gave %d events", len(got))
	}
	if got := g.Take(small.Stream); len(got) != 1 {
		t.Errorf("small: Take gave %d events, want 1", len(got))
	}
	if got := g.Take(late.Stream); len(got) != 1 {
		t.Errorf("late: Take gave %d events, want 1", len(got))
	}
	if len(g.byStream) != 0 || len(g.byEvent) != 0 || g.bytes != 0 {
		t.Errorf("after every Take: %d streams, %d events, %d bytes held", len(g.byStream), len(g.byEvent), g.bytes)
	}

	full := NewTraceGatherer(100, 50)
	first := ev("", ulid.ULID{}, 60)
	full.Add(first, true)
	second := ev("", ulid.ULID{}, 1)
	full.Add(second, true)
	if got := full.Take(second.Stream); got != nil {
		t.Errorf("a root started beyond the bound in all: Take gave %d events", len(got))
	}
	if got := full.Take(first.Stream); len(got) != 1 {
		t.Errorf("first: Take gave %d events, want 1", len(got))
	}
}

// TestTraceGathererGenerated: over generated logs (roots started and
// ended interleaved, child tasks caused by events of live trees, of taken
// ones and of streams in no tree), each Take at a root's ending gives what
// TraceEvents reads from the log up to there; the ids the gatherer indexes
// and the trees it lists for indexing stay bounded by what it holds.
func TestTraceGathererGenerated(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var evs []eventlog.Event
		vers := map[string]uint64{}
		add := func(stream, typ string, cause ulid.ULID) eventlog.Event {
			n := uint64(len(evs) + 1)
			id := ulid.MustNew(ulid.Timestamp(t0)+n, nil)
			if stream == "" {
				stream = id.String()
			}
			vers[stream]++
			ev := eventlog.Event{ID: id, Seq: n, Stream: stream, Version: vers[stream], Type: typ, Time: t0, Causation: cause, Schema: 1, Body: make([]byte, rng.IntN(40))}
			evs = append(evs, ev)
			return ev
		}
		g := NewTraceGatherer(1<<20, 1<<20)
		var live []string // root streams started, not taken
		var streams []string
		maxDirty := 0
		for range 600 {
			var ev eventlog.Event
			switch r := rng.IntN(10); {
			case r < 2 || len(streams) == 0:
				ev = add("", "MESSAGE_RECEIVED", ulid.ULID{})
				live = append(live, ev.Stream)
			case r < 4: // a child task caused by any event so far
				ev = add("", "DISPATCH_CREATED", evs[rng.IntN(len(evs))].ID)
			case r < 5:
				ev = add("$memory", "MEMORY_WRITTEN", evs[rng.IntN(len(evs))].ID)
			default:
				s := streams[rng.IntN(len(streams))]
				ev = add(s, "TOOL_CALL_STARTED", evs[rng.IntN(len(evs))].ID)
			}
			if ev.Version == 1 && !strings.HasPrefix(ev.Stream, "$") {
				streams = append(streams, ev.Stream)
			}
			g.Add(ev, ev.Version == 1 && ev.Causation.IsZero())
			maxDirty = max(maxDirty, len(g.dirty))
			if len(live) > 0 && rng.IntN(4) == 0 { // a root ends
				i := rng.IntN(len(live))
				root := live[i]
				live = append(live[:i], live[i+1:]...)
				want, err := TraceEvents(context.Background(), mustMem(t, evs), root)
				if err != nil {
					t.Fatal(err)
				}
				got := g.Take(root)
				if len(got) != len(want) {
					t.Fatalf("seed %d, root %s: gathered %d events, the log gives %d", seed, root, len(got), len(want))
				}
				for j := range want {
					if got[j].ID != want[j].ID {
						t.Fatalf("seed %d, root %s: event %d is %s, the log gives %s", seed, root, j, got[j].ID, want[j].ID)
					}
				}
				g.Recycle(got)
			}
		}
		for _, root := range live {
			g.Take(root)
		}
		if len(g.byEvent) != 0 || len(g.byStream) != 0 || g.bytes != 0 {
			t.Errorf("seed %d: after every Take: %d ids, %d streams, %d bytes held", seed, len(g.byEvent), len(g.byStream), g.bytes)
		}
		if maxDirty > 2*len(evs)/3+64 {
			t.Errorf("seed %d: %d trees listed for indexing", seed, maxDirty)
		}
	}

	// Without child tasks nothing is indexed, and the list of trees to
	// index holds about the trees being gathered.
	g := NewTraceGatherer(1<<20, 1<<20)
	var n uint64
	for i := range 10000 {
		n++
		id := ulid.MustNew(n, nil)
		g.Add(eventlog.Event{ID: id, Seq: n, Stream: id.String(), Version: 1}, true)
		if i%3 == 0 {
			n++
			g.Add(eventlog.Event{ID: ulid.MustNew(n, nil), Seq: n, Stream: id.String(), Version: 2}, false)
		}
		if got := g.Take(id.String()); len(got) == 0 {
			t.Fatalf("root %d: nothing gathered", i)
		}
		if len(g.byEvent) != 0 || len(g.dirty) > 130 {
			t.Fatalf("root %d: %d ids indexed, %d trees listed", i, len(g.byEvent), len(g.dirty))
		}
	}
}
