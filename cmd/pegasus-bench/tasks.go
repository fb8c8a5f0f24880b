package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pegasus-engine/pegasus/internal/bench"
	"github.com/pegasus-engine/pegasus/internal/brokerbench"
)

// The agent's workload (-tasks, issue 15): internal/brokerbench.RunTasks
// against a pegasusd started here per run (its defaults: Pebble, every
// append synced, the offline model, which answers at once), or against a
// running daemon (-tasks-url). Three shapes per round, each on a daemon
// of its own: the closed loop at the daemon's defaults (5 active tasks),
// the closed loop with -tasks-inflight tasks active (the model and tool
// semaphores raised with it), and the open loop at -tasks-rate at the
// defaults. After each closed loop the daemon is stopped, its data
// directory compacted and measured: stored bytes per task, and where they
// go.
//
//	go build -o bin/ ./cmd/pegasusd ./cmd/pegasus-bench && bin/pegasus-bench -tasks -rounds 3

// tasksFlags are the flags of -tasks.
type tasksFlags struct {
	brokerFlags     // url, pegasusd, dir, rounds; cfg: Tasks, Clients, Rate, Duration
	inflight    int // tasks active at once in the second shape
	profiles    string
	run         *regexp.Regexp // selects shapes by name
}

// taskShape is one of the three shapes of a round.
type taskShape struct {
	name string
	args []string // pegasusd's flags
	rate float64  // 0: closed loop
}

func (f tasksFlags) shapes() []taskShape {
	n := strconv.Itoa(f.inflight)
	rate := f.cfg.Rate
	if rate <= 0 {
		rate = 200
	}
	all := []taskShape{
		{name: "defaults"},
		{name: n + "-in-flight", args: []string{"--max-active-tasks", n, "--max-concurrent-llm", n, "--max-concurrent-tools", n}},
		{name: "open", rate: rate},
	}
	return slices.DeleteFunc(all, func(sh taskShape) bool { return f.run != nil && !f.run.MatchString(sh.name) })
}

// runTasks runs the rounds. With several pegasusd binaries (-pegasusd
// before,after) each shape of a round runs each binary in turn, so that
// they are compared under the same load.
func runTasks(ctx context.Context, f tasksFlags) error {
	fmt.Println(bench.Machine(f.dir))
	bins := strings.Split(f.pegasusd, ",")
	shapes := f.shapes()
	type cell struct {
		res     []brokerbench.Result
		perTask []float64
	}
	cells := make([][]cell, len(shapes))
	for i := range cells {
		cells[i] = make([]cell, len(bins))
	}
	label := func(sh taskShape, b int) string {
		if len(bins) == 1 {
			return sh.name
		}
		return sh.name + " " + filepath.Base(bins[b])
	}
	for round := range f.rounds {
		for i, sh := range shapes {
			for b, bin := range bins {
				args := sh.args
				if f.profiles != "" {
					name := fmt.Sprintf("tasks-%s-%s-r%d.pprof", sh.name, filepath.Base(bin), round)
					args = append(slices.Clone(args), "--cpuprofile", filepath.Join(f.profiles, name))
				}
				fb := f.brokerFlags
				fb.pegasusd = bin
				d, err := fb.daemon(ctx, args...)
				if err != nil {
					return err
				}
				cfg := f.cfg
				cfg.URL, cfg.Rate = d.url, sh.rate
				load := loadAvg()
				res, err := brokerbench.RunTasks(ctx, cfg)
				c := &cells[i][b]
				if err == nil {
					fmt.Printf("%-24s %s (load %s -> %s)\n", label(sh, b), res, load, loadAvg())
					c.res = append(c.res, res)
					if sh.rate == 0 && d.cmd != nil {
						var pt float64
						pt, err = storedBytes(ctx, d, res.Tasks)
						c.perTask = append(c.perTask, pt)
					}
				}
				if rerr := d.remove(); err == nil {
					err = rerr
				}
				if err != nil {
					return err
				}
			}
		}
	}
	fmt.Printf("\nmedian of %d rounds:\n", f.rounds)
	for i, sh := range shapes {
		for b := range bins {
			c := cells[i][b]
			if len(c.res) == 0 {
				continue
			}
			by := func(r brokerbench.Result) float64 { return r.PerSec }
			if sh.rate > 0 {
				by = func(r brokerbench.Result) float64 { return float64(r.P99) }
			}
			slices.SortFunc(c.res, func(x, y brokerbench.Result) int { return cmp.Compare(by(x), by(y)) })
			line := fmt.Sprintf("%-24s %s", label(sh, b), c.res[len(c.res)/2])
			if pt := c.perTask; len(pt) > 0 {
				slices.Sort(pt)
				line += fmt.Sprintf("; stored %.2f KB/task", pt[len(pt)/2]/1000)
			}
			fmt.Println(line)
		}
	}
	return nil
}

// storedBytes stops d and measures its data directory: the size after a
// graceful stop, then after a flush and a full compaction, per task, and
// where the compacted bytes go (key and value bytes by key space, and
// Pebble's estimate of their share of the disk). It also says how much the
// daemon wrote to its WAL while it ran (its /metrics), and how much of
// that was the projections' checkpoints: the WAL less the log's own keys,
// which are written once, against the projections' final size.
func storedBytes(ctx context.Context, d *daemonProc, tasks int) (float64, error) {
	wal, err := walWritten(ctx, d.url)
	if err != nil {
		return 0, err
	}
	if err := d.stop(); err != nil {
		return 0, err
	}
	stopped, walFiles := bench.DirSize(d.data), walSize(d.data)
	if err := bench.CompactDir(d.data); err != nil {
		return 0, err
	}
	compacted := bench.DirSize(d.data)
	perTask := float64(compacted) / float64(tasks)
	parts, err := keySpaces(d.data)
	if err != nil {
		return 0, err
	}
	per := func(n float64) float64 { return n / float64(tasks) / 1000 }
	var logKeys, proj int64
	for _, p := range parts {
		if strings.HasPrefix(p.name, "projections") {
			proj += p.bytes
		} else {
			logKeys += p.bytes
		}
	}
	fmt.Printf("%24s data directory: %.1f MiB after the stop (%.2f KB/task, of which WAL files %.1f MiB), %.1f MiB compacted: %.2f KB/task\n",
		"", mib(stopped), per(float64(stopped)), mib(walFiles), mib(compacted), perTask/1000)
	fmt.Printf("%24s WAL written while running: %.2f KB/task: the log's keys %.2f KB, the projections' checkpoints about %.2f KB (%.1f times their final %.2f KB)\n",
		"", per(wal), per(float64(logKeys)), per(wal-float64(logKeys)), (wal-float64(logKeys))/float64(proj), per(float64(proj)))
	for _, p := range parts {
		fmt.Printf("%24s   %-22s %7d keys %6.0f B/task of keys and values, %5.0f B/task on disk\n",
			"", p.name, p.keys, float64(p.bytes)/float64(tasks), float64(p.disk)/float64(tasks))
	}
	return perTask, nil
}

// walWritten reads pegasus_eventlog_wal_written_bytes_total from the
// daemon's /metrics.
func walWritten(ctx context.Context, url string) (float64, error) {
	const series = "pegasus_eventlog_wal_written_bytes_total"
	m, err := readMetrics(ctx, url, series)
	if err != nil {
		return 0, err
	}
	v, ok := m[series]
	if !ok {
		return 0, errors.New("/metrics has no " + series)
	}
	return v, nil
}

// readMetrics reads the values of series (each a name with its labels,
// as /metrics prints it) from the daemon's /metrics; a series it does not
// print is not in the map.
func readMetrics(ctx context.Context, url string, series ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		for _, name := range series {
			if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
				if out[name], err = strconv.ParseFloat(v, 64); err != nil {
					return nil, fmt.Errorf("/metrics: %s: %w", name, err)
				}
			}
		}
	}
	return out, sc.Err()
}

// walSize is the size of the WAL files (*.log) in dir.
func walSize(dir string) int64 {
	var n int64
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range logs {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}

// keySpace is what one part of the log's key space holds.
type keySpace struct {
	name        string
	keys, bytes int64
	disk        uint64 // Pebble's estimate
	first, last []byte
}

// keySpaces reads a closed log's database and sums its keys and values by
// key space (docs/format.md): the log ('e'), its indexes ('c', 'i', 's'),
// meta ('m'), and the persisted projections ('x' "proj/<kind>/").
func keySpaces(dir string) ([]keySpace, error) {
	db, err := bench.OpenPebble(dir, true)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	names := map[byte]string{'c': "causation index", 'e': "event records", 'i': "id index", 'm': "meta", 's': "stream index"}
	var out []keySpace
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		name := names[k[0]]
		if k[0] == 'x' {
			name = "projections"
			if rest, ok := bytes.CutPrefix(k[1:], []byte("proj/")); ok {
				kind, _, _ := bytes.Cut(rest, []byte("/"))
				name = "projections " + string(kind)
			}
		}
		if name == "" {
			name = "other"
		}
		if len(out) == 0 || out[len(out)-1].name != name {
			out = append(out, keySpace{name: name, first: slices.Clone(k)})
		}
		p := &out[len(out)-1]
		p.keys++
		p.bytes += int64(len(k) + len(it.Value()))
		p.last = slices.Clone(k)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].disk, err = db.EstimateDiskUsage(out[i].first, out[i].last); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// loadAvg is the machine's load average over the last minute.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
