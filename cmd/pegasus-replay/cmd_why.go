package main

import (
	"errors"

	"github.com/oklog/ulid/v2"
	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

// maxNodesFlag bounds a causation tree.
func maxNodesFlag(cmd string) cli.Flag {
	return &cli.IntFlag{Name: "max-nodes", Value: replay.DefaultMaxNodes, EnvVars: env(cmd, "max-nodes"),
		Usage: "stop the tree of consequences after `N` events"}
}

func whyCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "why",
		Usage:     "explain a task: the chain up to the input that started it, and every consequence",
		ArgsUsage: "TASK",
		Description: "Walks causation links: from the task's TASK_CREATED up to its root (normally the external\n" +
			"input: a message, webhook or schedule), then down from that root to every event it led to:\n" +
			"the task's events, memory writes, anything else. In the tree, a node with a single consequence\n" +
			"continues on the next line at the same indentation; several consequences branch with ├─ └─.\n\n" +
			"   pegasus-replay -d ./pegasus-data why 01JD3Q0W6Y8M3V7Q9K2T5N4B1C",
		Flags:        []cli.Flag{maxNodesFlag("why")},
		BashComplete: completeTaskIDs(std),
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, "TASK"); err != nil {
				return err
			}
			g := readGlobals(c)
			src, err := openSource(c.Context, std, g)
			if err != nil {
				return err
			}
			defer src.Close()
			id := parseTaskID(c.Args().First())
			w, err := replay.Explain(c.Context, src.reader, id, c.Int("max-nodes"))
			if err != nil {
				return taskErr(c.Context, src.reader, id, replay.Bound{}, err)
			}
			p := newPrinter(std, g)
			if p.json {
				return p.JSON(whyJSON{
					TaskID: w.TaskID, Chain: chainJSON(w.Chain), Missing: idString(w.Missing),
					Tree: toNodeJSON(w.Tree), Truncated: w.Truncated, Decisions: w.Decisions,
				})
			}
			created := ulid.ULID{}
			if len(w.Chain) > 0 {
				created = w.Chain[0].ID
			}
			printChain(p, "task "+w.TaskID+" was started by", w.Chain, w.Missing)
			if len(w.Decisions) > 0 {
				p.Printf("\nwhat the broker decided and the workers reported:\n")
				for _, d := range w.Decisions {
					p.Printf("  %s %s\n", seqLabel(d.Seq), d.Text)
				}
			}
			if w.Tree != nil {
				p.Printf("\neverything that followed from %s (%d events; <== is the task's creation):\n",
					seqLabel(w.Tree.Event.Seq), w.Tree.Size())
				printTree(p, w.Tree, created)
			}
			if w.Truncated {
				p.Printf("... cut at %d events (--max-nodes)\n", c.Int("max-nodes"))
			}
			return nil
		},
	}
}

func traceCommand(std *stdio) *cli.Command {
	return &cli.Command{
		Name:      "trace",
		Usage:     "trace one event: its causes up to the root and every consequence",
		ArgsUsage: "EVENT_ID",
		Description: "Like why, for any event: the chain of causation from the event up to its root input,\n" +
			"and the tree of events it caused (directly or not).\n\n" +
			"   pegasus-replay -d ./pegasus-data trace 01JD3Q0X2Q7J0Z8YB1W5C4F3DA",
		Flags: []cli.Flag{maxNodesFlag("trace")},
		Action: func(c *cli.Context) error {
			if err := exactArgs(c, "EVENT_ID"); err != nil {
				return err
			}
			g := readGlobals(c)
			id, err := parseEventID(c.Args().First())
			if err != nil {
				return err
			}
			src, err := openSource(c.Context, std, g)
			if err != nil {
				return err
			}
			defer src.Close()
			chain, missing, err := replay.Ancestors(c.Context, src.reader, id)
			if errors.Is(err, eventlog.ErrNotFound) {
				return notFoundf("unknown event %s", id)
			}
			if err != nil {
				return err
			}
			tree, truncated, err := replay.Descendants(c.Context, src.reader, id, c.Int("max-nodes"))
			if err != nil {
				return err
			}
			p := newPrinter(std, g)
			if p.json {
				return p.JSON(traceJSON{
					EventID: id.String(), Chain: chainJSON(chain), Missing: idString(missing),
					Tree: toNodeJSON(tree), Truncated: truncated,
				})
			}
			printChain(p, "causes of "+id.String(), chain, missing)
			p.Printf("\nconsequences (%d events including itself):\n", tree.Size())
			printTree(p, tree, ulid.ULID{})
			if truncated {
				p.Printf("... cut at %d events (--max-nodes)\n", c.Int("max-nodes"))
			}
			return nil
		},
	}
}

// whyJSON is the --json output of why. Chain runs from the task's
// TASK_CREATED up to the root; Tree is every consequence of the root.
type whyJSON struct {
	TaskID    string      `json:"task_id"`
	Chain     []eventJSON `json:"chain"`
	Missing   string      `json:"missing_causation,omitempty"`
	Tree      *nodeJSON   `json:"tree"`
	Truncated bool        `json:"truncated"`
	// Decisions words a broker task's history (absent for other tasks).
	Decisions []replay.Decision `json:"decisions,omitempty"`
}

// traceJSON is the --json output of trace. Chain runs from the event up to
// the root; Tree is every consequence of the event.
type traceJSON struct {
	EventID   string      `json:"event_id"`
	Chain     []eventJSON `json:"chain"`
	Missing   string      `json:"missing_causation,omitempty"`
	Tree      *nodeJSON   `json:"tree"`
	Truncated bool        `json:"truncated"`
}

func chainJSON(evs []eventlog.Event) []eventJSON {
	out := make([]eventJSON, len(evs))
	for i, ev := range evs {
		out[i] = toEventJSON(ev)
	}
	return out
}

// printChain prints a causal chain root first, so it reads as a story:
// the input, then what it caused, down to the event asked about.
func printChain(p *printer, title string, chain []eventlog.Event, missing ulid.ULID) {
	p.Printf("%s (root first):\n", title)
	if missing != (ulid.ULID{}) {
		p.Printf("  %s\n", p.paint(yellow, "? "+missing.String()+" (a cause that is not in this source)"))
	}
	for i := len(chain) - 1; i >= 0; i-- {
		p.Printf("  %s\n", eventLine(p, chain[i]))
	}
}
