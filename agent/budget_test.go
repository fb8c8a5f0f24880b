package agent

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// TestKeyBudget: tasks of one key against its daily token budget. A
// task whose call would exceed it is suspended with reason
// budget_exhausted and a BUDGET_EXCEEDED that holds the figures; with 20
// tasks calling at once, the calls that run are those whose reservations
// fit (their reservations count before their usage is known), so the
// spend never exceeds the budget plus one reservation; once the budget is
// raised, the suspended tasks resume and complete.
func TestKeyBudget(t *testing.T) {
	gate := make(chan struct{})
	var gateOnce sync.Once
	arrived := make(chan string, 64)
	fm := newFakeModel(t, func(r *chatReq) reply {
		arrived <- r.firstUser()
		<-gate
		return text("done")
	})
	m := fm.client(t, nil)
	budgets := func(maxTokens int64) Budgets {
		return Budgets{Keys: map[string]KeyBudget{"acme": {MaxTokens: maxTokens}}}
	}
	h := newHarness(t, Options{Model: m, MaxActiveTasks: 30, MaxConcurrentLLM: 30, DisableReflection: true,
		RateLimits: map[string]RateLimit{"default": {MaxTokens: 20}}, Budgets: budgets(1)})
	submit := func(i int) string {
		id, err := h.a.SubmitInput(testCtx(t), Input{Text: fmt.Sprintf("task %02d", i), ConcurrencyKey: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	exceeded := func(id string) *fsm.BudgetExceededBody {
		var last *fsm.BudgetExceededBody
		for _, ev := range h.events(id) {
			if b, ok := ev.Body.(*fsm.BudgetExceededBody); ok {
				last = b
			}
		}
		return last
	}

	// A budget of one token: the first call is refused, with the figures.
	probe := submit(0)
	task := h.waitState(probe, fsm.StateSuspended)
	b := exceeded(probe)
	if b == nil || b.Budget != fsm.BudgetKey || b.Key != "acme" || b.MaxTokens != 1 || b.SpentTokens != 0 || b.ReservedTokens <= 20 ||
		b.Policy != fsm.BudgetSuspend || b.Window == "" {
		t.Fatalf("BUDGET_EXCEEDED %+v", b)
	}
	if !strings.HasPrefix(task.Context.SuspendReason, fsm.BudgetExhausted+": key acme's budget for ") ||
		!strings.Contains(task.Context.SuspendReason, fmt.Sprintf("spent 0 + this call's %d tokens > max 1", b.ReservedTokens)) {
		t.Fatalf("suspend reason %q", task.Context.SuspendReason)
	}
	res := b.ReservedTokens

	// Room for three reservations: of 20 tasks calling at once, three
	// run, the others are suspended.
	budget := 3*res + res/2
	h.a.SetBudgets(budgets(budget))
	ids := []string{probe}
	for i := 1; i < 20; i++ {
		ids = append(ids, submit(i))
	}
	if _, err := h.a.Resume(testCtx(t), probe, "budget raised"); err != nil {
		t.Fatal(err)
	}
	ran := map[string]bool{}
	for range 3 {
		ran[<-arrived] = true
	}
	suspended := 0
	for i, id := range ids {
		if ran[fmt.Sprintf("task %02d", i)] {
			continue
		}
		h.waitState(id, fsm.StateSuspended)
		suspended++
	}
	if suspended != 17 {
		t.Fatalf("%d suspended", suspended)
	}
	gateOnce.Do(func() { close(gate) })
	for i, id := range ids {
		if ran[fmt.Sprintf("task %02d", i)] {
			h.wait(id)
		}
	}
	spend := h.a.Spend()
	if got := spend.ByKey["acme"].Tokens; got > budget+res || got != 3*12 {
		t.Fatalf("acme spent %d tokens, budget %d, reservation %d", got, budget, res)
	}

	// The operator raises the budget and resumes: every task completes.
	h.a.SetBudgets(budgets(1 << 20))
	for _, id := range ids {
		if task, _ := h.a.Task(id); task.State == fsm.StateSuspended {
			if _, err := h.a.Resume(testCtx(t), id, "budget raised"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range ids {
		if task := h.wait(id); task.State != fsm.StateCompleted {
			t.Fatalf("%s: %s", id, task.State)
		}
	}
	if got := h.a.Spend().ByKey["acme"]; got.Tokens != 20*12 || got.Calls != 20 {
		t.Fatalf("acme spent %+v", got)
	}
	if got := h.a.TaskSpend(probe); got.Tokens != 12 {
		t.Fatalf("probe spent %+v", got)
	}
}

// TestTaskBudgetFails: a task type whose policy is fail fails a task
// whose call would exceed its own budget, with reason budget_exhausted;
// the spend projection prices the calls.
func TestTaskBudgetFails(t *testing.T) {
	fm := newFakeModel(t, func(r *chatReq) reply { return text("done") })
	h := newHarness(t, Options{Model: fm.client(t, nil), DisableReflection: true,
		Prices:  projection.Prices{"fake-1": {Input: 1000, Output: 2000}},
		Budgets: Budgets{Types: map[string]TaskBudget{TypeGeneral: {MaxCost: 0.000001, Policy: fsm.BudgetFail}}}})
	id := h.submit("hi")
	task := h.wait(id)
	if task.State != fsm.StateFailed || !strings.Contains(task.Context.Error, "the task's budget: spent $0.0000 + this call's $") {
		t.Fatalf("%s: %q", task.State, task.Context.Error)
	}
	h.a.SetBudgets(Budgets{})
	id = h.submit("again")
	if task := h.wait(id); task.State != fsm.StateCompleted {
		t.Fatalf("%s", task.State)
	}
	// 10 prompt and 2 completion tokens at $1000 and $2000 per million.
	if got := h.a.TaskSpend(id); got.Cost != (10*1000+2*2000)/1e6 {
		t.Fatalf("spent %+v", got)
	}
}

// TestSpendOverrun: a key whose spend on a day went past its budget (a
// reply used more than it reserved) is listed with the figures.
func TestSpendOverrun(t *testing.T) {
	a := &Agent{spend: newSpendBook(nil, nil, Budgets{Keys: map[string]KeyBudget{"acme": {MaxTokens: 100}}})}
	day := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	a.spend.apply(&fsm.Event{Type: fsm.MessageReceived, Stream: "t1", Time: day, Body: &fsm.Input{Kind: fsm.MessageReceived, ConcurrencyKey: "acme"}}, false)
	a.spend.apply(&fsm.Event{Type: fsm.ModelCalled, Stream: "t1", Time: day, Body: &fsm.ModelCalledBody{Model: "m", PromptTokens: 90, CompletionTokens: 30}}, false)
	got := a.Spend().Overruns
	want := []projection.Overrun{{Key: "acme", Day: "2026-11-26", MaxTokens: 100, Tokens: 120}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("overruns %+v", got)
	}
}

// TestReflectionWithinBudget: post-task reflection spends like any call,
// so it runs only when the task's budget has room: a task whose answer
// used up its budget ends its reflection before the first call, with
// REFLECTION_COMPLETE saying why, and the model is not called again.
func TestReflectionWithinBudget(t *testing.T) {
	model := &scriptedModel{usage: func(req llm.Request) llm.Usage {
		if req.Purpose == "reflect" {
			return llm.Usage{PromptTokens: 1}
		}
		return llm.Usage{PromptTokens: 100, CompletionTokens: 5000}
	}}
	h := newHarness(t, Options{Model: model, ShouldReflect: func(*fsm.Task) bool { return true },
		Budgets: Budgets{Types: map[string]TaskBudget{TypeGeneral: {MaxTokens: 4000}}}})
	id := h.submit("hi")
	task, err := h.a.WaitUntil(testCtx(t), id, func(t *fsm.Task) bool { return t.Context.PostReflection != nil })
	if err != nil {
		t.Fatalf("no reflection recorded: %v (state %s)", err, task.State)
	}
	done := &fsm.ReflectionCompleteBody{Reflection: *task.Context.PostReflection}
	if done == nil || !strings.Contains(done.Reflection.Assessment, "reflection stopped before round 1: the task's budget") {
		t.Fatalf("reflection: %+v", done)
	}
	model.mu.Lock()
	defer model.mu.Unlock()
	if len(model.calls) != 1 {
		t.Fatalf("the model was called %d times, want once (no reflection call)", len(model.calls))
	}
}
