package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pegasus-engine/pegasus/internal/bench"
	"github.com/pegasus-engine/pegasus/internal/brokerbench"
)

// The tail latency workload (-latency, docs/benchmarks.md "Tail
// latency"): an open loop offers -latency-rate tasks/s for
// -latency-duration, whatever the daemon answers (each latency counts from
// the time its task was due), for -latency-reps repetitions on each path:
//
//   - agent: POST /v1/tasks, the task's end seen on the event stream;
//   - broker: POST /api/v1/tasks, a worker long-polls, takes it and
//     completes it (brokerbench.Run's workers).
//
// Each path runs all its repetitions back to back on one pegasusd started
// at its defaults on a fresh data directory (or on -latency-url), so that
// what happens once a minute or so (a memtable flush, a checkpoint, a
// compaction) falls inside the repetitions as it does in service. Each
// repetition prints p50, p99 and max and whether it meets the target
// (p99 < -latency-p99 and max < -latency-max), and what the daemon's
// storage did meanwhile (from its /metrics: write stalls, flushes,
// compactions, the longest GC pause); the summary says how many
// repetitions of each path met the target.
//
//	go build -o bin/ ./cmd/pegasusd ./cmd/pegasus-bench && bin/pegasus-bench -latency -latency-reps 10

var (
	latencyMode = flag.Bool("latency", false, "run the tail latency workload (open loop, agent and broker paths, p50/p99/max per repetition) instead of the log's")
	latencyF    = latencyFlags{}
)

func init() {
	flag.Float64Var(&latencyF.rate, "latency-rate", 200, "with -latency: tasks/s offered")
	flag.DurationVar(&latencyF.duration, "latency-duration", 20*time.Second, "with -latency: duration of one repetition")
	flag.IntVar(&latencyF.reps, "latency-reps", 10, "with -latency: repetitions per path")
	flag.StringVar(&latencyF.paths, "latency-paths", "agent,broker", "with -latency: the paths, in order")
	flag.StringVar(&latencyF.url, "latency-url", "", "with -latency: a running daemon's URL (default: start -pegasusd, one per path)")
	flag.DurationVar(&latencyF.p99, "latency-p99", 50*time.Millisecond, "with -latency: the target p99 (each repetition)")
	flag.DurationVar(&latencyF.max, "latency-max", 100*time.Millisecond, "with -latency: the target max (each repetition)")
	flag.StringVar(&latencyF.args, "latency-args", "", "with -latency: extra flags for the started pegasusd, space-separated")
}

type latencyFlags struct {
	rate          float64
	duration      time.Duration
	reps          int
	paths, url    string
	p99, max      time.Duration
	args          string
	pegasusd, dir string
}

// runLatency runs the repetitions of each path and prints their figures.
func runLatency(ctx context.Context, f latencyFlags) error {
	fmt.Println(bench.Machine(f.dir))
	fmt.Printf("open loop at %.0f tasks/s for %s, %d repetitions per path; target p99 < %s and max < %s in each\n",
		f.rate, f.duration, f.reps, f.p99, f.max)
	var summary []string
	failed := false
	for _, path := range strings.Split(f.paths, ",") {
		run, ok := latencyPaths[path]
		if !ok {
			return fmt.Errorf("-latency-paths: unknown path %q (agent, broker)", path)
		}
		bf := brokerFlags{url: f.url, pegasusd: f.pegasusd, dir: f.dir}
		d, err := bf.daemon(ctx, strings.Fields(f.args)...)
		if err != nil {
			return err
		}
		met := 0
		var worst brokerbench.Result
		for rep := range f.reps {
			before, err := scrape(ctx, d.url)
			if err == nil {
				load := loadAvg()
				// One set of workers for all the repetitions: a worker of
				// an earlier one, registered and gone, would be assigned
				// tasks until its registration expired.
				cfg := brokerbench.Config{URL: d.url, Rate: f.rate, Duration: f.duration, Prefix: "latency-"}
				var res brokerbench.Result
				res, err = run(ctx, cfg)
				if err == nil {
					var after storageScrape
					after, err = scrape(ctx, d.url)
					ok := res.P99 < f.p99 && res.Max < f.max
					if ok {
						met++
					}
					worst.P99, worst.Max = max(worst.P99, res.P99), max(worst.Max, res.Max)
					fmt.Printf("%-6s rep %2d: p50 %6s p99 %7s max %7s %-4s | %s | load %s -> %s\n", path, rep+1,
						ms(res.P50), ms(res.P99), ms(res.Max), verdict(ok), after.since(before), load, loadAvg())
				}
			}
			if err != nil {
				_ = d.remove()
				return err
			}
		}
		if err := d.remove(); err != nil {
			return err
		}
		failed = failed || met < f.reps
		summary = append(summary, fmt.Sprintf("%-6s %d of %d repetitions met the target (worst p99 %s, worst max %s)",
			path, met, f.reps, ms(worst.P99), ms(worst.Max)))
	}
	fmt.Println()
	for _, s := range summary {
		fmt.Println(s)
	}
	if failed {
		fmt.Println("FAIL")
	} else {
		fmt.Println("PASS")
	}
	return nil
}

var latencyPaths = map[string]func(context.Context, brokerbench.Config) (brokerbench.Result, error){
	"agent":  brokerbench.RunTasks,
	"broker": brokerbench.Run,
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISS"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// storageScrape is what the daemon's /metrics say of what can hold a
// request: the storage engine's stalls, flushes and compactions, the WAL
// rotations, the checkpoints' writes and the GC's pauses.
type storageScrape map[string]float64

// scraped are the series read, by the name printed for their change.
var scraped = []struct{ name, series string }{
	{"stalls", "pegasus_eventlog_write_stall_duration_seconds_count"},
	{"stall_s", "pegasus_eventlog_write_stall_duration_seconds_sum"},
	{"flushes", "pegasus_eventlog_flush_duration_seconds_count"},
	{"flush_s", "pegasus_eventlog_flush_duration_seconds_sum"},
	{"compactions", "pegasus_eventlog_compaction_duration_seconds_count"},
	{"compaction_s", "pegasus_eventlog_compaction_duration_seconds_sum"},
	{"append_slow", `pegasus_task_stage_duration_seconds_bucket{stage="append",le="+Inf"}`},
	{"append_fast", `pegasus_task_stage_duration_seconds_bucket{stage="append",le="0.05"}`},
	{"gc_max_s", `go_gc_duration_seconds{quantile="1"}`},
}

func scrape(ctx context.Context, url string) (storageScrape, error) {
	series := make([]string, len(scraped))
	for i, m := range scraped {
		series[i] = m.series
	}
	v, err := readMetrics(ctx, url, series...)
	if err != nil {
		return nil, err
	}
	s := storageScrape{}
	for _, m := range scraped {
		if x, ok := v[m.series]; ok {
			s[m.name] = x
		}
	}
	return s, nil
}

// since says what changed from b to s.
func (s storageScrape) since(b storageScrape) string {
	d := func(k string) float64 { return s[k] - b[k] }
	secs := func(k string) string { return fmt.Sprintf("%.0fms", d(k)*1000) }
	slow := d("append_slow") - d("append_fast")
	return fmt.Sprintf("stalls %.0f (%s), flushes %.0f (%s), compactions %.0f (%s), appends >50ms %.0f, gc max %.1fms",
		d("stalls"), secs("stall_s"), d("flushes"), secs("flush_s"), d("compactions"), secs("compaction_s"),
		math.Max(slow, 0), s["gc_max_s"]*1000)
}
