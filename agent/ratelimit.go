package agent

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
)

// RateLimit bounds the calls of one named model within any minute: the
// provider's requests per minute and tokens per minute (input and output).
type RateLimit struct {
	// RequestsPerMinute bounds the calls started within a minute; 0: no
	// bound.
	RequestsPerMinute int
	// TokensPerMinute bounds the tokens (prompt and completion) of the
	// calls started within a minute; 0: no bound.
	TokensPerMinute int
	// MaxTokens is the completion tokens a call reserves before it
	// runs, with its prompt's estimate, and the bound it sends the
	// server (max_tokens), so that no reply outgrows its reservation; the
	// usage the server reports replaces the reservation. The default
	// value is 1024.
	MaxTokens int
}

// rateWindow is how long a call counts against its model's limits.
const rateWindow = time.Minute

// rateLimiter holds one model's calls of the last minute and the calls
// waiting to start, in order: a call starts when its reservation fits
// the window (or the window holds no tokens: a call larger than the
// limit runs alone), never before one that waited longer. Nothing is
// dropped: a call waits until it fits or its context ends. The clock
// is the time package's (testing/synctest fakes it).
type rateLimiter struct {
	name  string
	limit RateLimit

	mu     sync.Mutex
	calls  []*rateCall     // started within the window, oldest first
	tokens int             // the sum of their tokens
	queue  []chan struct{} // waiting calls, first in line first; each is woken to look again
	paused time.Time       // a 429's Retry-After: nothing starts before
}

// rateCall is one call counted in the window: its start and its tokens,
// the reservation until the usage replaces it.
type rateCall struct {
	at     time.Time
	tokens int
	gone   bool // left the window: its tokens no longer count
}

// wait blocks until a call reserving tokens may start, and counts it.
func (l *rateLimiter) wait(ctx context.Context, tokens int) (*rateCall, error) {
	me := make(chan struct{}, 1)
	l.mu.Lock()
	l.queue = append(l.queue, me)
	for {
		var d time.Duration
		if l.queue[0] == me {
			now := time.Now()
			if d = l.delayLocked(now, tokens); d <= 0 {
				c := &rateCall{at: now, tokens: tokens}
				l.calls = append(l.calls, c)
				l.tokens += tokens
				l.queue = l.queue[1:]
				l.wakeLocked()
				l.mu.Unlock()
				return c, nil
			}
		}
		l.mu.Unlock()
		var timer *time.Timer
		var fire <-chan time.Time
		if d > 0 {
			timer = time.NewTimer(d)
			fire = timer.C
		}
		var done bool
		select {
		case <-me:
		case <-fire:
		case <-ctx.Done():
			done = true
		}
		if timer != nil {
			timer.Stop()
		}
		if done {
			l.mu.Lock()
			if i := slices.Index(l.queue, me); i >= 0 {
				l.queue = slices.Delete(l.queue, i, i+1)
				if i == 0 {
					l.wakeLocked()
				}
			}
			l.mu.Unlock()
			return nil, ctx.Err()
		}
		l.mu.Lock()
	}
}

// delayLocked is how long the first call in line, reserving tokens, must
// still wait at now: 0 when it may start.
func (l *rateLimiter) delayLocked(now time.Time, tokens int) time.Duration {
	l.pruneLocked(now)
	if now.Before(l.paused) {
		return l.paused.Sub(now)
	}
	if n := l.limit.RequestsPerMinute; n > 0 && len(l.calls) >= n {
		return l.calls[len(l.calls)-n].at.Add(rateWindow).Sub(now)
	}
	if n := l.limit.TokensPerMinute; n > 0 {
		sum := l.tokens
		// Room frees as the oldest calls leave the window.
		for i := 0; sum > 0 && sum+tokens > n; i++ {
			if i == len(l.calls) {
				return rateWindow // cannot happen: the sum is the calls'
			}
			sum -= l.calls[i].tokens
			if sum <= 0 || sum+tokens <= n {
				return l.calls[i].at.Add(rateWindow).Sub(now)
			}
		}
	}
	return 0
}

// pruneLocked forgets the calls that left the window.
func (l *rateLimiter) pruneLocked(now time.Time) {
	i := 0
	for i < len(l.calls) && !l.calls[i].at.Add(rateWindow).After(now) {
		l.tokens -= l.calls[i].tokens
		l.calls[i].gone = true
		i++
	}
	l.calls = l.calls[i:]
}

// wakeLocked asks the first call in line to look again.
func (l *rateLimiter) wakeLocked() {
	if len(l.queue) > 0 {
		select {
		case l.queue[0] <- struct{}{}:
		default:
		}
	}
}

// used replaces c's reservation with the tokens the server reported.
func (l *rateLimiter) used(c *rateCall, tokens int) {
	l.mu.Lock()
	if !c.gone {
		l.tokens += tokens - c.tokens
	}
	c.tokens = tokens
	l.wakeLocked()
	l.mu.Unlock()
}

// pause stops every call from starting for d (a 429's Retry-After).
func (l *rateLimiter) pause(d time.Duration) {
	l.mu.Lock()
	if until := time.Now().Add(d); until.After(l.paused) {
		l.paused = until
	}
	l.wakeLocked()
	l.mu.Unlock()
}

// RateStats is a model's rate-limit state now: the calls waiting to start
// and the requests and tokens of the current window.
type RateStats struct {
	Model    string `json:"model"`
	Waiting  int    `json:"waiting"`
	Requests int    `json:"requests"`
	Tokens   int    `json:"tokens"`
	// RequestsPerMinute and TokensPerMinute are the limits (0: none).
	RequestsPerMinute int `json:"requests_per_minute"`
	TokensPerMinute   int `json:"tokens_per_minute"`
}

func (l *rateLimiter) stats() RateStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneLocked(time.Now())
	return RateStats{Model: l.name, Waiting: len(l.queue), Requests: len(l.calls), Tokens: l.tokens,
		RequestsPerMinute: l.limit.RequestsPerMinute, TokensPerMinute: l.limit.TokensPerMinute}
}

// limitedModel is a named model whose calls wait for its rate limits.
type limitedModel struct {
	llm.Model
	limiter *rateLimiter
}

// Complete reserves the request's estimated prompt tokens plus MaxTokens,
// waits until the window has room, runs the call, and replaces the
// reservation with the reported usage; a 429 with a Retry-After pauses
// the model's window.
func (m *limitedModel) Complete(ctx context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	call := takeReserved(ctx, m.limiter)
	if call == nil {
		var err error
		if call, err = m.limiter.wait(ctx, m.limiter.reservation(req)); err != nil {
			return llm.Response{}, err
		}
	}
	if req.MaxTokens <= 0 || req.MaxTokens > m.limiter.limit.MaxTokens {
		req.MaxTokens = m.limiter.limit.MaxTokens // the reply stays within what the call reserved
	}
	used := 0
	resp, err := m.Model.Complete(ctx, req, func(att llm.Attempt) {
		if r := att.Response; r != nil {
			used += r.Usage.PromptTokens + r.Usage.CompletionTokens
		}
		if att.Status == 429 && att.RetryAfter > 0 {
			m.limiter.pause(att.RetryAfter)
		}
		if report != nil {
			report(att)
		}
	})
	if used == 0 && err != nil {
		used = call.tokens // no usage reported: the reservation stands
	}
	m.limiter.used(call, used)
	return resp, err
}

// reservation is what a call of req reserves: its prompt's estimate
// plus MaxTokens.
func (l *rateLimiter) reservation(req llm.Request) int {
	return estimateTokens(req) + l.limit.MaxTokens
}

// reserved is a call that waited for its model's window before the
// stage took a model-call slot (Agent.reserveRate), carried to the
// model's Complete in the context.
type reserved struct {
	l     *rateLimiter
	call  *rateCall
	taken bool
}

type reservedKey struct{}

// takeReserved returns the call reserved in ctx for l, once, or nil.
func takeReserved(ctx context.Context, l *rateLimiter) *rateCall {
	r, ok := ctx.Value(reservedKey{}).(*reserved)
	if !ok || r.l != l || r.taken {
		return nil
	}
	r.taken = true
	return r.call
}

// reserveRate waits, before a model-call stage takes one of the
// MaxConcurrentLLM slots, for the window of the task type's model, so
// that calls waiting for one model's limits hold no slot another model's
// calls could use. It returns the context that carries the reservation
// and a function to call once the call is over, which gives back a
// reservation the call never took.
func (a *Agent) reserveRate(ctx context.Context, kind *taskKind, req llm.Request) (context.Context, func(), error) {
	l := a.kindLimiter(kind)
	if l == nil {
		return ctx, func() {}, nil
	}
	c, err := l.wait(ctx, l.reservation(req))
	if err != nil {
		return ctx, nil, err
	}
	r := &reserved{l: l, call: c}
	return context.WithValue(ctx, reservedKey{}, r), func() {
		if !r.taken {
			l.used(c, 0)
		}
	}, nil
}

// kindLimiter is the rate limiter of a task type's model, nil for none.
func (a *Agent) kindLimiter(kind *taskKind) *rateLimiter {
	if l := a.rates.byName[kind.modelName]; l != nil {
		return l
	}
	if kind.modelName == a.model.Name() {
		return a.rates.def
	}
	return nil
}

// estimateTokens is a prompt's size in tokens, roughly: a token for every
// four bytes of its messages and tool specifications.
func estimateTokens(req llm.Request) int {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Content) + len(m.Role) + 4
		for _, c := range m.ToolCalls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return n/4 + 1
}

// rateLimits are the limiters of the named models.
type rateLimits struct {
	byName map[string]*rateLimiter
	def    *rateLimiter // the default model's (Options.Model), if it has one
}

// limitModels wraps the models of opts that have a rate limit (by their
// name in Options.Models; the default model is "default" unless it is one
// of them) so that their calls wait for it.
func limitModels(opts *Options) *rateLimits {
	rl := &rateLimits{byName: map[string]*rateLimiter{}}
	if len(opts.RateLimits) == 0 {
		return rl
	}
	limiter := func(name string) *rateLimiter {
		lim, ok := opts.RateLimits[name]
		if !ok {
			return nil
		}
		if lim.MaxTokens <= 0 {
			lim.MaxTokens = 1024
		}
		l := rl.byName[name]
		if l == nil {
			l = &rateLimiter{name: name, limit: lim}
			rl.byName[name] = l
		}
		return l
	}
	models := make(map[string]llm.Model, len(opts.Models))
	defName := "default"
	for name, m := range opts.Models {
		if sameModel(m, opts.Model) {
			defName = name
		}
		if l := limiter(name); l != nil && m != nil {
			models[name] = &limitedModel{Model: m, limiter: l}
		} else {
			models[name] = m
		}
	}
	if opts.Models != nil {
		opts.Models = models
	}
	if l := limiter(defName); l != nil {
		opts.Model = &limitedModel{Model: opts.Model, limiter: l}
		rl.def = l
	}
	return rl
}

// sameModel reports whether a and b are the same model value.
func sameModel(a, b llm.Model) bool {
	if a == nil || b == nil || reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

// stats returns each limited model's state, by name.
func (rl *rateLimits) stats() []RateStats {
	out := make([]RateStats, 0, len(rl.byName))
	for _, name := range slices.Sorted(maps.Keys(rl.byName)) {
		out = append(out, rl.byName[name].stats())
	}
	return out
}
