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
}

// Concurrency is `limits.concurrency`: a limit per concurrency key and
// a default for the keys it does not name (0: no limit of their own).
type Concurrency struct {
	Default int
	Keys    map[string]int
}

type rawLimits struct {
	Concurrency *rawConcurrency `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
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
	if r == nil || r.Concurrency == nil {
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
