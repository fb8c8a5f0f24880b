package replay

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// unfinished returns a history that leaves tasks reasoning, acting (one
// with a tool call started and no result) and suspended, as a crash would.
func unfinished(t *testing.T) []eventlog.Event {
	t.Helper()
	for seed := uint64(1); seed < 500; seed++ {
		evs := replaytest.Generate(seed, replaytest.Config{Tasks: 40, Concurrency: 10})
		v := foldMem(t, mustMem(t, evs))
		pending := false
		for _, tk := range v.InState(fsm.StateActing) {
			pending = pending || tk.Context.PendingCall != nil
		}
		if len(v.InState(fsm.StateReasoning)) > 0 && len(v.InState(fsm.StateActing)) > 0 &&
			len(v.InState(fsm.StateSuspended)) > 0 && pending {
			return evs
		}
	}
	t.Fatal("no seed gives reasoning, acting (with a pending tool call) and suspended tasks")
	return nil
}

func ids(ts []fsm.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	sort.Strings(out)
	return out
}

// TestRecovery: a log left with tasks reasoning, acting and suspended is
// recovered (from a checkpoint plus a tail) into exactly the states a
// fresh fold gives, and the in-flight tasks are returned to resume.
func TestRecovery(t *testing.T) {
	ctx := context.Background()
	evs := unfinished(t)
	fresh := foldMem(t, mustMem(t, evs))

	cut := len(evs) * 2 / 3
	l, fs := logWith(t, evs[:cut])
	if _, _, err := Open(ctx, l, &Options{CheckpointEvery: 7}); err != nil {
		t.Fatal(err)
	}
	if err := replaytest.AppendAll(ctx, l, evs[cut:], 0); err != nil {
		t.Fatal(err)
	}
	l.Close() // the daemon died: the tail was never folded
	l = openLog(t, fs, "db", false)
	defer l.Close()
	v, rec, err := Open(ctx, l, &Options{CheckpointEvery: 7})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Rebuilt || rec.Checkpoint != uint64(cut) || rec.Head != uint64(len(evs)) || rec.Folded != len(evs)-cut {
		t.Fatalf("recovery: %+v", rec)
	}
	wantInFlight := ids(fresh.InState(fsm.StateReasoning, fsm.StateActing))
	if got := ids(rec.InFlight); strings.Join(got, ",") != strings.Join(wantInFlight, ",") {
		t.Fatalf("in flight %v, want %v", got, wantInFlight)
	}
	if got, want := ids(rec.Suspended), ids(fresh.InState(fsm.StateSuspended)); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("suspended %v, want %v", got, want)
	}
	for i := 1; i < len(rec.InFlight); i++ {
		a, b := rec.InFlight[i-1], rec.InFlight[i]
		if a.Priority > b.Priority || (a.Priority == b.Priority && a.ID > b.ID) {
			t.Fatalf("in-flight tasks not ordered by priority then age: %s before %s", a.ID, b.ID)
		}
	}
	for _, tk := range append(rec.InFlight, rec.Suspended...) {
		want, _ := fresh.Task(tk.ID)
		a, _ := fsm.EncodeTask(tk)
		b, _ := fsm.EncodeTask(want)
		if !bytes.Equal(a, b) {
			t.Fatalf("task %s recovered differently from a fresh fold", tk.ID)
		}
	}
	sameState(t, "recovered", dump(t, fresh), dump(t, v))
	// The agent finds the idempotency key of an interrupted tool call.
	found := false
	for _, tk := range rec.InFlight {
		if pc := tk.Context.PendingCall; pc != nil {
			found = pc.IdempotencyKey != ""
			p, err := v.Progress(tk.ID)
			if err != nil || p.AwaitingTool == nil || p.AwaitingTool.IdempotencyKey != pc.IdempotencyKey {
				t.Fatalf("progress of %s does not show the awaited tool: %+v %v", tk.ID, p.AwaitingTool, err)
			}
		}
	}
	if !found {
		t.Fatal("no recovered task carries its pending tool call")
	}
}

// TestTasksQuery: filters and cursor paging over tasks in memory and
// tasks evicted to the persisted read model give the same answers as a
// plain in-memory fold, in both directions of both orders (task id, queue);
// the in-memory fold's queue order is projection.QueueCompare's.
func TestTasksQuery(t *testing.T) {
	ctx := context.Background()
	evs := replaytest.Generate(11, replaytest.Config{Tasks: 120, Concurrency: 15})
	mem := foldMem(t, mustMem(t, evs))
	l, _ := logWith(t, evs)
	defer l.Close()
	pv, _, err := Open(ctx, l, &Options{CheckpointEvery: 13})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pv.set.Tasks().ListAll()); n >= 120 {
		t.Fatalf("%d tasks in memory: terminal tasks were not evicted", n)
	}
	// A stale queue index entry (as a priority changed by TASK_CREATED
	// leaves behind) is not listed.
	var stale projection.Summary
	for _, tk := range mem.set.Tasks().ListAll() {
		if !pv.set.Tasks().Has(tk.ID) {
			stale = projection.Summarize(&tk) // a task read from the store
			break
		}
	}
	stale.Priority += 5
	if err := l.WriteAux(ctx, func(b *eventlog.AuxBatch) error {
		b.Set(append([]byte(prefQueue), stale.QueueKey()...), nil)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	two := 2
	filters := []projection.Filter{
		{},
		{States: []fsm.State{fsm.StateCompleted}},
		{States: []fsm.State{fsm.StateReasoning, fsm.StateActing, fsm.StateSuspended}}, // from memory only
		{States: []fsm.State{fsm.StateFailed, fsm.StateSuspended}, Types: []string{"explore"}},
		{Sources: []string{"cli", "cron"}, MinPriority: &two},
		{CreatedFrom: evs[len(evs)/4].Time, CreatedTo: evs[len(evs)/2].Time},
	}
	for fi, f := range filters {
		for _, o := range []listOrder{{}, {desc: true}, {queue: true}, {queue: true, desc: true}} {
			desc := o.desc
			var want []string
			all, err := mem.Tasks(ctx, Query{Filter: f, Limit: MaxLimit, Desc: desc, Queue: o.queue})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.IsSortedFunc(all.Tasks, func(a, b projection.Summary) int {
				if o.queue {
					if desc {
						return projection.QueueCompare(&b, &a)
					}
					return projection.QueueCompare(&a, &b)
				}
				if desc {
					return strings.Compare(b.ID, a.ID)
				}
				return strings.Compare(a.ID, b.ID)
			}) {
				t.Fatalf("filter %d order %+v: the in-memory list is not in order", fi, o)
			}
			for _, s := range all.Tasks {
				want = append(want, s.ID+"/"+string(s.State))
				if !f.Match(&s) {
					t.Fatalf("filter %d returned a task that does not match", fi)
				}
			}
			for _, paged := range []struct {
				v     *View
				limit int
			}{{pv, 1}, {pv, 7}, {pv, 50}, {mem, 7}} {
				limit := paged.limit
				var got []string
				q := Query{Filter: f, Limit: limit, Desc: desc, Queue: o.queue}
				for pages := 0; ; pages++ {
					page, err := paged.v.Tasks(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					if len(page.Tasks) > limit {
						t.Fatalf("page of %d > limit %d", len(page.Tasks), limit)
					}
					for _, s := range page.Tasks {
						got = append(got, s.ID+"/"+string(s.State))
					}
					if page.Next == "" {
						break
					}
					q.Cursor = page.Next
				}
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Fatalf("filter %d order %+v limit %d:\n got %v\nwant %v", fi, o, limit, got, want)
				}
			}
			if len(want) == 0 && fi == 0 {
				t.Fatal("no tasks at all")
			}
		}
	}
	next := mustPage(t, pv, Query{Limit: 3, Queue: true}).Next
	for _, q := range []Query{{Cursor: "d.bogus"}, {Cursor: next}, {Cursor: next, Queue: true, Desc: true},
		{Cursor: strings.Replace(next, "qa.", "a.", 1)}, {Cursor: next[:len(next)-1], Queue: true}, {Cursor: "qa.zz" + next[5:], Queue: true}} {
		if _, err := pv.Tasks(ctx, q); !errors.Is(err, ErrBadCursor) {
			t.Fatalf("bad cursor %q (queue %v desc %v): %v", q.Cursor, q.Queue, q.Desc, err)
		}
	}
	// Terminal tasks that left memory are still served, task and progress.
	for _, s := range mustPage(t, pv, Query{Filter: projection.Filter{States: []fsm.State{fsm.StateCompleted}}, Limit: 5}).Tasks {
		if pv.set.Tasks().Has(s.ID) {
			continue
		}
		task, err := pv.Task(s.ID)
		if err != nil || task.State != fsm.StateCompleted {
			t.Fatalf("evicted task %s: %v %s", s.ID, err, task.State)
		}
		if p, err := pv.Progress(s.ID); err != nil || !p.Complete || p.StepCount == 0 {
			t.Fatalf("evicted progress %s: %+v %v", s.ID, p, err)
		}
	}
	if _, err := pv.Task("01JGFJK2VQYGNJMS3GSRM9FV21"); !errors.Is(err, projection.ErrTaskNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
}

func mustPage(t *testing.T, v *View, q Query) Page {
	t.Helper()
	p, err := v.Tasks(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
