package metrics

import "github.com/prometheus/client_golang/prometheus"

var (
	descRateWaiting = prometheus.NewDesc("pegasus_model_rate_waiting_calls",
		"Model calls waiting for their model's rate limit, by model (only models with a limit).", []string{"model"}, nil)
	descRateTokens = prometheus.NewDesc("pegasus_model_rate_window_tokens",
		"Tokens of the calls started in the last minute (reservations until the usage is known), by rate-limited model.", []string{"model"}, nil)
	descRateRequests = prometheus.NewDesc("pegasus_model_rate_window_requests",
		"Calls started in the last minute, by rate-limited model.", []string{"model"}, nil)
	descSpendTokens = prometheus.NewDesc("pegasus_spend_tokens_total",
		"Tokens model calls used (the spend projection of MODEL_CALLED over the log), by model.", []string{"model"}, nil)
	descSpendCost = prometheus.NewDesc("pegasus_spend_cost_dollars_total",
		"What model calls cost by the configured prices (the spend projection), in US dollars, by model.", []string{"model"}, nil)
)

// limitsCollector reads the agent's rate limiters at scrape time.
type limitsCollector Metrics

func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRateWaiting
	ch <- descRateTokens
	ch <- descRateRequests
	ch <- descSpendTokens
	ch <- descSpendCost
}

func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.a.RateLimits() {
		ch <- prometheus.MustNewConstMetric(descRateWaiting, prometheus.GaugeValue, float64(s.Waiting), s.Model)
		ch <- prometheus.MustNewConstMetric(descRateTokens, prometheus.GaugeValue, float64(s.Tokens), s.Model)
		ch <- prometheus.MustNewConstMetric(descRateRequests, prometheus.GaugeValue, float64(s.Requests), s.Model)
	}
	for model, s := range c.a.Spend().ByModel {
		ch <- prometheus.MustNewConstMetric(descSpendTokens, prometheus.CounterValue, float64(s.Tokens), model)
		ch <- prometheus.MustNewConstMetric(descSpendCost, prometheus.CounterValue, s.Cost, model)
	}
}
