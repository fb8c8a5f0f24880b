package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

func tasksCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:  "tasks",
		Usage: "list tasks with state, type, priority, age and iterations",
		Description: "Lists tasks oldest first (creation order), or in the queue order with --queue, one page at a time.\n" +
			"Filters combine with AND; " +
			"a repeated filter (or a comma list) matches any of its values. --all fetches every page.\n\n" +
			"   pegasus-replay -d ./pegasus-data tasks --state failed,suspended\n" +
			"   pegasus-replay -d ./pegasus-data tasks --since 2026-01-02T15:00:00Z --type explore --desc",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "state", EnvVars: env("tasks", "state"),
				Usage: "only tasks in `STATE` (idle, reasoning, acting, suspended, completed, failed; version 0: perceiving, thinking, planning, reflecting)"},
			&cli.StringSliceFlag{Name: "type", EnvVars: env("tasks", "type"), Usage: "only tasks of `TYPE` (general, explore, plan)"},
			&cli.StringSliceFlag{Name: "source", EnvVars: env("tasks", "source"), Usage: "only tasks from `SOURCE`"},
			&cli.StringSliceFlag{Name: "machine", EnvVars: env("tasks", "machine"), Usage: "only tasks of `MACHINE` (dispatch.task, or pegasus.task@0)"},
			&cli.StringFlag{Name: "since", EnvVars: env("tasks", "since"), Usage: "only tasks created at or after `TIME` (RFC 3339, or a duration ago like 2h)"},
			&cli.StringFlag{Name: "until", EnvVars: env("tasks", "until"), Usage: "only tasks created before `TIME` (RFC 3339, or a duration ago)"},
			&cli.IntFlag{Name: "limit", Value: replay.DefaultLimit, EnvVars: env("tasks", "limit"),
				Usage: fmt.Sprintf("page size, at most %d", replay.MaxLimit)},
			&cli.StringFlag{Name: "cursor", EnvVars: env("tasks", "cursor"), Usage: "continue from the `CURSOR` a previous page printed"},
			&cli.BoolFlag{Name: "desc", EnvVars: env("tasks", "desc"), Usage: "newest first (with --queue: least urgent first)"},
			&cli.BoolFlag{Name: "queue", EnvVars: env("tasks", "queue"),
				Usage: "queue order: most urgent first across machines (pegasus.task lower priority value, dispatch.task higher), then oldest"},
			&cli.BoolFlag{Name: "all", EnvVars: env("tasks", "all"), Usage: "every page, not just the first"},
		},
		Action: func(c *cli.Context) error {
			if err := exactArgs(c); err != nil {
				return err
			}
			g := readGlobals(c)
			q, err := tasksQuery(c, std.now())
			if err != nil {
				return err
			}
			src, err := openSource(c.Context, std, g)
			if err != nil {
				return err
			}
			defer src.Close()
			v, err := src.view(c.Context, std)
			if err != nil {
				return err
			}
			page, err := v.Tasks(c.Context, q)
			for err == nil && c.Bool("all") && page.Next != "" {
				q.Cursor = page.Next
				var more replay.Page
				more, err = v.Tasks(c.Context, q)
				page.Tasks = append(page.Tasks, more.Tasks...)
				page.Next = more.Next
			}
			if err != nil {
				return err
			}
			if page.Tasks == nil {
				page.Tasks = []projection.Summary{}
			}
			p := newPrinter(std, g)
			if p.json {
				return p.JSON(page)
			}
			return printTasks(p, page, std.now())
		},
	}
}

// tasksQuery builds the replay query from the flags.
func tasksQuery(c *cli.Context, now time.Time) (replay.Query, error) {
	q := replay.Query{Cursor: c.String("cursor"), Limit: c.Int("limit"), Desc: c.Bool("desc"), Queue: c.Bool("queue")}
	if q.Limit < 1 || q.Limit > replay.MaxLimit {
		return q, usagef("--limit %d: want 1 to %d", q.Limit, replay.MaxLimit)
	}
	for _, s := range splitList(c.StringSlice("state")) {
		st := fsm.State(strings.ToLower(s))
		if !st.Valid() {
			return q, usagef("--state %q: want one of %s", s, statesList())
		}
		q.States = append(q.States, st)
	}
	q.Types = splitList(c.StringSlice("type"))
	q.Sources = splitList(c.StringSlice("source"))
	q.Machines = splitList(c.StringSlice("machine"))
	var err error
	if q.CreatedFrom, err = parseWhen(c.String("since"), now); err != nil {
		return q, usagef("--since: %v", err)
	}
	if q.CreatedTo, err = parseWhen(c.String("until"), now); err != nil {
		return q, usagef("--until: %v", err)
	}
	return q, nil
}

// splitList accepts both --state a --state b and --state a,b.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

func statesList() string {
	names := make([]string, len(fsm.AllStates))
	for i, s := range fsm.AllStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// parseWhen reads a time filter: RFC 3339, a date (2006-01-02, UTC), or a
// duration ago ("90m", "2h", "3d"). Empty means unbounded.
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if strings.HasSuffix(s, "d") {
		if n, err := strconv.Atoi(strings.TrimSuffix(s, "d")); err == nil && n >= 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time, a date or a duration ago (90m, 2h, 3d)", s)
}

func printTasks(p *printer, page replay.Page, now time.Time) error {
	if len(page.Tasks) == 0 {
		p.Printf("no tasks\n")
		return nil
	}
	t := newTable(cliconv.TaskColumns...)
	for _, s := range page.Tasks {
		row := cliconv.TaskRow(s, false, now)
		cells := make([]cell, len(row))
		for i, text := range row {
			cells[i] = cell{text: text}
		}
		cells[1].c = stateColour(string(s.State))
		t.rowc(cells...)
	}
	if err := t.print(p); err != nil {
		return err
	}
	if page.Next != "" {
		p.Printf("%s\n", cliconv.MoreLine(page.Next))
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
