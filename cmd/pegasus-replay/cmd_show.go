package main

import (
	"context"
	"strconv"

	"github.com/oklog/ulid/v2"
	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

func showCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "show a task's timeline: every event with the state it moved the task from and to",
		ArgsUsage: "TASK",
		Description: "Each row is one event of the task's stream: global sequence, time and time since the\n" +
			"previous event, type, state before -> after, the event that caused it (#seq), and a one-line\n" +
			"summary of its body (tool and outcome, error, plan size, tokens). A refused event (one the\n" +
			"machine does not accept) is marked REFUSED with the reason.\n\n" +
			"   pegasus-replay -d ./pegasus-data show 01JD3Q0W6Y8M3V7Q9K2T5N4B1C\n" +
			"   pegasus-replay -d ./pegasus-data show 01JD3Q0W6Y8M3V7Q9K2T5N4B1C --at 120",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "at", EnvVars: env("show", "at"),
				Usage: "stop at `SEQ|EVENT_ID|TIME` (inclusive) instead of the end of the log"},
		},
		BashComplete: completeTaskIDs(std),
		Action: func(c *cli.Context) error {
			src, id, b, g, err := openTaskAt(c, std)
			if err != nil {
				return err
			}
			defer src.Close()
			tl, err := replay.Timeline(c.Context, src.reader, id, b)
			if err != nil {
				return taskErr(c.Context, src.reader, id, b, err)
			}
			return printTimeline(c.Context, newPrinter(std, g), src.reader, tl, b, 0)
		},
	}
}

// parseAt reads an optional --at.
func parseAt(s string) (replay.Bound, error) {
	if s == "" {
		return replay.Bound{}, nil
	}
	b, err := replay.ParseBound(s)
	if err != nil {
		return b, usagef("--at: %v", err)
	}
	return b, nil
}

// stepJSON is one row of a timeline in --json output.
type stepJSON struct {
	eventJSON
	From    fsm.State `json:"from"`
	To      fsm.State `json:"to"`
	DeltaMS int64     `json:"delta_ms"` // since the previous event of the task
	Refused string    `json:"refused,omitempty"`
	// Injected is set by fork for the what-if events it appended.
	Injected bool `json:"injected,omitempty"`
}

// timelineJSON is the --json output of show (and of fork's timeline).
type timelineJSON struct {
	TaskID string     `json:"task_id"`
	At     string     `json:"at"` // the bound: "head", "seq 12", ...
	State  fsm.State  `json:"state"`
	Steps  []stepJSON `json:"steps"`
}

func toTimelineJSON(tl *replay.TaskTimeline, b replay.Bound, injectedFrom uint64) timelineJSON {
	j := timelineJSON{TaskID: tl.TaskID, At: b.String(), State: tl.Task.State, Steps: []stepJSON{}}
	for i, s := range tl.Steps {
		sj := stepJSON{eventJSON: toEventJSON(s.Event), From: s.From, To: s.To}
		if i > 0 {
			sj.DeltaMS = s.Event.Time.Sub(tl.Steps[i-1].Event.Time).Milliseconds()
		}
		if s.Err != nil {
			sj.Refused = s.Err.Error()
		}
		sj.Injected = injectedFrom != 0 && s.Event.Seq >= injectedFrom
		j.Steps = append(j.Steps, sj)
	}
	return j
}

// printTimeline prints a task's timeline. Events at or after injectedFrom
// (when not 0) are marked as injected by fork.
func printTimeline(ctx context.Context, p *printer, r replay.Reader, tl *replay.TaskTimeline, b replay.Bound, injectedFrom uint64) error {
	if p.json {
		return p.JSON(toTimelineJSON(tl, b, injectedFrom))
	}
	// The task's summary, as every command that prints a task does; its
	// version is the number of events below.
	if !b.IsZero() {
		p.Printf("as of %s\n", b)
	}
	p.Printf("%s\n", fsm.DescribeSummary(tl.Task))
	tab := newTable("SEQ", "TIME", "DELTA", "EVENT", "STATE", "CAUSE", "SUMMARY")
	known := map[ulid.ULID]uint64{}
	for i, s := range tl.Steps {
		ev := s.Event
		known[ev.ID] = ev.Seq
		delta := "-"
		if i > 0 {
			delta = fmtDelta(ev.Time.Sub(tl.Steps[i-1].Event.Time))
		}
		state := string(s.To)
		stateCol := stateColour(state)
		if s.From != s.To {
			state = s.From.String() + " -> " + s.To.String()
		}
		summary := eventSummary(toEventJSON(ev))
		if s.Err != nil {
			state, stateCol = "REFUSED", red
			summary = s.Err.Error() + " | " + summary
		}
		seq := strconv.FormatUint(ev.Seq, 10)
		if injectedFrom != 0 && ev.Seq >= injectedFrom {
			seq += "*"
		}
		tab.rowc(
			cell{text: seq},
			cell{text: fmtTime(ev.Time)},
			cell{text: delta},
			cell{text: ev.Type, c: typeColour(ev.Type)},
			cell{text: state, c: stateCol},
			cell{text: causeLabel(ctx, r, known, ev)},
			cell{text: summary},
		)
	}
	if err := tab.print(p); err != nil {
		return err
	}
	if injectedFrom != 0 {
		p.Printf("\n* injected by fork (in memory only; nothing was written)\n")
	}
	return nil
}
