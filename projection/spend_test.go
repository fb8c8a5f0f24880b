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
