package main

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

func statsCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "print the stats projection: counts by state, machine, type and source, durations, failures",
		Description: "The same read model as pegasusd's GET /v1/stats, folded from the chosen source.\n" +
			"Durations are in milliseconds; percentiles are upper bounds exact to within 12.5%.\n\n" +
			"   pegasus-replay -d ./pegasus-data stats",
		Action: func(c *cli.Context) error {
			if err := exactArgs(c); err != nil {
				return err
			}
			g := readGlobals(c)
			src, err := openSource(c.Context, std, g)
			if err != nil {
				return err
			}
			defer src.Close()
			v, err := src.view(c.Context, std)
			if err != nil {
				return err
			}
			st := v.Stats()
			p := newPrinter(std, g)
			if p.json {
				return p.JSON(st)
			}
			printStats(p, st)
			return nil
		},
	}
}

func printStats(p *printer, st projection.StatsReport) {
	t := newTable()
	t.row("events", fmt.Sprintf("%d (%d refused, %d memory)", st.Events, st.Refused, st.MemoryEvents))
	t.row("tasks", fmt.Sprintf("%d (%d completed, %d failed)", st.Tasks, st.Completed, st.Failed))
	if !st.LastEventTime.IsZero() {
		t.row("last event", fmtTime(st.LastEventTime))
	}
	_ = t.print(p)

	section := func(title string) { p.Printf("\n%s\n", title) }

	section("by state")
	bs := newTable()
	for _, s := range fsm.AllStates {
		if n := st.ByState[s]; n > 0 {
			bs.rowc(cell{text: "  " + string(s), c: stateColour(string(s))}, cell{text: strconv.FormatInt(n, 10)})
		}
	}
	_ = bs.print(p)

	counts := func(title string, m map[string]int64) {
		if len(m) == 0 {
			return
		}
		section(title)
		ct := newTable()
		for _, k := range sortedByCount(m) {
			ct.row("  "+k, strconv.FormatInt(m[k], 10))
		}
		_ = ct.print(p)
	}
	counts("by machine", st.ByMachine)
	counts("by type", st.ByType)
	counts("by source", st.BySource)
	inputs := map[string]int64{}
	for k, v := range st.Inputs {
		inputs[string(k)] = v
	}
	counts("inputs", inputs)
	counts("system events", st.System)

	section("duration (ms)")
	dt := newTable("", "COUNT", "MEAN", "P50", "P90", "P99", "MAX")
	durRow := func(name string, d projection.DurationReport) {
		dt.row("  "+name, strconv.FormatInt(d.Count, 10), fmt.Sprintf("%.0f", d.Mean),
			strconv.FormatInt(d.P50, 10), strconv.FormatInt(d.P90, 10), strconv.FormatInt(d.P99, 10), strconv.FormatInt(d.Max, 10))
	}
	durRow("all finished", st.Duration)
	durRow("completed", st.CompletedDur)
	durRow("failed", st.FailedDur)
	_ = dt.print(p)

	if len(st.Iterations) > 0 {
		section("iterations per finished task")
		it := newTable()
		for _, ic := range st.Iterations {
			label := strconv.Itoa(ic.Iterations)
			if ic.Iterations >= maxIterationBucket {
				label += "+"
			}
			it.row("  "+label, strconv.FormatInt(ic.Tasks, 10))
		}
		_ = it.print(p)
	}
	if len(st.FailureReasons) > 0 {
		section("top failure reasons")
		ft := newTable()
		for _, r := range st.FailureReasons {
			ft.rowc(cell{text: "  " + orDash(r.Reason), c: red}, cell{text: strconv.FormatInt(r.Count, 10)})
		}
		_ = ft.print(p)
	}
	if len(st.PerMinute) > 0 {
		section(fmt.Sprintf("per minute (the %d most recent minutes with activity, of a %d-minute window)", min(len(st.PerMinute), 10), st.WindowMinutes))
		mt := newTable("  MINUTE (UTC)", "CREATED", "COMPLETED", "FAILED")
		from := max(0, len(st.PerMinute)-10)
		for _, m := range st.PerMinute[from:] {
			mt.row("  "+m.Time.UTC().Format("2006-01-02 15:04"), strconv.FormatInt(m.Created, 10),
				strconv.FormatInt(m.Completed, 10), strconv.FormatInt(m.Failed, 10))
		}
		_ = mt.print(p)
	}
}

// maxIterationBucket is the stats projection's last iterations bucket,
// which counts that many iterations or more.
const maxIterationBucket = 100

// sortedByCount orders keys by descending count, then by name.
func sortedByCount(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}
