package agent

import (
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/projection"
)

// BenchmarkLimitsOverhead runs the end-to-end task benchmark twice per
// round, without limits and with every limit configured but never
// reached (a concurrency limit per key, the model's rate limits, prices,
// a task type's and every key's budget), alternating so that both see the
// same machine, and reports the ratio of their throughputs
// (limits/none; 1 is no overhead).
//
//	go test ./agent -run '^$' -bench LimitsOverhead -benchtime 4000x
func BenchmarkLimitsOverhead(b *testing.B) {
	inflight := *benchInFlight
	limited := Options{Model: instantModel{},
		Concurrency: ConcurrencyLimits{Default: 4 * inflight},
		RateLimits:  map[string]RateLimit{"default": {RequestsPerMinute: 1 << 30, TokensPerMinute: 1 << 30, MaxTokens: 256}},
		Prices:      projection.Prices{"instant": {Input: 2.5, Output: 10}},
		Budgets: Budgets{Types: map[string]TaskBudget{TypeGeneral: {MaxTokens: 1 << 40, MaxCost: 1e9}},
			DefaultKey: &KeyBudget{MaxTokens: 1 << 40, MaxCost: 1e9}},
	}
	const rounds = 4
	per := max(b.N/rounds, 1)
	var none, with time.Duration
	for range rounds {
		none += runEndToEnd(b, Options{Model: instantModel{}}, per, inflight).elapsed
		with += runEndToEnd(b, limited, per, inflight).elapsed
	}
	b.StopTimer()
	tasks := float64(per * rounds)
	b.ReportMetric(tasks/none.Seconds(), "tasks/s-none")
	b.ReportMetric(tasks/with.Seconds(), "tasks/s-limits")
	b.ReportMetric(none.Seconds()/with.Seconds(), "ratio")
}
