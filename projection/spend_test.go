package projection

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestSpendLedgerDispatchTasksWithoutKey: a broker task created without a
// concurrency key takes no entry in the ledger, and every figure reads as
// if it had one with an empty key: its model calls, a key it gets later
// (a recreated stream), the report.
func TestSpendLedgerDispatchTasksWithoutKey(t *testing.T) {
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	l := NewSpendLedger(nil)
	for i := range 1000 {
		l.Apply(&fsm.Event{Type: fsm.DispatchCreated, Time: at, Stream: fmt.Sprintf("d%d", i), Body: &fsm.DispatchCreatedBody{Title: "job"}})
	}
	if len(l.tasks) != 0 {
		t.Fatalf("%d entries for 1,000 broker tasks without a key, want 0", len(l.tasks))
	}
	l.Apply(&fsm.Event{Type: fsm.DispatchCreated, Time: at, Stream: "keyed", Body: &fsm.DispatchCreatedBody{ConcurrencyKey: "k"}})
	call := func(stream string) {
		l.Apply(&fsm.Event{Type: fsm.ModelCalled, Time: at, Stream: stream, Body: &fsm.ModelCalledBody{Model: "m", PromptTokens: 3, CompletionTokens: 4}})
	}
	call("d1")
	call("keyed")
	want := Spend{Calls: 1, PromptTokens: 3, CompletionTokens: 4, Tokens: 7}
	if got := l.Task("d1"); got != want {
		t.Errorf("d1 spent %+v, want %+v", got, want)
	}
	if got := l.Task("d2"); got != (Spend{}) {
		t.Errorf("d2 spent %+v, want nothing", got)
	}
	if got, got2 := l.KeyDay("", SpendDay(at)), l.KeyDay("k", SpendDay(at)); got != want || got2 != want {
		t.Errorf("key \"\" spent %+v and key k %+v, want %+v each", got, got2, want)
	}
	// A task with an entry keeps it and takes the key it is created with.
	l.Apply(&fsm.Event{Type: fsm.DispatchCreated, Time: at, Stream: "d1", Body: &fsm.DispatchCreatedBody{ConcurrencyKey: "k2"}})
	if ts := l.tasks["d1"]; ts == nil || ts.key != "k2" {
		t.Errorf("d1's entry %+v, want key k2", ts)
	}
	l.Apply(&fsm.Event{Type: fsm.DispatchCreated, Time: at, Stream: "keyed", Body: &fsm.DispatchCreatedBody{}})
	if ts := l.tasks["keyed"]; ts == nil || ts.key != "" {
		t.Errorf("keyed's entry %+v, want an empty key", ts)
	}
	rep := l.Report()
	if !reflect.DeepEqual(rep.Total, Spend{Calls: 2, PromptTokens: 6, CompletionTokens: 8, Tokens: 14}) {
		t.Errorf("total %+v", rep.Total)
	}
}

// TestSpendDayCache: the ledger's cached day name is SpendDay's for any
// time, in order or not, across day boundaries, in any zone and before
// 1970.
func TestSpendDayCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	zone := time.FixedZone("east", 5*3600+1800)
	var c spendDayCache
	base := time.Date(2026, 11, 27, 23, 59, 58, 0, time.UTC)
	for i := range 20000 {
		var at time.Time
		switch i % 4 {
		case 0: // around one midnight, a second apart
			at = base.Add(time.Duration(rng.IntN(5)-2) * time.Second)
		case 1:
			at = base.Add(time.Duration(rng.Int64N(int64(400*24*time.Hour))) - 200*24*time.Hour)
		case 2:
			at = time.Unix(rng.Int64N(4e9)-2e9, rng.Int64N(1e9)).In(zone)
		default:
			at = base.Add(time.Duration(rng.Int64N(int64(time.Second)))).In(zone)
		}
		if got, want := c.of(at), SpendDay(at); got != want {
			t.Fatalf("%v: cached day %s, want %s", at, got, want)
		}
	}
}

// TestSpendLedgerForgetRestore: a ledger that forgets tasks at random and
// restores a task's entry from its events before each of the task's
// events (when it holds none) gives the figures of one that forgets
// nothing: the totals, each task's spend (Refold for those it forgot),
// and Retain keeps exactly the entries asked for.
func TestSpendLedgerForgetRestore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	prices := Prices{"a": {Input: 1, Output: 3}, "b": {Input: 5, Output: 7}}
	ref, l := NewSpendLedger(prices), NewSpendLedger(prices)
	day := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	streams := map[string][]*fsm.Event{}
	for i := range 3000 {
		id := fmt.Sprint("t", rng.IntN(40))
		var ev *fsm.Event
		key := fmt.Sprint("k", rng.IntN(3))
		at := day.Add(time.Duration(i) * time.Minute)
		switch n := len(streams[id]); {
		case n == 0 && rng.IntN(3) == 0:
			ev = &fsm.Event{Type: fsm.DispatchCreated, Body: &fsm.DispatchCreatedBody{ConcurrencyKey: []string{"", key}[rng.IntN(2)]}}
		case n == 0:
			ev = &fsm.Event{Type: fsm.TaskCreated, Body: &fsm.TaskCreatedBody{ConcurrencyKey: key, Model: []string{"", "a", "b"}[rng.IntN(3)]}}
		case rng.IntN(5) == 0:
			ev = &fsm.Event{Type: fsm.MessageReceived, Body: &fsm.Input{Kind: fsm.MessageReceived, ConcurrencyKey: key}}
		default:
			ev = &fsm.Event{Type: fsm.ModelCalled, Body: &fsm.ModelCalledBody{Model: []string{"a", "b", "c"}[rng.IntN(3)],
				PromptTokens: rng.IntN(100), CompletionTokens: rng.IntN(50)}}
		}
		ev.Stream, ev.Time, ev.Seq = id, at, uint64(i+1)
		if rng.IntN(4) == 0 {
			l.Forget(fmt.Sprint("t", rng.IntN(40)))
		}
		if !l.Holds(id) {
			l.Restore(id, streams[id])
		}
		streams[id] = append(streams[id], ev)
		ref.Apply(ev)
		l.Apply(ev)
	}
	if got, want := l.Report(), ref.Report(); !reflect.DeepEqual(got, want) {
		t.Fatalf("the report is\n%+v\nwant\n%+v", got, want)
	}
	for id, evs := range streams {
		got := l.Task(id)
		if !l.Holds(id) {
			got = l.Refold(id, evs)
		}
		if want := ref.Task(id); got != want {
			t.Errorf("%s spent %+v, want %+v", id, got, want)
		}
	}
	kept := map[string]bool{"t1": true, "t2": true}
	held := map[string]bool{}
	for id := range streams {
		held[id] = l.Holds(id)
	}
	l.Retain(func(id string) bool { return kept[id] })
	for id := range streams {
		if want := held[id] && kept[id]; l.Holds(id) != want {
			t.Errorf("after Retain the ledger holds %s: %v, want %v", id, l.Holds(id), want)
		}
	}
	if got, want := l.Report(), ref.Report(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Retain changed the report")
	}
}
