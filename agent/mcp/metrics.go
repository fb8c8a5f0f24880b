package mcp

import "github.com/prometheus/client_golang/prometheus"

var (
	descState = prometheus.NewDesc("pegasus_mcp_server_state",
		"Each MCP server's state: 1 for the state it is in (starting, ready, down), 0 for the others.",
		[]string{"server", "state"}, nil)
	descTools = prometheus.NewDesc("pegasus_mcp_server_tools",
		"Tools each MCP server offers (its last listing).", []string{"server"}, nil)
	descCalls = prometheus.NewDesc("pegasus_mcp_tool_calls_total",
		"Tool calls sent to each MCP server, including those that failed.", []string{"server"}, nil)
	descErrors = prometheus.NewDesc("pegasus_mcp_tool_call_errors_total",
		"Tool calls to each MCP server that failed (server down or gone, error result, bad answer, cancelled).",
		[]string{"server"}, nil)
	descRestarts = prometheus.NewDesc("pegasus_mcp_server_restarts_total",
		"Starts of each MCP server after its first one.", []string{"server"}, nil)
)

// Collector returns the manager's Prometheus metrics, read at scrape time.
func (m *Manager) Collector() prometheus.Collector { return (*collector)(m) }

type collector Manager

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descTools, descCalls, descErrors, descRestarts} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.servers {
		st := s.status()
		for _, state := range []string{StateStarting, StateReady, StateDown} {
			v := 0.0
			if st.State == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, st.Name, state)
		}
		ch <- prometheus.MustNewConstMetric(descTools, prometheus.GaugeValue, float64(st.Tools), st.Name)
		ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(s.calls.Load()), st.Name)
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(s.errs.Load()), st.Name)
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(st.Restarts), st.Name)
	}
}
