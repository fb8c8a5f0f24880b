package projection

import (
	"maps"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Price is what a model's tokens cost, in US dollars per million tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// Cost is the price of prompt input and completion output tokens.
func (p Price) Cost(input, output int64) float64 {
	return (float64(input)*p.Input + float64(output)*p.Output) / 1e6
}

// Prices is a price table: by a model's configured name, and by the
// model identifiers its server is asked for (Prices.Lookup).
type Prices map[string]Price

// Lookup returns the price of model, as a MODEL_CALLED records it (the
// name the server reported, or the one asked for): an exact entry, else
// the longest entry model starts with ("gpt-4o-2024-08-06" is priced as
// "gpt-4o"), else the task's model (its configured name, fallback).
func (p Prices) Lookup(model, fallback string) (Price, bool) {
	if pr, ok := p[model]; ok {
		return pr, true
	}
	best := ""
	for name := range p {
		if len(name) > len(best) && strings.HasPrefix(model, name) {
			best = name
		}
	}
	if best != "" {
		return p[best], true
	}
	pr, ok := p[fallback]
	return pr, ok
}

// Spend is what model calls used: tokens, their cost by the price table
// (0 for a model without a price), and the attempts.
type Spend struct {
	Calls            int64   `json:"calls"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	Tokens           int64   `json:"tokens"`
	Cost             float64 `json:"cost"`
}

func (s *Spend) add(o Spend) {
	s.Calls += o.Calls
	s.PromptTokens += o.PromptTokens
	s.CompletionTokens += o.CompletionTokens
	s.Tokens += o.Tokens
	s.Cost += o.Cost
}

// SpendLedger is the spend projection: MODEL_CALLED events folded into
// what was spent per task, per concurrency key, per model and per day
// (UTC, by the event's time), and per key and day (the window of a key's
// budget). It is pure: events in, figures out. Not safe for concurrent
// use.
type SpendLedger struct {
	prices  Prices
	tasks   map[string]*taskSpend
	byKey   map[string]*Spend
	byModel map[string]*Spend
	byDay   map[string]*Spend
	keyDay  map[[2]string]*Spend
	total   Spend
	// day caches SpendDay for the day of the last call: formatting it
	// for every MODEL_CALLED cost a string allocated each time.
	day spendDayCache
}

// spendDayCache is the name of one UTC day and its bounds, in Unix
// seconds: [from, from+86400).
type spendDayCache struct {
	from int64
	name string
}

// of returns SpendDay(t).
func (c *spendDayCache) of(t time.Time) string {
	if u := t.Unix(); c.name == "" || u < c.from || u >= c.from+86400 {
		d := t.UTC()
		c.from = time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC).Unix()
		c.name = SpendDay(t)
	}
	return c.name
}

type taskSpend struct {
	key, model string // the task's concurrency key and configured model
	spend      Spend
}

// NewSpendLedger returns an empty ledger pricing calls by prices.
func NewSpendLedger(prices Prices) *SpendLedger {
	return &SpendLedger{prices: prices, tasks: map[string]*taskSpend{}, byKey: map[string]*Spend{},
		byModel: map[string]*Spend{}, byDay: map[string]*Spend{}, keyDay: map[[2]string]*Spend{}}
}

// SpendDay is the day (UTC) of t as the ledger names it: the window of a
// key's budget.
func SpendDay(t time.Time) string { return t.UTC().Format("2006-01-02") }

// Apply folds one event: a task's input or TASK_CREATED names its key
// and model; MODEL_CALLED adds its usage. Other events change nothing.
func (l *SpendLedger) Apply(ev *fsm.Event) {
	switch b := ev.Body.(type) {
	case *fsm.Input:
		if ev.Type != fsm.MessageReceived || l.tasks[ev.Stream] == nil {
			l.task(ev.Stream).key = b.ConcurrencyKey
		}
	case *fsm.TaskCreatedBody:
		ts := l.task(ev.Stream)
		ts.key, ts.model = b.ConcurrencyKey, b.Model
	case *fsm.DispatchCreatedBody:
		// A task without a key and without an entry reads as one with an
		// empty key: a broker task takes an entry only for its key.
		if b.ConcurrencyKey != "" || l.tasks[ev.Stream] != nil {
			l.task(ev.Stream).key = b.ConcurrencyKey
		}
	case *fsm.ModelCalledBody:
		ts := l.task(ev.Stream)
		s := Spend{Calls: 1, PromptTokens: int64(b.PromptTokens), CompletionTokens: int64(b.CompletionTokens),
			Tokens: int64(b.PromptTokens + b.CompletionTokens)}
		if p, ok := l.prices.Lookup(b.Model, ts.model); ok {
			s.Cost = p.Cost(s.PromptTokens, s.CompletionTokens)
		}
		model := b.Model
		if ts.model != "" {
			model = ts.model
		}
		day := l.day.of(ev.Time)
		ts.spend.add(s)
		l.total.add(s)
		for _, sp := range []*Spend{at(l.byKey, ts.key), at(l.byModel, model), at(l.byDay, day), at(l.keyDay, [2]string{ts.key, day})} {
			sp.add(s)
		}
	}
}

func (l *SpendLedger) task(id string) *taskSpend {
	ts := l.tasks[id]
	if ts == nil {
		ts = &taskSpend{}
		l.tasks[id] = ts
	}
	return ts
}

func at[K comparable](m map[K]*Spend, k K) *Spend {
	s := m[k]
	if s == nil {
		s = &Spend{}
		m[k] = s
	}
	return s
}

// Forget drops task id's entry (its key, model and spend) and keeps every
// figure the task added to. The agent forgets a task once it is finished,
// so that the ledger holds the tasks that may still call a model, not
// every task the daemon ever ran; Restore brings an entry back.
func (l *SpendLedger) Forget(id string) { delete(l.tasks, id) }

// Retain forgets every task keep says no to.
func (l *SpendLedger) Retain(keep func(id string) bool) {
	for id := range l.tasks {
		if !keep(id) {
			delete(l.tasks, id)
		}
	}
}

// Holds reports whether the ledger has an entry for task id: a task
// created with a key or a model, or that called one, and not forgotten.
func (l *SpendLedger) Holds(id string) bool {
	_, ok := l.tasks[id]
	return ok
}

// Held is how many tasks the ledger has an entry for.
func (l *SpendLedger) Held() int { return len(l.tasks) }

// Restore gives task id the entry that folding evs, its events in order,
// gives (an empty ledger with l's prices folds them), and returns the
// task's spend. Every other figure is unchanged: the events were counted
// when they were first folded. A task with no entry in evs gets none.
// Its cost is by the prices of now, which are those it was first
// counted with unless SetPrices changed them since.
func (l *SpendLedger) Restore(id string, evs []*fsm.Event) Spend {
	ts := l.refold(id, evs)
	if ts == nil {
		delete(l.tasks, id)
		return Spend{}
	}
	l.tasks[id] = ts
	return ts.spend
}

// Refold is what task id spent by evs, its events in order, folded as
// Restore does, without giving it an entry: the spend of a task the
// ledger forgot.
func (l *SpendLedger) Refold(id string, evs []*fsm.Event) Spend {
	if ts := l.refold(id, evs); ts != nil {
		return ts.spend
	}
	return Spend{}
}

func (l *SpendLedger) refold(id string, evs []*fsm.Event) *taskSpend {
	one := NewSpendLedger(l.prices)
	for _, ev := range evs {
		if ev.Stream == id {
			one.Apply(ev)
		}
	}
	return one.tasks[id]
}

// Task returns what task id spent.
func (l *SpendLedger) Task(id string) Spend {
	if ts := l.tasks[id]; ts != nil {
		return ts.spend
	}
	return Spend{}
}

// KeyDay returns what the tasks of key spent on day (SpendDay).
func (l *SpendLedger) KeyDay(key, day string) Spend {
	if s := l.keyDay[[2]string{key, day}]; s != nil {
		return *s
	}
	return Spend{}
}

// SpendReport is the ledger as the API shows it.
type SpendReport struct {
	Total   Spend            `json:"total"`
	ByKey   map[string]Spend `json:"by_key"`
	ByModel map[string]Spend `json:"by_model"`
	ByDay   map[string]Spend `json:"by_day"`
	// ByKeyDay is by key, then day.
	ByKeyDay map[string]map[string]Spend `json:"by_key_day"`
	Prices   Prices                      `json:"prices"`
	// Overruns are the keys whose spend on a day went past their budget
	// (by at most one call's reservation, when a reply used more than it
	// reserved): filled in by whoever knows the budgets.
	Overruns []Overrun `json:"overruns,omitempty"`
}

// Overrun is a key's spend on a day beyond its budget.
type Overrun struct {
	Key       string  `json:"key"`
	Day       string  `json:"day"`
	MaxTokens int64   `json:"max_tokens,omitempty"`
	MaxCost   float64 `json:"max_cost,omitempty"`
	Tokens    int64   `json:"tokens"`
	Cost      float64 `json:"cost"`
}

// Report copies the ledger's figures.
func (l *SpendLedger) Report() SpendReport {
	flat := func(m map[string]*Spend) map[string]Spend {
		out := make(map[string]Spend, len(m))
		for k, v := range m {
			out[k] = *v
		}
		return out
	}
	r := SpendReport{Total: l.total, ByKey: flat(l.byKey), ByModel: flat(l.byModel), ByDay: flat(l.byDay),
		ByKeyDay: map[string]map[string]Spend{}, Prices: maps.Clone(l.prices)}
	for k, s := range l.keyDay {
		if r.ByKeyDay[k[0]] == nil {
			r.ByKeyDay[k[0]] = map[string]Spend{}
		}
		r.ByKeyDay[k[0]][k[1]] = *s
	}
	if r.Prices == nil {
		r.Prices = Prices{}
	}
	return r
}

// Price is the ledger's price of model (Prices.Lookup).
func (l *SpendLedger) Price(model, fallback string) (Price, bool) {
	return l.prices.Lookup(model, fallback)
}

// SetPrices replaces the price table for the calls folded from now on.
func (l *SpendLedger) SetPrices(p Prices) { l.prices = p }
