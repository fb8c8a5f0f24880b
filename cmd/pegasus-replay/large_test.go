package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// The benchmark of docs/benchmarks.md ("pegasus-replay" section). It is not
// part of the normal tests: building the log takes a while.
//
//	go test ./cmd/pegasus-replay -run TestLargeLog -large-log /tmp/pegasus-1m -v
var largeLog = flag.String("large-log", "", "build (unless it exists) a 1,000,000-event log in `DIR` and time the built binary on it")

const (
	largeTasks = 100_000 // about 10 events each
	largeSeed  = 1
)

// TestLargeLog times the binary, as a user runs it, on a log of about a
// million events: show on one task must answer in under 100 ms; verify
// reports its events/s.
func TestLargeLog(t *testing.T) {
	if *largeLog == "" {
		t.Skip("set -large-log DIR to run the 1,000,000-event benchmark")
	}
	dir := *largeLog
	if !hasLog(dir) {
		buildLargeLog(t, dir)
	}
	bin := buildBinary(t)
	env := []string{"PEGASUS_DATA_DIR=" + dir}

	// Pick tasks spread over the log: an early one, a middle one, the last.
	r := runBinary(t, env, "tasks", "--json", "--limit", "1")
	var first replay.Page
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &first) != nil || len(first.Tasks) == 0 {
		t.Fatalf("tasks: %d %s", r.code, r.stderr)
	}
	r = runBinary(t, env, "tasks", "--json", "--limit", "1", "--desc")
	var last replay.Page
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &last) != nil || len(last.Tasks) == 0 {
		t.Fatalf("tasks --desc: %d %s", r.code, r.stderr)
	}
	r = runBinary(t, env, "stats", "--json")
	var st projection.StatsReport
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil {
		t.Fatalf("stats: %d %s", r.code, r.stderr)
	}
	t.Logf("log: %s, %d events, %d tasks", dir, st.Events, st.Tasks)

	time1 := func(args ...string) time.Duration {
		start := time.Now()
		r := runBinary(t, env, args...)
		d := time.Since(start)
		if r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
		return d
	}
	median := func(args ...string) (time.Duration, time.Duration) {
		var ds []time.Duration
		for range 9 {
			ds = append(ds, time1(args...))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2], ds[len(ds)-1]
	}
	measure := func(phase string) {
		t.Logf("%s: %s (wall time of the whole process, median and worst of 9 runs; unflushed WAL: %d MB)",
			phase, bin, walBytes(t, dir)>>20)
		for _, row := range rows(first.Tasks[0], last.Tasks[0]) {
			med, worst := median(row.args...)
			t.Logf("| %-34s | %8s | %8s |", row.name, med.Round(100*time.Microsecond), worst.Round(100*time.Microsecond))
			if row.args[0] == "show" && med >= 100*time.Millisecond {
				t.Errorf("%s: %v: median %s, want under 100 ms", phase, row.args, med)
			}
		}
	}
	// As the daemon left it: Pebble replays the WAL of its last run into
	// memory at every read-only open.
	measure("as the daemon left it")
	// After the daemon's next start (or any read-write open), the WAL is
	// flushed to tables and a read-only open has nothing to replay.
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	measure("after a read-write open flushed the WAL")

	start := time.Now()
	r = runBinary(t, env, "verify", "--json")
	wall := time.Since(start)
	var rep struct {
		OK     bool    `json:"ok"`
		Events int     `json:"events"`
		Rate   float64 `json:"events_per_second"`
		Dur    int64   `json:"duration_ns"`
	}
	if json.Unmarshal([]byte(r.stdout), &rep) != nil || !rep.OK || r.code != 0 {
		t.Fatalf("verify: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	t.Logf("verify: %d events in %s (%.0f events/s as verify reports it; %s wall time for the process)",
		rep.Events, time.Duration(rep.Dur).Round(time.Millisecond), rep.Rate, wall.Round(time.Millisecond))
}

type benchRow struct {
	name string
	args []string
}

// rows are the commands timed, on an early and a late task.
func rows(first, last projection.Summary) []benchRow {
	return []benchRow{
		{"show (first task)", []string{"show", first.ID}},
		{"show (last task)", []string{"show", last.ID}},
		{"show --json (last task)", []string{"show", last.ID, "--json"}},
		{"state --at (last task, mid-way)", []string{"state", last.ID, "--at", fmt.Sprint(last.Seq - 1)}},
		{"why (last task)", []string{"why", last.ID}},
		{"tasks --limit 50", []string{"tasks", "--limit", "50"}},
		{"tasks --state failed --limit 50", []string{"tasks", "--state", "failed", "--limit", "50"}},
		{"stats", []string{"stats"}},
	}
}

// walBytes is the size of the Pebble WAL files in dir: what a read-only
// open replays into memory.
func walBytes(t *testing.T, dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// hasLog reports whether dir holds a non-empty log already.
func hasLog(dir string) bool {
	l, err := eventlog.Open(dir, &eventlog.Options{ReadOnly: true})
	if err != nil {
		return false
	}
	defer l.Close()
	return l.Head() > 0
}

// buildLargeLog writes the benchmark log the way the daemon leaves one: the
// events, then the projections persisted by a recovery (replay.Open).
func buildLargeLog(t *testing.T, dir string) {
	start := time.Now()
	evs := replaytest.Generate(largeSeed, replaytest.Config{Tasks: largeTasks, Concurrency: 64, Finish: true})
	t.Logf("generated %d events for %d tasks in %s", len(evs), largeTasks, time.Since(start).Round(time.Millisecond))
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start = time.Now()
	if err := replaytest.AppendAll(ctx, l, evs, 4096); err != nil {
		t.Fatal(err)
	}
	t.Logf("appended in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if _, _, err := replay.Open(ctx, l, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("projections built and persisted in %s", time.Since(start).Round(time.Millisecond))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
