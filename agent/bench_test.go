package agent

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

var benchInFlight = flag.Int("bench-inflight", 256, "tasks in flight in BenchmarkTasksEndToEnd")

// instantModel answers at once: a current_time call for a new question,
// then an answer with the tool's result. With it, a task is 10 events:
// input, TASK_CREATED, MODEL_CALLED, REASON_DONE, TOOL_CALL_STARTED,
// TOOL_CALL_COMPLETED, MODEL_CALLED, REASON_DONE, STEP_COMPLETED,
// TASK_COMPLETED, in 2 synced appends one after the other (the input
// with its admission; the reasoning to the task's end, since current_time
// only reads: readers.go), where the admission shares the previous task's
// last append when the task waited for a slot.
type instantModel struct{}

func (instantModel) Name() string { return "instant" }
func (instantModel) Complete(ctx context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	var r llm.Response
	if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
		r = llm.Response{Model: "instant", Content: "It is " + last.Content}
	} else {
		r = llm.Response{Model: "instant", ToolCalls: []fsm.ToolCall{{ID: "c1", Name: "current_time", Arguments: "{}"}}}
	}
	report(llm.Attempt{Number: 1, Model: "instant", Status: 200, Response: &r})
	return r, nil
}

// BenchmarkTasksEndToEnd measures whole tasks through the agent: submit,
// reason, act (a tool), reason, respond, complete, every append synced to
// disk (Pebble on the real file system, no sync shortcut). Many tasks are
// in flight at once so that their appends share fsyncs (group commit);
// -bench-inflight sets how many.
//
//	go test ./agent -run '^$' -bench TasksEndToEnd -benchtime 20000x
func BenchmarkTasksEndToEnd(b *testing.B) {
	inflight := *benchInFlight
	r := runEndToEnd(b, Options{Model: instantModel{}}, b.N, inflight)
	b.StopTimer()
	q := r.quantile
	b.ReportMetric(float64(b.N)/r.elapsed.Seconds(), "tasks/s")
	b.ReportMetric(float64(r.events)/r.elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(r.events)/float64(b.N), "events/task")
	b.ReportMetric(float64(r.appends)/float64(b.N), "appends/task")
	b.ReportMetric(float64(r.fsyncs)/float64(b.N), "fsyncs/task")
	b.ReportMetric(float64(q(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(q(0.99).Microseconds())/1000, "p99-ms")
	if testing.Verbose() {
		fmt.Printf("%d tasks, %d in flight: %.0f tasks/s, p50 %s, p99 %s\n", b.N, inflight, float64(b.N)/r.elapsed.Seconds(), q(0.5), q(0.99))
	}
}

// endToEnd is what a run of runEndToEnd measured.
type endToEnd struct {
	elapsed   time.Duration
	events    uint64
	appends   uint64          // the log's appends (a commit of one stream's events, synced)
	fsyncs    uint64          // the log's group commits
	latencies []time.Duration // sorted
}

func (r endToEnd) quantile(p float64) time.Duration {
	return r.latencies[min(len(r.latencies)-1, int(p*float64(len(r.latencies))))]
}

// runEndToEnd runs n whole tasks through a new agent with opts (its
// concurrency set to inflight), inflight at a time, on a log in a new
// directory, and resets the benchmark's timer before the first.
func runEndToEnd(b *testing.B, opts Options, n, inflight int) endToEnd {
	l, err := eventlog.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	opts.DisableReflection = true
	opts.MaxActiveTasks, opts.MaxConcurrentLLM, opts.MaxConcurrentTools = inflight, inflight, inflight
	a, err := New(l, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := a.Stop(ctx); err != nil {
			b.Error(err)
		}
	}()

	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, n)
		wg        sync.WaitGroup
	)
	head0, stats0 := l.Head(), l.Stats()
	b.ResetTimer()
	start := time.Now()
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				id, err := a.Submit(ctx, "what time is it?", "bench", "")
				if err != nil {
					b.Error(err)
					return
				}
				task, err := a.WaitForTask(ctx, id)
				if err != nil || task.State != fsm.StateCompleted {
					b.Errorf("task %s: %v %s", id, err, task.State)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				latencies = append(latencies, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(latencies)
	stats := l.Stats()
	return endToEnd{elapsed: elapsed, events: l.Head() - head0, latencies: latencies,
		appends: stats.Appends - stats0.Appends, fsyncs: stats.Commits - stats0.Commits}
}
