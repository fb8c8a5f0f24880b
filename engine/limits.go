package engine

import (
	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/config"
)

// limitOptions adds the configuration's limits (docs/limits.md) to the
// agent's options; none without a configuration.
func limitOptions(f *config.File, a *agent.Options) {
	if f == nil {
		return
	}
	a.Concurrency = agent.ConcurrencyLimits{Default: f.Limits.Concurrency.Default, Keys: f.Limits.Concurrency.Keys}
	if len(f.Limits.Models) > 0 {
		a.RateLimits = make(map[string]agent.RateLimit, len(f.Limits.Models))
		for name, r := range f.Limits.Models {
			a.RateLimits[name] = agent.RateLimit{RequestsPerMinute: r.RequestsPerMinute, TokensPerMinute: r.TokensPerMinute,
				MaxTokens: r.MaxTokens}
		}
	}
}
