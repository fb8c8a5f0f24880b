package agent

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// logEvent is body as an event to append, of the current schema, at time
// at (zero: the log's clock).
func logEvent(tb testing.TB, body fsm.Body, at time.Time) eventlog.Event {
	tb.Helper()
	data, err := fsm.Encode(body)
	if err != nil {
		tb.Fatal(err)
	}
	return eventlog.Event{Type: string(body.EventType()), Time: at, Schema: fsm.SchemaVersion, Body: data}
}

// TestSpendBookForgetsFinishedTasks: the spend book keeps an entry for the
// unfinished tasks and the last finished ones only (a ring of two here).
// An older finished task is forgotten: its figures stay in the totals,
// its spend is folded again from its events when asked for, and when it
// calls the model again (a reflection behind a burst of completions) its
// entry is restored first, so that the call counts under its key and
// model and against its budget as if it had never been forgotten. A
// ledger that forgets nothing, fed the same events, is the reference.
func TestSpendBookForgetsFinishedTasks(t *testing.T) {
	ctx := context.Background()
	l := openLog(t, vfs.NewMem())
	defer l.Close()
	prices := projection.Prices{"small": {Input: 1, Output: 2}, "large": {Input: 10, Output: 20}}
	s := newSpendBook(l, prices, Budgets{Types: map[string]TaskBudget{"general": {MaxTokens: 40}}})
	s.retired = make([]string, 2)
	ref := projection.NewSpendLedger(prices)
	day := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	put := func(stream string, body fsm.Body, finished bool) {
		t.Helper()
		res, err := l.Append(ctx, stream, eventlog.Any, logEvent(t, body, day))
		if err != nil {
			t.Fatal(err)
		}
		ev := &fsm.Event{Type: body.EventType(), Stream: stream, Version: res.Version, Seq: res.LastSeq, Time: day, Body: body}
		s.apply(ev, finished)
		ref.Apply(ev)
	}
	call := func(stream, model string, prompt int) {
		put(stream, &fsm.ModelCalledBody{Model: model, PromptTokens: prompt, CompletionTokens: 2}, false)
	}
	ids := []string{"t0", "t1", "t2", "t3"}
	for i, id := range ids {
		put(id, &fsm.TaskCreatedBody{TaskType: "general", InputText: id, ConcurrencyKey: fmt.Sprint("key", i%2), Model: "large"}, false)
		call(id, "small", 10+i)
		put(id, &fsm.TaskCompletedBody{Result: "done"}, true)
	}
	if held := s.ledger.Held(); held != 2 || s.ledger.Holds("t0") || s.ledger.Holds("t1") || !s.ledger.Holds("t3") {
		t.Fatalf("the ledger holds %d entries (t0 %v, t1 %v, t3 %v); want the last two finished, t2 and t3",
			held, s.ledger.Holds("t0"), s.ledger.Holds("t1"), s.ledger.Holds("t3"))
	}
	same := func(when string) {
		t.Helper()
		for _, id := range ids {
			s.mu.Lock()
			got := s.taskLocked(id, false)
			s.mu.Unlock()
			if want := ref.Task(id); got != want {
				t.Errorf("%s: %s spent %+v, want %+v", when, id, got, want)
			}
		}
		if got, want := s.ledger.Report(), ref.Report(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the report is\n%+v\nwant\n%+v", when, got, want)
		}
	}
	same("after four tasks")
	if s.ledger.Holds("t0") {
		t.Fatal("asking for t0's spend gave it an entry again")
	}

	// t0's reflection calls the model (with a model of no price: the call
	// is priced as the task's, "large"); its entry is restored first.
	call("t0", "unpriced", 20)
	if !s.ledger.Holds("t0") {
		t.Fatal("t0 has no entry after its call")
	}
	same("after t0 called again")
	if got := s.ledger.KeyDay("key0", projection.SpendDay(day)).Calls; got != 3 {
		t.Fatalf("key0 has %d calls, want 3 (t0's second counts under its key)", got)
	}

	// A budget check of a forgotten task counts what it spent: t1 spent 13
	// of its type's 40 tokens, so a call that reserves 30 more is refused.
	task := fsm.Task{ID: "t1", Type: "general"}
	s.mu.Lock()
	s.ledger.Forget("t1")
	s.mu.Unlock()
	if b, _ := s.check(&task, "small", 10, 20, day); b == nil || b.Budget != fsm.BudgetTask || b.SpentTokens != 13 {
		t.Fatalf("the check of forgotten t1 gave %+v, want its task budget exceeded with 13 tokens spent", b)
	}
}

// TestSpendBookRestart: a restart's rebuild keeps the entries of the
// unfinished tasks only; the figures are those before the restart.
func TestSpendBookRestart(t *testing.T) {
	fm := newFakeModel(t, func(r *chatReq) reply { return text("done") })
	h := newHarness(t, Options{Model: fm.client(t, nil), DisableReflection: true})
	var ids []string
	for i := range 3 {
		id, err := h.a.SubmitInput(testCtx(t), Input{Text: fmt.Sprint("task ", i), ConcurrencyKey: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		h.wait(id)
		ids = append(ids, id)
	}
	before := h.a.Spend()
	h.stop()
	h.start()
	if held := h.a.spend.ledger.Held(); held != 0 {
		t.Fatalf("after a restart the ledger holds %d entries for 3 finished tasks, want 0", held)
	}
	if after := h.a.Spend(); !reflect.DeepEqual(after, before) {
		t.Fatalf("the spend after a restart is %+v, before it %+v", after, before)
	}
	for _, id := range ids {
		if got := h.a.TaskSpend(id); got.Calls != 1 || got.Tokens == 0 {
			t.Fatalf("%s spent %+v after a restart, want its one call", id, got)
		}
	}
}
