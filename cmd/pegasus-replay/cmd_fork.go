package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/oklog/ulid/v2"
	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

func forkCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "fork",
		Usage:     `ask "what if": fold a task up to a point, add events in memory, show where the machine would go`,
		ArgsUsage: "TASK",
		Description: "Takes the task's events up to --at, appends the events of --inject (in memory: nothing is\n" +
			"written anywhere), folds the result through the same replay code as everything else, and\n" +
			"prints the new timeline (injected rows marked *), the task it ends in, and the events the\n" +
			"machine would accept next. Without --inject it shows the task at --at and what it accepts.\n\n" +
			"--inject takes NDJSON events in their JSON form (docs/events.md), as export, tail --json and\n" +
			"the API print them. For hand-written events every field but \"type\" is optional: \"stream\"\n" +
			"defaults to TASK, \"causation\" to the event before, \"time\" to the time of the event before,\n" +
			"and the body may be given decoded under \"data\" instead of \"body\". seq and version are\n" +
			"always assigned.\n\n" +
			"   pegasus-replay -d ./pegasus-data fork 01JD3Q0W6Y8M3V7Q9K2T5N4B1C --at 57 --inject other-answer.ndjson\n\n" +
			"with other-answer.ndjson holding, say (one event per line; the first is wrapped here):\n\n" +
			"   {\"type\":\"REASON_DONE\",\"data\":{\"reasoning\":{\"text\":\"answer directly\"},\n" +
			"    \"plan\":{\"goal\":\"answer\",\"steps\":[{\"index\":0,\"description\":\"reply\",\"action_type\":\"respond\",\n" +
			"    \"action_params\":{\"text\":\"42\"}}]}}}\n" +
			"   {\"type\":\"STEP_COMPLETED\",\"data\":{\"step_index\":0,\"result\":\"42\"}}",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "at", EnvVars: env("fork", "at"),
				Usage: "fork after `SEQ` (or an EVENT_ID or RFC 3339 TIME), inclusive; required"},
			&cli.StringFlag{Name: "inject", EnvVars: env("fork", "inject"),
				Usage: "append the events in NDJSON `FILE` (- for stdin) after the fork point"},
		},
		BashComplete: completeTaskIDs(std),
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, "TASK"); err != nil {
				return err
			}
			if c.String("at") == "" {
				return usagef("fork needs --at SEQ|EVENT_ID|TIME: the point to fork after")
			}
			g := readGlobals(c)
			b, err := parseAt(c.String("at"))
			if err != nil {
				return err
			}
			var injected []eventlog.Event
			if name := c.String("inject"); name != "" {
				r, closeIn, err := openInput(std, name)
				if err != nil {
					return err
				}
				injected, err = readInjected(r)
				closeIn()
				if err != nil {
					return usagef("--inject %s: %v", name, err)
				}
			}
			src, err := openSource(c.Context, std, g)
			if err != nil {
				return err
			}
			defer src.Close()
			id := parseTaskID(c.Args().First())
			res, err := fork(c.Context, src.reader, id, b, injected)
			if err != nil {
				return taskErr(c.Context, src.reader, id, b, err)
			}
			p := newPrinter(std, g)
			if p.json {
				return p.JSON(res.json(b))
			}
			return res.print(c.Context, p, src.reader, b)
		},
	}
}

// forkResult is what fork computed.
type forkResult struct {
	mem          *replay.MemLog
	timeline     *replay.TaskTimeline
	prefix       int    // events of the task up to the fork point
	injectedFrom uint64 // sequence of the first injected event in mem, 0 if none
	injected     int
}

// fork folds task id up to b, appends injected in memory and folds again.
// The MemLog holds the task's own events up to b (their sequences and ids
// unchanged) followed by the injected events, which it numbers after them.
func fork(ctx context.Context, r replay.Reader, id string, b replay.Bound, injected []eventlog.Event) (*forkResult, error) {
	prefix, err := replay.Timeline(ctx, r, id, b)
	if err != nil {
		return nil, err
	}
	evs := make([]eventlog.Event, len(prefix.Steps))
	for i, s := range prefix.Steps {
		evs[i] = s.Event
	}
	mem, err := replay.NewMemLog(evs...)
	if err != nil {
		return nil, err
	}
	res := &forkResult{mem: mem, prefix: len(evs), injected: len(injected)}
	var last eventlog.Event
	if len(evs) > 0 {
		last = evs[len(evs)-1]
	}
	for i, ev := range injected {
		if ev.Stream == "" {
			ev.Stream = id
		}
		if ev.Causation == (ulid.ULID{}) {
			ev.Causation = last.ID
		}
		stored, err := mem.Append(ev)
		if err != nil {
			return nil, usagef("injected event %d (%s): %v", i+1, ev.Type, err)
		}
		last = stored[0]
		if res.injectedFrom == 0 {
			res.injectedFrom = last.Seq
		}
	}
	if res.timeline, err = replay.Timeline(ctx, mem, id, replay.Bound{}); err != nil {
		return nil, err
	}
	return res, nil
}

// accepts lists the event types the machine would take next in t's state.
func accepts(t fsm.Task) []string {
	out := []string{}
	for _, et := range fsm.EventTypes {
		if t.CanTransition(et) {
			out = append(out, string(et))
		}
	}
	return out
}

// forkJSON is the --json output of fork.
type forkJSON struct {
	TaskID string `json:"task_id"`
	At     string `json:"at"`
	// PrefixEvents is how many of the task's recorded events were kept;
	// InjectedEvents how many were appended after them.
	PrefixEvents   int          `json:"prefix_events"`
	InjectedEvents int          `json:"injected_events"`
	Timeline       timelineJSON `json:"timeline"`
	Task           fsm.Task     `json:"task"`
	Accepts        []string     `json:"accepts"`
}

func (f *forkResult) json(b replay.Bound) forkJSON {
	return forkJSON{
		TaskID: f.timeline.TaskID, At: b.String(), PrefixEvents: f.prefix, InjectedEvents: f.injected,
		Timeline: toTimelineJSON(f.timeline, b, f.injectedFrom), Task: f.timeline.Task,
		Accepts: accepts(f.timeline.Task),
	}
}

func (f *forkResult) print(ctx context.Context, p *printer, src replay.Reader, b replay.Bound) error {
	// Causes outside the fork (the task's input) are looked up in the
	// original source.
	r := &fallbackReader{Reader: f.mem, fallback: src}
	if err := printTimeline(ctx, p, r, f.timeline, replay.Bound{}, f.injectedFrom); err != nil {
		return err
	}
	t := f.timeline.Task
	p.Printf("\nforked at %s after %d recorded events", b, f.prefix)
	if f.injected > 0 {
		p.Printf(", %d injected", f.injected)
		refused := 0
		for _, s := range f.timeline.Steps {
			if s.Err != nil && f.injectedFrom != 0 && s.Event.Seq >= f.injectedFrom {
				refused++
			}
		}
		if refused > 0 {
			p.Printf(" (%s)", p.paint(red, fmt.Sprintf("%d refused by the machine", refused)))
		}
	}
	p.Printf("\nthe machine would be in %s", p.paint(stateColour(string(t.State)), string(t.State)))
	if acc := accepts(t); len(acc) > 0 {
		p.Printf("; it accepts next: %s\n", joinComma(acc))
	} else {
		p.Printf("; it accepts nothing more\n")
	}
	p.Printf("\n%s", fsm.Describe(t))
	return nil
}

func joinComma(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(x)
	}
	return b.String()
}

// fallbackReader is a Reader whose Get falls back to another Reader, so the
// fork's timeline can name causes (the task's input) that are not in the
// fork itself.
type fallbackReader struct {
	replay.Reader
	fallback replay.Reader
}

func (r *fallbackReader) Get(ctx context.Context, id ulid.ULID) (eventlog.Event, error) {
	ev, err := r.Reader.Get(ctx, id)
	if err != nil {
		return r.fallback.Get(ctx, id)
	}
	return ev, nil
}

// readInjected parses an --inject file: one event per line in the JSON
// form (docs/events.md), read by replay.ParseDraft, so that every field but
// "type" is optional and the body may be given decoded under "data". An
// export's header line (it has "format") is skipped, so an export can be
// injected as is; so are blank lines and lines starting with #.
func readInjected(r io.Reader) ([]eventlog.Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), replay.MaxExportLine)
	var out []eventlog.Event
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var hdr struct {
			Format string `json:"format"`
		}
		if json.Unmarshal(line, &hdr) == nil && hdr.Format != "" {
			continue // an export's header: an export can be injected as is
		}
		ev, err := replay.ParseDraft(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
