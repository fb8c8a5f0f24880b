package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"

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
	return []taskShape{
		{name: "defaults"},
		{name: n + "-in-flight", args: []string{"--max-active-tasks", n, "--max-concurrent-llm", n, "--max-concurrent-tools", n}},
		{name: "open", rate: rate},
	}
}

func runTasks(ctx context.Context, f tasksFlags) error {
	fmt.Println(bench.Machine(f.dir))
	shapes := f.shapes()
	results := make([][]brokerbench.Result, len(shapes))
	perTask := make([][]float64, len(shapes))
	for round := range f.rounds {
		for i, sh := range shapes {
			args := sh.args
			if f.profiles != "" {
				args = append(slices.Clone(args), "--cpuprofile", filepath.Join(f.profiles, fmt.Sprintf("tasks-%s-r%d.pprof", sh.name, round)))
			}
			d, err := f.daemon(ctx, args...)
			if err != nil {
				return err
			}
			cfg := f.cfg
			cfg.URL, cfg.Rate = d.url, sh.rate
			load := loadAvg()
			res, err := brokerbench.RunTasks(ctx, cfg)
			if err == nil {
				fmt.Printf("%-14s %s (load %s -> %s)\n", sh.name, res, load, loadAvg())
				results[i] = append(results[i], res)
				if sh.rate == 0 && d.cmd != nil {
					var b float64
					b, err = storedBytes(d, res.Tasks)
					perTask[i] = append(perTask[i], b)
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
	fmt.Printf("\nmedian of %d rounds:\n", f.rounds)
	for i, sh := range shapes {
		rs := results[i]
		slices.SortFunc(rs, func(a, b brokerbench.Result) int { return int(a.PerSec - b.PerSec) })
		if sh.rate > 0 {
			slices.SortFunc(rs, func(a, b brokerbench.Result) int { return int(a.P99 - b.P99) })
		}
		line := fmt.Sprintf("%-14s %s", sh.name, rs[len(rs)/2])
		if b := perTask[i]; len(b) > 0 {
			slices.Sort(b)
			line += fmt.Sprintf("; stored %.2f KB/task", b[len(b)/2]/1000)
		}
		fmt.Println(line)
	}
	return nil
}

// storedBytes stops d and measures its data directory: the size after a
// graceful stop, then after a flush and a full compaction, per task, and
// where the compacted bytes go (key and value bytes by key space, and
// Pebble's estimate of their share of the disk).
func storedBytes(d *daemonProc, tasks int) (float64, error) {
	if err := d.stop(); err != nil {
		return 0, err
	}
	stopped := bench.DirSize(d.data)
	if err := bench.CompactDir(d.data); err != nil {
		return 0, err
	}
	compacted := bench.DirSize(d.data)
	perTask := float64(compacted) / float64(tasks)
	fmt.Printf("%14s data directory: %.1f MiB after the stop, %.1f MiB compacted: %.0f bytes/task\n",
		"", mib(stopped), mib(compacted), perTask)
	parts, err := keySpaces(d.data)
	if err != nil {
		return 0, err
	}
	for _, p := range parts {
		fmt.Printf("%14s   %-22s %7d keys %9.0f B/task of keys and values, %6.0f B/task on disk\n",
			"", p.name, p.keys, float64(p.bytes)/float64(tasks), float64(p.disk)/float64(tasks))
	}
	return perTask, nil
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
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true})
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
