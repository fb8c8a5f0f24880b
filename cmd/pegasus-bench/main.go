// Command pegasus-bench measures the event log against raw Pebble writing the
// same keys with the same sync settings, in the same run, on a real disk, and
// prints each workload's figure for both and their ratio. The workloads live
// in internal/bench.
//
//	go run ./cmd/pegasus-bench -duration 3s -rounds 3
//
// A second table gives the log's own costs (issue 15): batched appends with
// expected versions, disk use and the footprint of a small log, for the log,
// raw Pebble writing the log's keys, and a minimal Pebble writer (two keys per
// event, no envelope, no id index), with ratios to the minimal writer.
// Run only that table with
//
//	go run ./cmd/pegasus-bench -run '^$' -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/pegasus-engine/pegasus/internal/bench"
)

func main() {
	dir := flag.String("dir", "", "directory for temporary databases (default: the system temp dir)")
	duration := flag.Duration("duration", 3*time.Second, "duration of each measurement")
	rounds := flag.Int("rounds", 3, "measurements per workload and store; the median is reported")
	run := flag.String("run", "", "regexp selecting workloads by name")
	markdown := flag.Bool("markdown", false, "print the table as Markdown")
	quiet := flag.Bool("q", false, "do not print each measurement")
	costs := flag.Bool("costs", true, "also measure the log's own costs against a minimal Pebble writer")
	flag.Parse()

	cfg := bench.Config{Dir: *dir, Duration: *duration, Rounds: *rounds, Filter: *run}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	fmt.Println(bench.Machine(*dir))
	rows, err := bench.Run(context.Background(), cfg, bench.Workloads, bench.Openers)
	if len(rows) > 0 {
		bench.PrintTable(os.Stdout, rows, *markdown)
	}
	if err == nil && *costs {
		var crows []bench.CostRow
		crows, err = bench.RunCosts(context.Background(), cfg, bench.CostOpeners)
		fmt.Println()
		bench.PrintCosts(os.Stdout, crows, bench.CostOpeners, *markdown)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pegasus-bench:", err)
		os.Exit(1)
	}
}
