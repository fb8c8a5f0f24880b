package agent

import (
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/usererr"
)

// ConcurrencyLimits bounds how many tasks of one concurrency key hold an
// admission slot at once, within Options.MaxActiveTasks for all keys.
type ConcurrencyLimits struct {
	// Default is the limit of a key Keys does not name; 0: such a key has
	// no limit of its own.
	Default int
	// Keys is the limit of each named key; 0: no limit of its own.
	Keys map[string]int
}

// For returns the limit of key, 0 for none.
func (l ConcurrencyLimits) For(key string) int {
	if n, ok := l.Keys[key]; ok {
		return n
	}
	return l.Default
}

// keyName is how the messages name a concurrency key: "" is the default
// key.
func keyName(key string) string {
	if key == "" {
		return "(default)"
	}
	return key
}

// MaxConcurrencyKey bounds the length of a concurrency key.
const MaxConcurrencyKey = fsm.MaxConcurrencyKey

// CheckConcurrencyKey refuses a concurrency key that is too long or holds
// a control character.
func CheckConcurrencyKey(key string) error {
	if len(key) > MaxConcurrencyKey {
		return usererr.Errorf(ErrInvalidInput, "concurrency_key is %d bytes, more than %d", len(key), MaxConcurrencyKey)
	}
	for _, c := range key {
		if c < 0x20 || c == 0x7f {
			return usererr.Errorf(ErrInvalidInput, "concurrency_key %q holds a control character", key)
		}
	}
	return nil
}

// AdmissionWait says why task id waits for an admission slot ("waiting:
// key acme has 4 of 4 running"), and false when it does not wait.
func (a *Agent) AdmissionWait(id string) (string, bool) { return a.sched.waitReason(id) }

// SetConcurrency replaces the limits of the concurrency keys (a
// configuration reload); tasks a raised limit lets in start at once.
func (a *Agent) SetConcurrency(l ConcurrencyLimits) { a.sched.setLimits(l) }

// RateLimits returns the state of each rate-limited model, by name: the
// calls waiting and the requests and tokens of the current minute.
func (a *Agent) RateLimits() []RateStats { return a.rates.stats() }
