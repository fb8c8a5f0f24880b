package engine

import (
	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/config"
	"github.com/pegasus-engine/pegasus/projection"
)

// limitOptions adds the configuration's limits (docs/limits.md) to the
// agent's options; none without a configuration.
func limitOptions(f *config.File, a *agent.Options) {
	if f == nil {
		return
	}
	l := &f.Limits
	// The configuration's limit types are the agent's field for field
	// (config does not import agent): a conversion is the mapping.
	a.Concurrency = agent.ConcurrencyLimits(l.Concurrency)
	if len(l.Models) > 0 {
		a.RateLimits = make(map[string]agent.RateLimit, len(l.Models))
		for name, r := range l.Models {
			a.RateLimits[name] = agent.RateLimit(r)
		}
	}
	a.Prices = limitPrices(f, a)
	a.Budgets = limitBudgets(l.Budgets)
}

// limitPrices is the price table: each priced model by its name, and by
// the model identifier its server is asked for (what MODEL_CALLED
// records); "default" is the --llm-* flags' model, by its name too.
func limitPrices(f *config.File, a *agent.Options) projection.Prices {
	if len(f.Limits.Prices) == 0 {
		return nil
	}
	out := projection.Prices{}
	for name, p := range f.Limits.Prices {
		pr := projection.Price(p)
		out[name] = pr
		if name == config.DefaultModelName && a.Model != nil {
			out[a.Model.Name()] = pr
		}
	}
	for _, m := range f.Models {
		if p, ok := out[m.Name]; ok && m.Model != "" {
			if _, taken := out[m.Model]; !taken {
				out[m.Model] = p
			}
		}
	}
	return out
}

func limitBudgets(b config.Budgets) agent.Budgets {
	out := agent.Budgets{}
	for name, t := range b.TaskTypes {
		if out.Types == nil {
			out.Types = map[string]agent.TaskBudget{}
		}
		out.Types[name] = agent.TaskBudget(t)
	}
	for k, kb := range b.Keys {
		if out.Keys == nil {
			out.Keys = map[string]agent.KeyBudget{}
		}
		out.Keys[k] = agent.KeyBudget{MaxTokens: kb.MaxTokens, MaxCost: kb.MaxCost}
	}
	if d := b.DefaultKey; d != nil {
		out.DefaultKey = &agent.KeyBudget{MaxTokens: d.MaxTokens, MaxCost: d.MaxCost}
	}
	return out
}

// ReloadLimits applies the limits of f, a configuration read again (an
// operator raised a budget): the concurrency limits per key, the prices
// and the budgets take effect at once; a task suspended for its budget
// runs again once resumed. The model rate limits stay as the daemon
// started with them.
func (e *Engine) ReloadLimits(f *config.File) {
	var a agent.Options
	a.Model = e.opts.Model
	limitOptions(f, &a)
	e.agent.SetConcurrency(a.Concurrency)
	e.agent.SetPrices(a.Prices)
	e.agent.SetBudgets(a.Budgets)
}
