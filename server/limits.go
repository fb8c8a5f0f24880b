package server

import "github.com/pegasus-engine/pegasus/agent"

// rateLimiter is an Agent that reports its models' rate limits
// (*agent.Agent does).
type rateLimiter interface {
	RateLimits() []agent.RateStats
}

var _ rateLimiter = (*agent.Agent)(nil)

// addLimitStats adds to GET /v1/stats what the limits of docs/limits.md
// hold now: "rate_limits", each rate-limited model's waiting calls and
// the requests and tokens of its current minute (absent when no model
// has a limit).
func addLimitStats(a Agent, out map[string]any) {
	if rl, ok := a.(rateLimiter); ok {
		if st := rl.RateLimits(); len(st) > 0 {
			out["rate_limits"] = st
		}
	}
}
