package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Config controls Run.
type Config struct {
	// Dir is where temporary databases are created (on the disk under
	// test). Empty means os.TempDir().
	Dir string
	// Duration is how long each measurement runs.
	Duration time.Duration
	// Rounds is how many times each (workload, store) pair is measured; the
	// median is reported. Stores alternate order between rounds so that
	// neither always runs on a warmer machine.
	Rounds int
	// Filter selects workloads by name (a regexp); empty means all.
	Filter string
	// Progress, if set, receives a line per measurement.
	Progress io.Writer
}

// Row is one workload's outcome.
type Row struct {
	Workload       string
	Unit           string
	HigherIsBetter bool
	Ours, Raw      float64 // medians over rounds
	// Ratio is the median over rounds of ours/raw measured in the same
	// round, back to back: on a shared machine whose disk and CPU speed
	// drift, pairs measured together compare better than medians measured
	// apart. Above 1 is better when HigherIsBetter, below 1 otherwise.
	Ratio    float64
	Ratios   []float64 // per round
	OursNote string
	RawNote  string
}

// Run measures every selected workload on every store.
func Run(ctx context.Context, cfg Config, workloads []Workload, openers []Opener) ([]Row, error) {
	var re *regexp.Regexp
	if cfg.Filter != "" {
		var err error
		if re, err = regexp.Compile(cfg.Filter); err != nil {
			return nil, err
		}
	}
	rounds := max(cfg.Rounds, 1)
	var rows []Row
	for _, w := range workloads {
		if re != nil && !re.MatchString(w.Name) {
			continue
		}
		values := make([][]float64, len(openers))
		notes := make([]string, len(openers))
		for r := range rounds {
			for k := range openers {
				i := k
				if r%2 == 1 {
					i = len(openers) - 1 - k
				}
				v, note, err := measure(ctx, cfg, w, openers[i])
				if err != nil {
					return rows, fmt.Errorf("%s on %s: %w", w.Name, openers[i].Name, err)
				}
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "%-40s %-10s round %d: %12.1f %s (%s)\n", w.Name, openers[i].Name, r+1, v, w.Unit, note)
				}
				values[i] = append(values[i], v)
				notes[i] = note
			}
		}
		row := Row{Workload: w.Name, Unit: w.Unit, HigherIsBetter: w.HigherIsBetter,
			Ours: median(values[0]), OursNote: notes[0]}
		if len(openers) > 1 {
			row.Raw, row.RawNote = median(values[1]), notes[1]
			for r := range rounds {
				row.Ratios = append(row.Ratios, values[0][r]/values[1][r])
			}
			row.Ratio = median(row.Ratios)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func measure(ctx context.Context, cfg Config, w Workload, o Opener) (float64, string, error) {
	dir, err := os.MkdirTemp(cfg.Dir, "pegasus-bench-")
	if err != nil {
		return 0, "", err
	}
	defer os.RemoveAll(dir)
	dir += "/db"
	s, err := o.Open(dir)
	if err != nil {
		return 0, "", err
	}
	if w.Setup != nil {
		reopen, err := w.Setup(ctx, s)
		if err != nil {
			s.Close()
			return 0, "", err
		}
		if reopen {
			if err := s.Close(); err != nil {
				return 0, "", err
			}
			if s, err = o.Open(dir); err != nil {
				return 0, "", err
			}
		}
	}
	v, note, err := w.Run(ctx, s, cfg.Duration)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return v, note, err
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// Machine describes where the run happened.
func Machine(dir string) string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
		f.Close()
	}
	if dir == "" {
		dir = os.TempDir()
	}
	return fmt.Sprintf("%s/%s, %d CPUs (%s), %s, databases under %s",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpu, runtime.Version(), dir)
}

// PrintTable writes rows as an aligned text table, or as Markdown.
func PrintTable(w io.Writer, rows []Row, markdown bool) {
	ratio := func(r Row) string {
		better := "higher is better"
		if !r.HigherIsBetter {
			better = "lower is better"
		}
		lo, hi := slices.Min(r.Ratios), slices.Max(r.Ratios)
		return fmt.Sprintf("%.2fx (%s; rounds %.2f-%.2f)", r.Ratio, better, lo, hi)
	}
	if markdown {
		fmt.Fprintln(w, "| workload | eventlog | raw pebble | ratio eventlog/raw (median of per-round ratios) |")
		fmt.Fprintln(w, "|---|---:|---:|---|")
		for _, r := range rows {
			fmt.Fprintf(w, "| %s | %s %s | %s %s | %s |\n", r.Workload, fmtValue(r.Ours), r.Unit, fmtValue(r.Raw), r.Unit, ratio(r))
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\teventlog\traw pebble\tratio (eventlog/raw)")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s %s\t%s %s\t%s\n", r.Workload, fmtValue(r.Ours), r.Unit, fmtValue(r.Raw), r.Unit, ratio(r))
	}
	tw.Flush()
}

func fmtValue(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}
