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
}
