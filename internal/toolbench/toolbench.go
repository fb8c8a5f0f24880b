// Package toolbench holds what the benchmarks of tools share (agent/mcp's
// MCP calls through the agent, cmd/pegasusd's worker tool round trip): a
// scripted model that calls one tool once per task, and the quantiles of
// their latencies.
package toolbench

import (
	"context"
	"slices"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/fsm"
)

// CallOnce is a model that asks for Tool with Arguments (a JSON object)
// when a task starts, then answers with the tool's result: a task of one
// tool call. It answers at once.
type CallOnce struct {
	Tool, Arguments string
}

// Name is "bench".
func (CallOnce) Name() string { return "bench" }

// Complete asks for the tool, or answers with the tool's result when the
// last message is one.
func (m CallOnce) Complete(_ context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	r := llm.Response{Model: "bench", ToolCalls: []fsm.ToolCall{{ID: "c1", Name: m.Tool, Arguments: m.Arguments}}}
	if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
		r = llm.Response{Model: "bench", Content: last.Content}
	}
	report(llm.Attempt{Number: 1, Model: "bench", Status: 200, Response: &r})
	return r, nil
}

// Quantile sorts ds and returns its q-quantile (0 for none).
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// MS is d in milliseconds, to the microsecond.
func MS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
