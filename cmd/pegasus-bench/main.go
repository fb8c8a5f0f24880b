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
//
// With -broker it runs the Dispatch broker's workload instead (issue 12,
// broker.go): tasks/s through a pegasusd over HTTP on loopback, and the
// latency at a fixed offered rate:
//
//	go build -o bin/ ./cmd/pegasusd ./cmd/pegasus-bench && bin/pegasus-bench -broker -rounds 3
//
// With -latency it runs the tail latency workload (latency.go): an open
// loop at 200 tasks/s for 20s, ten repetitions on the agent's path and
// ten on the broker's, p50/p99/max of each against the target:
//
//	go build -o bin/ ./cmd/pegasusd ./cmd/pegasus-bench && bin/pegasus-bench -latency
//
// With -tasks it runs the agent's workload (issue 15, tasks.go): no-op
// tasks through POST /v1/tasks and the daemon's own agent with its
// offline model, tasks/s at the defaults and at 100 in flight, the latency
// at a fixed offered rate, and the bytes stored per task:
//
//	go build -o bin/ ./cmd/pegasusd ./cmd/pegasus-bench && bin/pegasus-bench -tasks -rounds 3
//
// With -enqueue it measures enqueue alone (issue 26, enqueue.go): tasks/s
// and the daemon's CPU per task from 16 clients, one task per request and
// batches of 100, agent tasks and broker tasks:
//
//	go build -o bin/ ./cmd/pegasusd ./cmd/pegasus-bench && bin/pegasus-bench -enqueue -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/pegasus-engine/pegasus/internal/bench"
)

func main() {
	dir := flag.String("dir", "", "directory for temporary databases (default: the system temp dir)")
	duration := flag.Duration("duration", 3*time.Second, "duration of each measurement")
	rounds := flag.Int("rounds", 3, "measurements per workload and store; the median is reported")
	run := flag.String("run", "", "regexp selecting workloads by name (with -tasks: shapes, defaults, 100-in-flight, open)")
	markdown := flag.Bool("markdown", false, "print the table as Markdown")
	quiet := flag.Bool("q", false, "do not print each measurement")
	costs := flag.Bool("costs", true, "also measure the log's own costs against a minimal Pebble writer")
	var bf brokerFlags
	brokerMode := flag.Bool("broker", false, "run the broker's workload (tasks/s and latency over HTTP) instead of the log's")
	flag.StringVar(&bf.url, "broker-url", "", "with -broker: a running daemon's URL (default: start -pegasusd for each run)")
	flag.StringVar(&bf.pegasusd, "pegasusd", "", "with -broker and -tasks: the pegasusd binary (default: the one beside this binary, else on $PATH); with -tasks, BEFORE,AFTER compares binaries round by round")
	flag.IntVar(&bf.cfg.Tasks, "broker-tasks", 10000, "with -broker: tasks of the closed loop")
	flag.IntVar(&bf.cfg.Clients, "broker-clients", 16, "with -broker: clients creating tasks in the closed loop")
	flag.IntVar(&bf.cfg.Workers, "broker-workers", 8, "with -broker: workers")
	flag.IntVar(&bf.cfg.MaxTasks, "broker-max-tasks", 4, "with -broker: max_tasks of each worker")
	flag.Float64Var(&bf.cfg.Rate, "broker-rate", 200, "with -broker: tasks/s offered by the open loop")
	flag.DurationVar(&bf.cfg.Duration, "broker-duration", 10*time.Second, "with -broker: duration of the open loop")
	var tf tasksFlags
	tasksMode := flag.Bool("tasks", false, "run the agent's workload (no-op tasks through POST /v1/tasks, tasks/s, latency and bytes per task) instead of the log's")
	flag.StringVar(&tf.url, "tasks-url", "", "with -tasks: a running daemon's URL (default: start -pegasusd for each run)")
	flag.IntVar(&tf.cfg.Tasks, "tasks-n", 10000, "with -tasks: tasks of the closed loops")
	flag.IntVar(&tf.cfg.Clients, "tasks-clients", 16, "with -tasks: clients creating tasks in the closed loops")
	flag.IntVar(&tf.inflight, "tasks-inflight", 100, "with -tasks: active tasks (--max-active-tasks, and the model and tool concurrency) of the second closed loop")
	flag.Float64Var(&tf.cfg.Rate, "tasks-rate", 200, "with -tasks: tasks/s offered by the open loop")
	flag.DurationVar(&tf.cfg.Duration, "tasks-duration", 10*time.Second, "with -tasks: duration of the open loop")
	flag.StringVar(&tf.profiles, "tasks-cpuprofile", "", "with -tasks: write each daemon's CPU profile into this directory")
	var ef enqueueFlags
	enqueueMode := flag.Bool("enqueue", false, "measure enqueue alone: tasks/s and daemon CPU per task, single creates and batches, agent and broker tasks")
	flag.StringVar(&ef.url, "enqueue-url", "", "with -enqueue: a running daemon's URL (default: start -pegasusd for each shape)")
	flag.IntVar(&ef.tasks, "enqueue-n", 20000, "with -enqueue: tasks per shape")
	flag.IntVar(&ef.clients, "enqueue-clients", 16, "with -enqueue: clients")
	flag.IntVar(&ef.batch, "enqueue-batch", 100, "with -enqueue: tasks per batch request")
	flag.IntVar(&ef.desc, "enqueue-desc", 0, "with -enqueue: bytes of description in each broker task")
	flag.StringVar(&ef.profiles, "enqueue-cpuprofile", "", "with -enqueue: write each daemon's CPU profile into this directory")
	flag.Parse()
	fail := func(err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, "pegasus-bench:", err)
			os.Exit(1)
		}
	}
	// -run selects the shapes of -enqueue and -tasks; the log's workloads
	// take it as their filter.
	var runRe *regexp.Regexp
	if *run != "" && (*enqueueMode || *tasksMode) {
		var err error
		if runRe, err = regexp.Compile(*run); err != nil {
			fmt.Fprintln(os.Stderr, "pegasus-bench: -run:", err)
			os.Exit(2)
		}
	}
	if *latencyMode {
		latencyF.pegasusd, latencyF.dir = bf.pegasusd, *dir
		fail(runLatency(context.Background(), latencyF))
		return
	}
	if *enqueueMode {
		ef.pegasusd, ef.dir, ef.rounds = bf.pegasusd, *dir, *rounds
		if runRe != nil {
			ef.run = runRe.MatchString
		}
		fail(runEnqueue(context.Background(), ef))
		return
	}
	if *tasksMode {
		tf.pegasusd, tf.dir, tf.rounds, tf.run = bf.pegasusd, *dir, *rounds, runRe
		fail(runTasks(context.Background(), tf))
		return
	}
	if *brokerMode {
		bf.dir, bf.rounds = *dir, *rounds
		fail(runBroker(context.Background(), bf))
		return
	}

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
	fail(err)
}
