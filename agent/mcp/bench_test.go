package mcp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

// benchConcurrency is the number of calls in flight at once.
const benchConcurrency = 16

// BenchmarkMCPDirect calls server-everything's echo over stdio with the
// SDK alone, 16 calls at once: the baseline of BenchmarkMCPManager.
func BenchmarkMCPDirect(b *testing.B) {
	bin := npmBin(b, "mcp-server-everything")
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	ctx := context.Background()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin, "stdio"), TerminateDuration: 500 * time.Millisecond}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	concurrently(b, func() error {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"},
			Meta: mcp.Meta{MetaIdempotencyKey: "k"}})
		return err
	})
}

// BenchmarkMCPManager makes the same calls through the Manager's tool.
func BenchmarkMCPManager(b *testing.B) {
	m := start(b, testOptions(), everythingStdio(b, "everything"))
	waitReady(b, m, "everything")
	tl := findTool(b, m, "everything__echo")
	args := json.RawMessage(`{"message":"hello"}`)
	concurrently(b, func() error {
		_, err := tl.CallParts(context.Background(), tools.Call{IdempotencyKey: "k", Arguments: args})
		return err
	})
}

// concurrently runs b.N calls of f, benchConcurrency at a time.
func concurrently(b *testing.B, f func() error) {
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := f(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer() // closing the server is not measured
}

// TestMCPOverheadRatio prints the Manager's throughput as a fraction of
// the SDK's (the target is at least 0.9). It measures, it does not judge,
// so it runs only when asked:
//
//	PEGASUS_MCP_RATIO=1 go test -run TestMCPOverheadRatio -v ./agent/mcp/
func TestMCPOverheadRatio(t *testing.T) {
	if os.Getenv("PEGASUS_MCP_RATIO") == "" {
		t.Skip("set PEGASUS_MCP_RATIO=1 to measure")
	}
	direct := testing.Benchmark(BenchmarkMCPDirect)
	manager := testing.Benchmark(BenchmarkMCPManager)
	if direct.N == 0 || manager.N == 0 {
		t.Fatal("a benchmark did not run (is testdata/npm installed?)")
	}
	t.Logf("direct:  %s", direct)
	t.Logf("manager: %s", manager)
	t.Logf("ratio (manager calls/s over direct calls/s, %d concurrent): %.3f", benchConcurrency,
		float64(direct.NsPerOp())/float64(manager.NsPerOp()))
}
