package agent

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// TaskBudget is the budget of each task of a type: the tokens and the
// cost (US dollars, by Options.Prices) its model calls may use, 0 for no
// bound; Policy says what happens to a task that would exceed it or its
// key's budget: fsm.BudgetSuspend (the default) or fsm.BudgetFail.
type TaskBudget struct {
	MaxTokens int64
	MaxCost   float64
	Policy    string
}

// KeyBudget is the budget of a concurrency key per day (UTC): the tokens
// and the cost all its tasks' model calls may use, 0 for no bound.
type KeyBudget struct {
	MaxTokens int64
	MaxCost   float64
}

// Budgets are the spend budgets: per task type (by name) and per
// concurrency key (by key; Default for a key not named, nil for none).
type Budgets struct {
	Types      map[string]TaskBudget
	Keys       map[string]KeyBudget
	DefaultKey *KeyBudget
}

// defaultReserveOut is the completion tokens a budget check reserves for a
// model without a rate limit that says (RateLimit.MaxTokens).
const defaultReserveOut = 1024

// spendBook is the agent's spend: the ledger (the projection of every
// MODEL_CALLED) and the reservations of the calls running, which the
// budget checks count with it so that concurrent calls cannot overspend
// by more than one reservation.
//
// The ledger holds an entry for the tasks that are not finished and the
// last spendRetired that finished (a post-task reflection calls the model
// after its task is done) only: an older one is forgotten, and restored
// from the task's events in the log if it is needed again (a task that
// runs again, its spend asked for). So the book's memory is bounded by the
// tasks in flight, not by every task the daemon ever ran.
type spendBook struct {
	mu       sync.Mutex
	log      *eventlog.Log
	seq      uint64   // the last event folded into the ledger
	retired  []string // the last finished tasks, a ring
	next     int      // the slot of retired the next finished task takes
	ledger   *projection.SpendLedger
	budgets  Budgets
	reserved map[string]reservation    // by task: its running call's
	byKey    map[[2]string]reservation // their sums by key and day
	gen      uint64                    // the last reservation's
}

type reservation struct {
	key, day string
	tokens   int64
	cost     float64
	gen      uint64 // which check made it (release drops only its own)
}

func newSpendBook(l *eventlog.Log, prices projection.Prices, b Budgets) *spendBook {
	return &spendBook{log: l, retired: make([]string, spendRetired), ledger: projection.NewSpendLedger(prices), budgets: b,
		reserved: map[string]reservation{}, byKey: map[[2]string]reservation{}}
}

// spendRetired is how many finished tasks keep their entry in the
// ledger: enough that a reflection running behind a burst of completions
// finds its task's entry, at about 150 bytes each.
const spendRetired = 16384

// apply folds an event into the ledger, finished saying whether the event
// finishes its task (Done after it and not before). The usage of a task's
// call is then in the ledger once its successful MODEL_CALLED, or any
// event of the stage's outcome after it, is folded: the task's
// reservation goes. (A failed attempt that is retried keeps it.)
func (s *spendBook) apply(ev *fsm.Event, finished bool) {
	s.mu.Lock()
	if needsEntry(ev) && !s.ledger.Holds(ev.Stream) {
		// A task forgotten after it finished, calling the model again:
		// its entry (key, model, spend) first, from its events so far.
		s.restoreLocked(ev.Stream)
	}
	s.ledger.Apply(ev)
	s.seq = max(s.seq, ev.Seq)
	if finished {
		if old := s.retired[s.next]; old != "" {
			s.ledger.Forget(old)
		}
		s.retired[s.next] = ev.Stream
		s.next = (s.next + 1) % len(s.retired)
	}
	if len(s.reserved) > 0 {
		switch b := ev.Body.(type) {
		case *fsm.ModelCalledBody:
			if b.Error == "" {
				s.unreserveLocked(ev.Stream)
			}
		case *fsm.BudgetExceededBody:
		default:
			s.unreserveLocked(ev.Stream)
		}
	}
	s.mu.Unlock()
}

// needsEntry reports whether folding ev reads its task's entry: a model
// call is counted under the task's key and model, and a message to a task
// that has one keeps its key. (An input that starts a task, or a broker
// task's creation, sets the entry whatever it held.)
func needsEntry(ev *fsm.Event) bool {
	return ev.Type == fsm.ModelCalled || (ev.Type == fsm.MessageReceived && ev.Version > 1)
}

// spendEvent decodes raw if it is an event the ledger folds. raw may be
// borrowed (ScanBorrowed): what the event keeps is copied.
func spendEvent(raw *eventlog.Event) (*fsm.Event, bool) {
	switch fsm.EventType(raw.Type) {
	case fsm.MessageReceived, fsm.WebhookTriggered, fsm.ScheduleFired, fsm.TaskCreated, fsm.ModelCalled, fsm.DispatchCreated:
	default:
		return nil, false
	}
	et := fsm.EventType(strings.Clone(raw.Type))
	body, err := fsm.Decode(et, raw.Schema, raw.Body)
	if err != nil {
		return nil, false // the fold reports it
	}
	return &fsm.Event{Type: et, Stream: strings.Clone(raw.Stream), Version: raw.Version, Time: raw.Time, Seq: raw.Seq, Body: body}, true
}

// rebuild folds the log's events up to head: the ledger of a restart.
// It then keeps the entries of the unfinished tasks (recovery's lists)
// only; any other that runs again is restored then.
func (s *spendBook) rebuild(head uint64, unfinished ...[]fsm.Task) error {
	it := s.log.ScanBorrowed(1) // most events are not the ledger's: none copied
	defer it.Close()
	for it.Next() {
		raw := it.Current()
		if raw.Seq > head {
			break
		}
		if ev, ok := spendEvent(raw); ok {
			s.apply(ev, false)
		}
	}
	keep := map[string]bool{}
	for _, ts := range unfinished {
		for i := range ts {
			keep[ts[i].ID] = true
		}
	}
	s.mu.Lock()
	s.ledger.Retain(func(id string) bool { return keep[id] })
	s.mu.Unlock()
	return it.Err()
}

// streamLocked returns task id's events the ledger has folded, those it
// folds, in order.
func (s *spendBook) streamLocked(id string) []*fsm.Event {
	var evs []*fsm.Event
	if s.log == nil {
		return nil
	}
	it := s.log.ReadStream(id, 1)
	defer it.Close()
	for it.Next() {
		raw := it.Event()
		if raw.Seq > s.seq {
			break
		}
		if ev, ok := spendEvent(&raw); ok {
			evs = append(evs, ev)
		}
	}
	// A read error (a damaged log, which the daemon reports on its own)
	// leaves what was read: this task's entry may be short, never the
	// totals.
	return evs
}

// restoreLocked brings back task id's entry from its events and returns
// its spend.
func (s *spendBook) restoreLocked(id string) projection.Spend {
	return s.ledger.Restore(id, s.streamLocked(id))
}

// taskLocked returns what task id spent, restoring its entry first if it
// was forgotten and keep is set.
func (s *spendBook) taskLocked(id string, keep bool) projection.Spend {
	if s.ledger.Holds(id) {
		return s.ledger.Task(id)
	}
	if keep {
		return s.restoreLocked(id)
	}
	return s.ledger.Refold(id, s.streamLocked(id))
}

// check is the budget check before a model call of t: the call reserves
// tokens (its prompt's estimate plus the output it may use) at model's
// price. It
// returns nil and records the reservation when every budget has room, or
// the BUDGET_EXCEEDED body of the first that has none.
func (s *spendBook) check(t *fsm.Task, model string, prompt, output int64, now time.Time) (*fsm.BudgetExceededBody, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	price, _ := s.ledger.Price(model, model)
	r := reservation{key: t.ConcurrencyKey, day: projection.SpendDay(now), tokens: prompt + output,
		cost: price.Cost(prompt, output)}
	tb := s.budgets.Types[t.Type]
	policy := tb.Policy
	if policy != fsm.BudgetFail {
		policy = fsm.BudgetSuspend
	}
	over := func(budget string, maxTokens int64, maxCost float64, spent projection.Spend, tokens int64, cost float64) *fsm.BudgetExceededBody {
		if overBudget(maxTokens, maxCost, spent.Tokens+tokens+r.tokens, spent.Cost+cost+r.cost) {
			return &fsm.BudgetExceededBody{Budget: budget, Model: model, MaxTokens: maxTokens, MaxCost: maxCost,
				SpentTokens: spent.Tokens + tokens, SpentCost: spent.Cost + cost, ReservedTokens: r.tokens, ReservedCost: r.cost, Policy: policy}
		}
		return nil
	}
	if b := over(fsm.BudgetTask, tb.MaxTokens, tb.MaxCost, s.taskLocked(t.ID, true), 0, 0); b != nil {
		return b, 0
	}
	if kb, ok := s.keyBudget(t.ConcurrencyKey); ok {
		sum := s.byKey[[2]string{r.key, r.day}]
		tokens, cost := sum.tokens, sum.cost
		if o, ok := s.reserved[t.ID]; ok && o.key == r.key && o.day == r.day {
			tokens, cost = tokens-o.tokens, cost-o.cost
		}
		if b := over(fsm.BudgetKey, kb.MaxTokens, kb.MaxCost, s.ledger.KeyDay(r.key, r.day), tokens, cost); b != nil {
			b.Key, b.Window = t.ConcurrencyKey, r.day
			return b, 0
		}
	}
	s.unreserveLocked(t.ID)
	s.gen++
	r.gen = s.gen
	s.reserved[t.ID] = r
	k := [2]string{r.key, r.day}
	sum := s.byKey[k]
	sum.tokens, sum.cost = sum.tokens+r.tokens, sum.cost+r.cost
	s.byKey[k] = sum
	return nil, r.gen
}

// overBudget reports whether tokens and cost go past a budget of
// maxTokens and maxCost (0: no bound).
func overBudget(maxTokens int64, maxCost float64, tokens int64, cost float64) bool {
	return (maxTokens > 0 && tokens > maxTokens) || (maxCost > 0 && cost > maxCost)
}

// unreserveLocked drops task id's reservation, if any.
func (s *spendBook) unreserveLocked(id string) {
	r, ok := s.reserved[id]
	if !ok {
		return
	}
	delete(s.reserved, id)
	k := [2]string{r.key, r.day}
	sum := s.byKey[k]
	sum.tokens, sum.cost = sum.tokens-r.tokens, sum.cost-r.cost
	if sum.tokens <= 0 { // every reservation holds a token at least
		delete(s.byKey, k)
	} else {
		s.byKey[k] = sum
	}
}

func (s *spendBook) keyBudget(key string) (KeyBudget, bool) {
	if b, ok := s.budgets.Keys[key]; ok {
		return b, true
	}
	if s.budgets.DefaultKey != nil {
		return *s.budgets.DefaultKey, true
	}
	return KeyBudget{}, false
}

// release drops task id's reservation gen: its usage is in the ledger.
func (s *spendBook) release(id string, gen uint64) {
	s.mu.Lock()
	if r, ok := s.reserved[id]; ok && r.gen == gen {
		s.unreserveLocked(id)
	}
	s.mu.Unlock()
}

// limited reports whether any budget is set: without, no check runs.
func (s *spendBook) limited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.budgets.Types) > 0 || len(s.budgets.Keys) > 0 || s.budgets.DefaultKey != nil
}

// checkBudget runs the budget check before t's model call of req: nil
// and a release function when it may run (for a stage that records no
// outcome: the fold of the outcome drops the reservation, apply), or
// the body of the BUDGET_EXCEEDED to record instead.
func (a *Agent) checkBudget(t *fsm.Task, kind *taskKind, req llm.Request) (*fsm.BudgetExceededBody, func()) {
	if !a.spend.limited() {
		return nil, func() {}
	}
	output := int64(defaultReserveOut)
	if l := a.kindLimiter(kind); l != nil {
		output = int64(l.limit.MaxTokens)
	}
	b, gen := a.spend.check(t, kind.modelName, int64(estimateTokens(req)), output, a.opts.Now())
	if b != nil {
		return b, nil
	}
	// Called when the stage recorded no outcome; otherwise the hook drops
	// the reservation as it folds the outcome (apply).
	id := t.ID // not t: the stage's task stays where it is
	return nil, func() { a.spend.release(id, gen) }
}

// Spend returns the spend projection: per task, key, model and day, with
// the keys whose spend went past their budget on a day (Overruns).
func (a *Agent) Spend() projection.SpendReport {
	a.spend.mu.Lock()
	defer a.spend.mu.Unlock()
	r := a.spend.ledger.Report()
	for _, key := range slices.Sorted(maps.Keys(r.ByKeyDay)) {
		kb, ok := a.spend.keyBudget(key)
		if !ok {
			continue
		}
		for _, day := range slices.Sorted(maps.Keys(r.ByKeyDay[key])) {
			s := r.ByKeyDay[key][day]
			if overBudget(kb.MaxTokens, kb.MaxCost, s.Tokens, s.Cost) {
				r.Overruns = append(r.Overruns, projection.Overrun{Key: key, Day: day, MaxTokens: kb.MaxTokens, MaxCost: kb.MaxCost,
					Tokens: s.Tokens, Cost: s.Cost})
			}
		}
	}
	return r
}

// TaskSpend returns what task id's model calls spent.
func (a *Agent) TaskSpend(id string) projection.Spend {
	a.spend.mu.Lock()
	defer a.spend.mu.Unlock()
	return a.spend.taskLocked(id, false)
}

// SetBudgets replaces the spend budgets (an operator raised one): a task
// suspended for its budget runs again once resumed.
func (a *Agent) SetBudgets(b Budgets) {
	a.spend.mu.Lock()
	a.spend.budgets = b
	a.spend.mu.Unlock()
}

// SetPrices replaces the price table for the model calls folded from now
// on (a configuration reload); what was spent keeps its cost.
func (a *Agent) SetPrices(p projection.Prices) {
	a.spend.mu.Lock()
	a.spend.ledger.SetPrices(p)
	a.spend.mu.Unlock()
}
