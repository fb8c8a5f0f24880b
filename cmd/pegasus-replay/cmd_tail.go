package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/client"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

func tailCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:  "tail",
		Usage: "follow live events from a running pegasusd (Server-Sent Events), resuming after drops",
		Description: "Prints each event as it commits: sequence, time, stream, type and a one-line summary\n" +
			"(with --json: one event per line in the JSON form of docs/events.md, which --file reads back).\n" +
			"If the connection drops, tail reconnects with Last-Event-ID set to the last sequence it\n" +
			"printed, so no event is missed or printed twice. Stop it with Ctrl-C.\n\n" +
			"   pegasus-replay --server http://127.0.0.1:7070 tail\n" +
			"   pegasus-replay --server http://127.0.0.1:7070 tail --after 1200 --task 01JD3Q0W6Y8M3V7Q9K2T5N4B1C",
		Flags: []cli.Flag{
			&cli.Uint64Flag{Name: "after", EnvVars: env("tail", "after"),
				Usage: "start after global sequence `SEQ` (default: only new events)"},
			&cli.BoolFlag{Name: "from-start", EnvVars: env("tail", "from-start"), Usage: "start at the first event of the log"},
			&cli.StringSliceFlag{Name: "task", EnvVars: env("tail", "task"), Usage: "only events of `TASK` (repeatable)"},
			&cli.StringSliceFlag{Name: "type", EnvVars: env("tail", "type"), Usage: "only events of `TYPE` (repeatable)"},
			&cli.IntFlag{Name: "count", EnvVars: env("tail", "count"), Usage: "exit after printing `N` events (0: never)"},
			&cli.BoolFlag{Name: "no-reconnect", EnvVars: env("tail", "no-reconnect"), Usage: "exit when the stream ends instead of reconnecting"},
		},
		Action: func(c *cli.Context) error {
			if err := exactArgs(c); err != nil {
				return err
			}
			g := readGlobals(c)
			if g.server == "" {
				return usagef("tail follows a running daemon: give --server URL (or PEGASUS_SERVER)")
			}
			if g.dataDir != "" || g.file != "" {
				return usagef("tail reads only from --server")
			}
			cl, err := newClient(g.server, g.token)
			if err != nil {
				return err
			}
			t := &tailer{
				c: cl, p: newPrinter(std, g), count: c.Int("count"), reconnect: !c.Bool("no-reconnect"),
				tasks: set(splitList(c.StringSlice("task"))), types: set(splitList(c.StringSlice("type"))),
				backoff: std.retryWait, warn: func(format string, args ...any) { fmt.Fprintf(std.err, format, args...) },
			}
			after := c.Uint64("after")
			if !c.IsSet("after") && !c.Bool("from-start") {
				// "Only new events": start after the current head.
				_, head, err := fetchEvents(c.Context, cl, 0, 1)
				if err != nil {
					return err
				}
				after = head
			}
			t.after = &after
			if t.backoff == nil {
				t.backoff = defaultBackoff
			}
			if len(t.tasks) == 1 {
				for id := range t.tasks {
					t.only = id // let the server filter too
				}
			}
			err = t.run(c.Context)
			if errors.Is(err, context.Canceled) || errors.Is(err, errTailDone) {
				return nil // Ctrl-C or --count: the normal ways to stop
			}
			return err
		},
	}
}

func set(vals []string) map[string]bool {
	if len(vals) == 0 {
		return nil
	}
	m := map[string]bool{}
	for _, v := range vals {
		m[v] = true
	}
	return m
}

// errTailDone ends tail after --count events.
var errTailDone = errors.New("tail: count reached")

// tailer follows the daemon's event stream.
type tailer struct {
	c         *client.Client
	p         *printer
	after     *uint64 // resume point: the last sequence seen
	only      string  // ask the server for this stream only, if set
	count     int
	printed   int
	reconnect bool
	tasks     map[string]bool
	types     map[string]bool
	// backoff returns how long to wait before reconnect attempt n (from
	// 1); tests make it zero.
	backoff func(n int) time.Duration
	warn    func(format string, args ...any)
}

func defaultBackoff(n int) time.Duration {
	d := time.Duration(1<<min(n-1, 5)) * 500 * time.Millisecond // 0.5s, 1s, 2s ... 16s
	return d
}

func (t *tailer) run(ctx context.Context) error {
	for attempt := 0; ; {
		err := t.stream(ctx)
		if errors.Is(err, errTailDone) || ctx.Err() != nil {
			return err
		}
		var ke *kindError
		if errors.As(err, &ke) && ke.kind == errSource && attempt == 0 && t.printed == 0 {
			return err // never connected at all: say so instead of retrying forever
		}
		if !t.reconnect {
			if errors.Is(err, errStreamEnded) {
				return nil
			}
			return err
		}
		attempt++
		wait := t.backoff(attempt)
		t.warn("pegasus-replay: stream interrupted (%v); reconnecting in %s, resuming after seq %d\n", err, wait, *t.after)
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			case <-timer.C:
			}
		}
		if t.printed > 0 {
			attempt = 0
		}
	}
}

// errStreamEnded is how a stream that closed cleanly is reported.
var errStreamEnded = errors.New("the server closed the stream")

// stream opens the SSE stream once and prints events until it ends.
func (t *tailer) stream(ctx context.Context) error {
	sub := t.c.Subscribe(client.StreamOptions{AfterSeq: *t.after, Stream: t.only})
	defer sub.Close()
	for {
		e, err := sub.Next(ctx)
		switch {
		case err == client.ErrStreamEnded:
			return errStreamEnded
		case errors.Is(err, client.ErrStreamEnded):
			return err // the connection broke
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return serverErr(t.c, "/v1/events/stream", err)
		}
		ev, err := replay.ParseEventJSON(replay.EventJSON(e))
		if err != nil {
			t.warn("pegasus-replay: skipping an event the server sent that does not decode: %v\n", err)
			continue
		}
		seq := ev.Seq
		t.after = &seq
		if !t.match(ev) {
			continue
		}
		if err := t.print(ev); err != nil {
			return err
		}
		t.printed++
		if t.count > 0 && t.printed >= t.count {
			return errTailDone
		}
	}
}

func (t *tailer) match(ev eventlog.Event) bool {
	return (t.tasks == nil || t.tasks[ev.Stream]) && (t.types == nil || t.types[ev.Type])
}

func (t *tailer) print(ev eventlog.Event) error {
	if t.p.json {
		b, err := replay.MarshalEvent(ev)
		if err != nil {
			return err
		}
		t.p.Printf("%s\n", b)
		return nil
	}
	j := toEventJSON(ev)
	t.p.Printf("%-8d %s  %-16s %s %s\n", ev.Seq, fmtTime(ev.Time), streamLabel(ev.Stream),
		t.p.paint(typeColour(ev.Type), fmt.Sprintf("%-20s", ev.Type)), sanitize(eventSummary(j)))
	return nil
}
