package server

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// rateLimiter is an Agent that reports its models' rate limits
// (*agent.Agent does).
type rateLimiter interface {
	RateLimits() []agent.RateStats
}

var _ rateLimiter = (*agent.Agent)(nil)

// addLimitStats adds to GET /v1/stats what the limits of docs/limits.md
// hold now: "rate_limits", each rate-limited model's waiting calls and
// the requests and tokens of its current minute (absent when no model
// has a limit), and "spend": the total, by model, and by key on the last
// day with spend.
func addLimitStats(a Agent, out map[string]any) {
	if rl, ok := a.(rateLimiter); ok {
		if st := rl.RateLimits(); len(st) > 0 {
			out["rate_limits"] = st
		}
	}
	if sp, ok := a.(spender); ok {
		r := sp.Spend()
		today := map[string]projection.Spend{}
		if len(r.ByDay) > 0 {
			day := slices.Max(slices.Collect(maps.Keys(r.ByDay)))
			for k, days := range r.ByKeyDay {
				if s, ok := days[day]; ok {
					today[k] = s
				}
			}
		}
		out["spend"] = map[string]any{"total": r.Total, "by_model": r.ByModel, "by_key_last_day": today}
	}
}

// spender is an Agent that keeps the spend projection (*agent.Agent
// does).
type spender interface {
	Spend() projection.SpendReport
	TaskSpend(id string) projection.Spend
}

var _ spender = (*agent.Agent)(nil)

// spend serves GET /v1/spend?task=: the spend projection (what model
// calls used and cost, in total and per concurrency key, model, day, and
// key and day), or with task= what one task spent.
func (s *Server) spend(w http.ResponseWriter, r *http.Request) *apiError {
	q, e := query(r, "task")
	if e != nil {
		return e
	}
	sp, ok := s.a.(spender)
	if !ok {
		sp = noSpend{}
	}
	if id := q.Get("task"); id != "" {
		if !validID(id) {
			return errNotFound("no such task %q", id)
		}
		if _, err := s.a.Task(id); err != nil {
			return s.fromError(err)
		}
		writeJSON(w, http.StatusOK, map[string]any{"task_id": id, "spend": sp.TaskSpend(id)})
		return nil
	}
	writeJSON(w, http.StatusOK, sp.Spend())
	return nil
}

// budgetWhy adds to a why answer the figures of the task's last
// BUDGET_EXCEEDED, when a budget suspended or failed it: "budget", with
// the body's fields and "text", the figures in words.
func (s *Server) budgetWhy(t *fsm.Task, out map[string]any) {
	if !strings.HasPrefix(t.Context.SuspendReason, fsm.BudgetExhausted) && !strings.Contains(t.Context.Error, "budget") {
		return
	}
	var last *fsm.BudgetExceededBody
	it := s.store.ReadStream(t.ID, 0)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		if ev.Type != string(fsm.BudgetExceeded) {
			continue
		}
		if b, err := fsm.Decode(fsm.BudgetExceeded, ev.Schema, ev.Body); err == nil {
			last = b.(*fsm.BudgetExceededBody)
		}
	}
	if last != nil {
		out["budget"] = map[string]any{"exceeded": last, "text": fsm.BudgetText(last)}
	}
}

// noSpend is the spend of an Agent that keeps none: nothing.
type noSpend struct{}

func (noSpend) Spend() projection.SpendReport     { return projection.NewSpendLedger(nil).Report() }
func (noSpend) TaskSpend(string) projection.Spend { return projection.Spend{} }
