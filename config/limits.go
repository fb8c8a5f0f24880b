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
	names := map[string]bool{DefaultModelName: true}
	for _, m := range f.Models {
		names[m.Name] = true
	}
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
