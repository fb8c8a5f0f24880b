package config

import (
	"maps"
	"slices"
	"unicode"
)

// Limits are the limits of the configuration's `limits` key.
type Limits struct {
	// Concurrency bounds how many tasks of one concurrency key run at
	// once.
	Concurrency Concurrency
	// Models are the rate limits of named models (a name of models, or
	// "default" for the --llm-* flags' model), by name.
	Models map[string]RateLimit
	// Prices are the models' prices, by name (as Models).
	Prices map[string]Price
	// Budgets are the spend budgets.
	Budgets Budgets
}

// Price is `limits.prices.NAME`: US dollars per million input (prompt)
// and output (completion) tokens.
type Price struct {
	Input, Output float64
}

// Budgets is `limits.budgets`: per task of a type, per concurrency key
// and day, and for the keys it does not name.
type Budgets struct {
	TaskTypes  map[string]TaskBudget
	Keys       map[string]KeyBudget
	DefaultKey *KeyBudget
}

// TaskBudget bounds each task of a type; Policy is "suspend" (the
// default) or "fail".
type TaskBudget struct {
	MaxTokens int64
	MaxCost   float64
	Policy    string
}

// KeyBudget bounds a concurrency key's tasks per Window ("day", the
// only one).
type KeyBudget struct {
	MaxTokens int64
	MaxCost   float64
	Window    string
}

// RateLimit is `limits.models.NAME`: a model's requests and tokens per
// minute, and the completion tokens a call reserves.
type RateLimit struct {
	RequestsPerMinute, TokensPerMinute, MaxTokens int
}

// Concurrency is `limits.concurrency`: a limit per concurrency key and
// a default for the keys it does not name (0: no limit of their own).
type Concurrency struct {
	Default int
	Keys    map[string]int
}

type rawLimits struct {
	Concurrency *rawConcurrency         `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	Models      map[string]rawRateLimit `yaml:"models,omitempty" json:"models,omitempty"`
	Prices      map[string]rawPrice     `yaml:"prices,omitempty" json:"prices,omitempty"`
	Budgets     *rawBudgets             `yaml:"budgets,omitempty" json:"budgets,omitempty"`
}

type rawPrice struct {
	Input  float64 `yaml:"input" json:"input"`
	Output float64 `yaml:"output" json:"output"`
}

type rawBudgets struct {
	TaskTypes  map[string]rawTaskBudget `yaml:"taskTypes,omitempty" json:"taskTypes,omitempty"`
	Keys       map[string]rawKeyBudget  `yaml:"keys,omitempty" json:"keys,omitempty"`
	DefaultKey *rawKeyBudget            `yaml:"defaultKey,omitempty" json:"defaultKey,omitempty"`
}

type rawTaskBudget struct {
	MaxTokens int64   `yaml:"maxTokens,omitempty" json:"maxTokens,omitempty"`
	MaxCost   float64 `yaml:"maxCost,omitempty" json:"maxCost,omitempty"`
	Policy    string  `yaml:"policy,omitempty" json:"policy,omitempty"`
}

type rawKeyBudget struct {
	MaxTokens int64   `yaml:"maxTokens,omitempty" json:"maxTokens,omitempty"`
	MaxCost   float64 `yaml:"maxCost,omitempty" json:"maxCost,omitempty"`
	Window    string  `yaml:"window,omitempty" json:"window,omitempty"`
}

type rawRateLimit struct {
	RequestsPerMinute int `yaml:"requestsPerMinute,omitempty" json:"requestsPerMinute,omitempty"`
	TokensPerMinute   int `yaml:"tokensPerMinute,omitempty" json:"tokensPerMinute,omitempty"`
	MaxTokens         int `yaml:"maxTokens,omitempty" json:"maxTokens,omitempty"`
}

type rawConcurrency struct {
	Default int            `yaml:"default,omitempty" json:"default,omitempty"`
	Keys    map[string]int `yaml:"keys,omitempty" json:"keys,omitempty"`
}

// maxKeyLimit bounds a concurrency limit (the agent's MaxActiveTasks
// bound).
const maxKeyLimit = 100000

// keyRule says what a concurrency key may be.
const keyRule = "a concurrency key is at most 128 bytes, without control characters"

func keyOK(k string) bool {
	return len(k) <= 128 && !slices.ContainsFunc([]rune(k), unicode.IsControl)
}

func (c *checker) limits(f *File, r *rawLimits) error {
	if r == nil {
		return nil
	}
	if err := c.rateLimits(f, r.Models); err != nil {
		return err
	}
	if err := c.prices(f, r.Prices); err != nil {
		return err
	}
	if err := c.budgets(f, r.Budgets); err != nil {
		return err
	}
	if r.Concurrency == nil {
		return nil
	}
	rc := r.Concurrency
	if rc.Default < 0 || rc.Default > maxKeyLimit {
		return c.errorf("limits.concurrency.default", "%d: a limit is 0 (none) to %d", rc.Default, maxKeyLimit)
	}
	out := Concurrency{Default: rc.Default}
	for _, k := range slices.Sorted(maps.Keys(rc.Keys)) {
		key := "limits.concurrency.keys." + k
		switch n := rc.Keys[k]; {
		case k == "" || !keyOK(k):
			return c.errorf(key, "%q: %s", k, keyRule)
		case n < 0 || n > maxKeyLimit:
			return c.errorf(key, "%d: a limit is 0 (none) to %d", n, maxKeyLimit)
		}
		if out.Keys == nil {
			out.Keys = map[string]int{}
		}
		out.Keys[k] = rc.Keys[k]
	}
	f.Limits.Concurrency = out
	return nil
}

// maxRate bounds a rate limit's figures.
const maxRate = 1 << 30

func (c *checker) rateLimits(f *File, ms map[string]rawRateLimit) error {
	names := modelNames(f)
	for _, name := range slices.Sorted(maps.Keys(ms)) {
		key := "limits.models." + name
		if !names[name] {
			return c.errorf(key, "unknown model %q%s", name, known(names))
		}
		r := ms[name]
		for _, v := range []struct {
			k string
			n int
		}{{"requestsPerMinute", r.RequestsPerMinute}, {"tokensPerMinute", r.TokensPerMinute}, {"maxTokens", r.MaxTokens}} {
			if v.n < 0 || v.n > maxRate {
				return c.errorf(key+"."+v.k, "%d: want 0 (none) to %d", v.n, maxRate)
			}
		}
		if f.Limits.Models == nil {
			f.Limits.Models = map[string]RateLimit{}
		}
		f.Limits.Models[name] = RateLimit(r)
	}
	return nil
}

// modelNames are the names of f's models, the default one included.
func modelNames(f *File) map[string]bool {
	names := map[string]bool{DefaultModelName: true}
	for _, m := range f.Models {
		names[m.Name] = true
	}
	return names
}

func (c *checker) prices(f *File, ps map[string]rawPrice) error {
	names := modelNames(f)
	for _, name := range slices.Sorted(maps.Keys(ps)) {
		key := "limits.prices." + name
		p := ps[name]
		switch {
		case !names[name]:
			return c.errorf(key, "unknown model %q%s", name, known(names))
		case p.Input < 0 || p.Input > 1e6:
			return c.errorf(key+".input", "%v: want 0 to 1000000 dollars per million tokens", p.Input)
		case p.Output < 0 || p.Output > 1e6:
			return c.errorf(key+".output", "%v: want 0 to 1000000 dollars per million tokens", p.Output)
		}
		if f.Limits.Prices == nil {
			f.Limits.Prices = map[string]Price{}
		}
		f.Limits.Prices[name] = Price(p)
	}
	return nil
}

func (c *checker) budgets(f *File, b *rawBudgets) error {
	if b == nil {
		return nil
	}
	types := taskTypeNames(f)
	amounts := func(key string, tokens int64, cost float64) error {
		switch {
		case tokens < 0:
			return c.errorf(key+".maxTokens", "%d: want 0 (none) or more", tokens)
		case cost < 0:
			return c.errorf(key+".maxCost", "%v: want 0 (none) or more dollars", cost)
		}
		return nil
	}
	out := Budgets{}
	for _, name := range slices.Sorted(maps.Keys(b.TaskTypes)) {
		key := "limits.budgets.taskTypes." + name
		r := b.TaskTypes[name]
		if !types[name] {
			return c.errorf(key, "unknown task type %q%s", name, knownTypes(types))
		}
		if err := amounts(key, r.MaxTokens, r.MaxCost); err != nil {
			return err
		}
		if r.Policy != "" && r.Policy != "suspend" && r.Policy != "fail" {
			return c.errorf(key+".policy", "%q: want suspend or fail", r.Policy)
		}
		if out.TaskTypes == nil {
			out.TaskTypes = map[string]TaskBudget{}
		}
		out.TaskTypes[name] = TaskBudget(r)
	}
	keyBudget := func(key string, r rawKeyBudget) (KeyBudget, error) {
		if err := amounts(key, r.MaxTokens, r.MaxCost); err != nil {
			return KeyBudget{}, err
		}
		if r.Window == "" {
			r.Window = "day"
		}
		if r.Window != "day" {
			return KeyBudget{}, c.errorf(key+".window", "%q: the window of a key's budget is day", r.Window)
		}
		return KeyBudget(r), nil
	}
	for _, k := range slices.Sorted(maps.Keys(b.Keys)) {
		key := "limits.budgets.keys." + k
		if k == "" || !keyOK(k) {
			return c.errorf(key, "%q: %s", k, keyRule)
		}
		kb, err := keyBudget(key, b.Keys[k])
		if err != nil {
			return err
		}
		if out.Keys == nil {
			out.Keys = map[string]KeyBudget{}
		}
		out.Keys[k] = kb
	}
	if b.DefaultKey != nil {
		kb, err := keyBudget("limits.budgets.defaultKey", *b.DefaultKey)
		if err != nil {
			return err
		}
		out.DefaultKey = &kb
	}
	f.Limits.Budgets = out
	return nil
}
