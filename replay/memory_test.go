package replay

import (
	"context"
	"flag"
	"reflect"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

var (
	memoryTasks  = flag.Int("memory.tasks", 0, "tasks folded by TestMemoryBoundedByBudget (0: a short run of 120)")
	memoryBudget = flag.Int64("memory.budget", 4<<20, "MemoryBudget of TestMemoryBoundedByBudget (a huge one shows the count bound alone: the test then fails)")
)

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// TestMemoryBoundedByBudget folds tasks with 128 KiB inputs (each holds
// about 260 KiB folded: the input, its progress, the rest) into a View
// with a 4 MiB budget and the default CheckpointEvery, which alone would
// keep every task of the run in memory. The View's own accounting must
// stay within the budget after every fold, and the live heap must stay
// flat after warm-up, while the tasks folded add up to several times the
// budget. Run longer with -memory.tasks 2000.
func TestMemoryBoundedByBudget(t *testing.T) {
	seed := testSeed(t)
	ctx := context.Background()
	tasks := *memoryTasks
	if tasks == 0 {
		tasks = 120
	}
	l, err := eventlog.Open(t.TempDir(), &eventlog.Options{CacheSize: 1 << 20, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	budget := *memoryBudget
	v, _, err := Open(ctx, l, &Options{MemoryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	g := replaytest.New(seed, replaytest.Config{Tasks: tasks, Concurrency: 4, Finish: true, InputSize: 128 << 10})
	var heap []int64 // heap in use, sampled every other round
	var heldPeak int64
	rounds := 0
	for evs := g.Next(50); evs != nil; evs = g.Next(50) {
		if err := replaytest.AppendAll(ctx, l, evs, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := Fold(ctx, v, FromLog(l), FoldOptions{}); err != nil {
			t.Fatal(err)
		}
		use := v.MemoryUse()
		if use.Total() > budget {
			t.Fatalf("after seq %d the view holds %d bytes, over its budget of %d (%+v)", v.Seq(), use.Total(), budget, use)
		}
		heldPeak = max(heldPeak, use.Total())
		rounds++
		if rounds%2 != 0 {
			continue
		}
		h := heapInUse()
		heap = append(heap, h)
		t.Logf("seq %6d: heap in use %5.1f MiB, view holds %4.1f MiB", v.Seq(), mib(h), mib(use.Total()))
	}
	if err := v.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	st := v.Stats()
	if st.Tasks != int64(tasks) || st.Completed+st.Failed != int64(tasks) {
		t.Fatalf("folded %d tasks, %d finished; want %d", st.Tasks, st.Completed+st.Failed, tasks)
	}
	inputs := int64(tasks) << 17 // 128 KiB each, on average
	// Flat: after warm-up (the first sample), the median heap of the last
	// third of the run is the median of the first third, give or take what
	// the budget lets the view hold and Pebble's buffers. Medians, because
	// Pebble's flushes and compactions come and go.
	third := (len(heap) - 1) / 3
	if third < 2 {
		t.Fatalf("%d heap samples: run more tasks", len(heap))
	}
	early, late := median(heap[1:1+third]), median(heap[len(heap)-third:])
	t.Logf("%d tasks, %.0f MiB of inputs; the view held at most %.1f MiB; median heap in use %.1f MiB early, %.1f MiB late",
		tasks, mib(inputs), mib(heldPeak), mib(early), mib(late))
	if grow := late - early; grow > 16<<20 {
		t.Fatalf("heap grew by %.1f MiB from the first third of the run to the last: memory is not bounded by the budget", mib(grow))
	}
	if inputs < 2*budget {
		t.Fatalf("the run folds %d bytes of inputs: too little to test a budget of %d", inputs, budget)
	}
	// A finished task left memory and is still served from the store.
	page, err := v.Tasks(ctx, Query{Limit: 1})
	if err != nil || len(page.Tasks) != 1 {
		t.Fatalf("tasks: %v %v", page, err)
	}
	if _, err := v.Task(page.Tasks[0].ID); err != nil {
		t.Fatalf("evicted task: %v", err)
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func median(xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// sameEach checks that View.EachInState, which hands out the stubs of the
// tasks that left memory, gives what a count by state and machine and the
// age of the oldest need exactly as InState, which reads them back, does.
func sameEach(t *testing.T, what string, v *View) {
	t.Helper()
	type fields struct {
		state    fsm.State
		priority int
		version  uint64
		machine  fsm.MachineRef
		created  time.Time
	}
	of := func(tk *fsm.Task) fields {
		return fields{tk.State, tk.Priority, tk.Version, tk.Machine, tk.CreatedAt}
	}
	want := map[string]fields{}
	for _, tk := range v.InState(unfinishedStates...) {
		if tk.Machine == (fsm.MachineRef{}) || tk.CreatedAt.IsZero() {
			t.Fatalf("%s: task %s read back without its machine or creation time", what, tk.ID)
		}
		want[tk.ID] = of(&tk)
	}
	got := map[string]fields{}
	v.EachInState(func(tk *fsm.Task) { got[tk.ID] = of(tk) }, unfinishedStates...)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: EachInState gives\n%+v\nInState\n%+v", what, got, want)
	}
}

// TestMemoryBudgetUnfinishedTasks submits tasks with 128 KiB inputs that
// wait in idle (an admission queue longer than the budget), then admits
// them. Tasks that are not finished must leave memory too once persisted,
// be listed and read back whole (InState, Task, Progress, a restart's
// Recovery.Idle), and fold on when their events come, equal to a fold from
// zero.
func TestMemoryBudgetUnfinishedTasks(t *testing.T) {
	ctx := context.Background()
	l, fs := logWith(t, nil)
	const budget, tasks = 2 << 20, 24 // 24 x ~260 KiB: three times the budget
	opts := &Options{MemoryBudget: budget}
	v, _, err := Open(ctx, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	input := strings.Repeat("a long input ", (128<<10)/13)
	var ids []string
	for i := range tasks {
		id := l.NewID()
		body, err := fsm.Encode(&fsm.Input{Kind: fsm.MessageReceived, Text: input, Source: "api", TaskType: "general", Priority: i % 3})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, id.String(), eventlog.NoStream, eventlog.Event{ID: id, Type: string(fsm.MessageReceived),
			Correlation: id, Schema: fsm.SchemaVersion, Body: body}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id.String())
		if _, err := Fold(ctx, v, FromLog(l), FoldOptions{}); err != nil {
			t.Fatal(err)
		}
		if use := v.MemoryUse(); use.Total() > budget {
			t.Fatalf("after %d idle tasks the view holds %d bytes, over its budget of %d", i+1, use.Total(), budget)
		}
	}
	if err := v.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	checkIdle := func(what string, got []fsm.Task) {
		t.Helper()
		if len(got) != tasks {
			t.Fatalf("%s: %d idle tasks, want %d", what, len(got), tasks)
		}
		for i, tk := range got {
			if tk.Context.InputText != input || tk.Version != 1 {
				t.Fatalf("%s: task %s read back without its input (%d bytes, version %d)", what, tk.ID, len(tk.Context.InputText), tk.Version)
			}
			if i > 0 && got[i-1].Priority > tk.Priority {
				t.Fatalf("%s: not in priority order", what)
			}
		}
	}
	checkIdle("InState", v.InState(fsm.StateIdle))
	sameEach(t, "with tasks that left memory", v)
	if v.ActiveCount() != tasks || len(v.Active()) != tasks || v.Count(fsm.StateIdle) != tasks {
		t.Fatalf("counts: active %d, Active %d, idle %d", v.ActiveCount(), len(v.Active()), v.Count(fsm.StateIdle))
	}
	if p, err := v.Progress(ids[0]); err != nil || p.Description != input {
		t.Fatalf("progress of a task that left memory: %v", err)
	}
	if page, err := v.Tasks(ctx, Query{Limit: MaxLimit}); err != nil || len(page.Tasks) != tasks {
		t.Fatalf("task list: %d, %v", len(page.Tasks), err)
	}
	// Listed by an unfinished state, in queue order, from memory and the
	// stubs of those that left it.
	if len(v.set.Tasks().Cold(fsm.StateIdle)) == 0 {
		t.Fatal("no idle task left memory")
	}
	q, listed := Query{Filter: projection.Filter{States: []fsm.State{fsm.StateIdle}}, Queue: true, Limit: 5}, 0
	for prev := (projection.Summary{}); ; {
		page, err := v.Tasks(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Tasks {
			if listed++; listed > 1 && projection.QueueCompare(&prev, &s) >= 0 {
				t.Fatalf("idle tasks in queue order: %s (priority %d) after %s (priority %d)", s.ID, s.Priority, prev.ID, prev.Priority)
			}
			prev = s
		}
		if q.Cursor = page.Next; q.Cursor == "" {
			break
		}
	}
	if listed != tasks {
		t.Fatalf("%d idle tasks listed in queue order, want %d", listed, tasks)
	}

	// A restart loads what fits and reads the rest when needed.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, "db", false)
	defer l.Close()
	v, rec, err := Open(ctx, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	checkIdle("Recovery.Idle", rec.Idle)
	if len(v.set.Tasks().Cold(fsm.StateIdle)) == 0 {
		t.Fatal("after the restart no idle task is out of memory")
	}
	sameEach(t, "after a restart", v)
	if use := v.MemoryUse(); use.Total() > budget {
		t.Fatalf("after the restart the view holds %d bytes, over its budget of %d", use.Total(), budget)
	}
	// Admit them all: each is read back, folded, and leaves again.
	for _, id := range ids {
		tk, err := v.Task(id)
		if err != nil {
			t.Fatal(err)
		}
		c := &tk.Context
		body, err := fsm.Encode(&fsm.TaskCreatedBody{Machine: fsm.CurrentMachine, TaskType: tk.Type, InputText: c.InputText,
			InputMetadata: c.InputMetadata, Source: c.Source, Priority: tk.Priority})
		if err != nil {
			t.Fatal(err)
		}
		ev := eventlog.Event{ID: l.NewID(), Type: string(fsm.TaskCreated), Schema: fsm.SchemaVersion, Body: body}
		if _, err := l.Append(ctx, id, eventlog.Exactly(1), ev); err != nil {
			t.Fatal(err)
		}
		if _, err := Fold(ctx, v, FromLog(l), FoldOptions{}); err != nil {
			t.Fatal(err)
		}
		if use := v.MemoryUse(); use.Total() > budget {
			t.Fatalf("the view holds %d bytes, over its budget of %d", use.Total(), budget)
		}
	}
	if n, _ := v.Issues(); len(n) != 0 {
		t.Fatalf("refused events: %+v", n)
	}
	if got := len(v.InState(fsm.StateReasoning)); got != tasks {
		t.Fatalf("%d tasks reasoning, want %d", got, tasks)
	}
	sameState(t, "with tasks that left memory", dump(t, foldMem(t, FromLog(l))), dump(t, v))
}
