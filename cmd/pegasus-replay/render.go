package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

// eventJSON is how every command shows one event in --json output (show,
// why, trace, fork, tail): the one JSON form of an event (docs/events.md),
// the same as the daemon's API and an export line, so any of them reads
// back with --file or fork --inject.
type eventJSON = replay.EventJSON

// toEventJSON is the one encoder of the form: it decodes ev through
// replay.Decode (the decoder the fold uses) and summarizes it with
// replay.Summarize (fsm.DescribeEvent, what the fsm tests print).
func toEventJSON(ev eventlog.Event) eventJSON { return replay.NewEventJSON(ev) }

// idString prints a ULID, "" for the zero id.
func idString(id ulid.ULID) string {
	if id == (ulid.ULID{}) {
		return ""
	}
	return id.String()
}

// shortID shows the last 8 characters of a ULID (its random part), enough
// to tell events apart on one screen; --json always prints full ids.
func shortID(id ulid.ULID) string {
	if id == (ulid.ULID{}) {
		return "-"
	}
	s := id.String()
	return "…" + s[len(s)-8:]
}

// seqLabel is "#12", how human output names an event by its sequence.
func seqLabel(seq uint64) string { return "#" + strconv.FormatUint(seq, 10) }

// causeLabel names ev's causation for the human timeline: "#seq" of the
// causing event, looked up in known or else in the reader, or its short id
// when the source does not hold it.
func causeLabel(ctx context.Context, r replay.Reader, known map[ulid.ULID]uint64, ev eventlog.Event) string {
	if ev.Causation == (ulid.ULID{}) {
		return "-"
	}
	if seq, ok := known[ev.Causation]; ok {
		return seqLabel(seq)
	}
	if c, err := r.Get(ctx, ev.Causation); err == nil {
		known[ev.Causation] = c.Seq
		return seqLabel(c.Seq)
	}
	return shortID(ev.Causation) + "?"
}

// nodeJSON is a causation tree in --json output.
type nodeJSON struct {
	Event    eventJSON   `json:"event"`
	Children []*nodeJSON `json:"children,omitempty"`
}

func toNodeJSON(n *replay.Node) *nodeJSON {
	if n == nil {
		return nil
	}
	j := &nodeJSON{Event: toEventJSON(n.Event)}
	for _, c := range n.Children {
		j.Children = append(j.Children, toNodeJSON(c))
	}
	return j
}

// eventLine is one event in a tree or chain: "#12 TYPE stream summary".
func eventLine(p *printer, ev eventlog.Event) string {
	j := toEventJSON(ev)
	var b strings.Builder
	b.WriteString(p.paint(grey, seqLabel(ev.Seq)))
	b.WriteByte(' ')
	b.WriteString(p.paint(typeColour(ev.Type), ev.Type))
	b.WriteByte(' ')
	b.WriteString(streamLabel(ev.Stream))
	b.WriteByte(' ')
	b.WriteString(fmtTime(ev.Time))
	if sum := eventSummary(j); sum != "" {
		b.WriteByte(' ')
		b.WriteString(sanitize(sum))
	}
	return b.String()
}

// toolFacts are the fields of a tool call's events that say where the
// tool ran (TOOL_CALL_STARTED, TOOL_CALL_COMPLETED, TOOL_CALL_FAILED),
// read from the decoded body's JSON so that a log from before they
// existed reads as built-in.
type toolFacts struct {
	Source string `json:"source"` // "" or "builtin", "go", "mcp:SERVER", "worker:CAPABILITY"
	Task   string `json:"task"`   // the broker task of a worker tool's call
	Handle string `json:"handle"` // an MCP server's durable task handle
	Parts  []struct {
		Type      string `json:"type"`
		Truncated bool   `json:"truncated"`
	} `json:"parts"` // a result's content that is not text
}

// eventSummary is an event's one-line summary, and for a tool call where
// its tool ran, when not built in (source=mcp:everything,
// source=worker:shout task=ID), an MCP task's handle and the types of a
// result's parts (parts=image,resource; "(truncated)" when one was cut to
// the event size limit). A fact the summary already states is not
// repeated.
func eventSummary(j eventJSON) string {
	switch fsm.EventType(j.Type) {
	case fsm.ToolCallStarted, fsm.ToolCallCompleted, fsm.ToolCallFailed:
	default:
		return j.Summary
	}
	var f toolFacts
	if len(j.Data) == 0 || json.Unmarshal(j.Data, &f) != nil {
		return j.Summary
	}
	out := j.Summary
	add := func(key, value string) {
		if value != "" && !strings.Contains(j.Summary, key+"=") {
			if out != "" {
				out += " "
			}
			out += key + "=" + value
		}
	}
	if f.Source != "builtin" {
		add("source", f.Source)
	}
	add("task", f.Task)
	add("handle", f.Handle)
	if len(f.Parts) > 0 {
		types, cut := make([]string, 0, len(f.Parts)), false
		for _, p := range f.Parts {
			types = append(types, p.Type)
			cut = cut || p.Truncated
		}
		v := strings.Join(types, ",")
		if cut {
			v += "(truncated)"
		}
		add("parts", v)
	}
	return out
}

// streamLabel shortens a task stream (a ULID) for human output; system
// streams ("$inputs") are short already.
func streamLabel(s string) string {
	if id, err := ulid.ParseStrict(s); err == nil {
		return "task:" + shortID(id)
	}
	return s
}

// typeColour picks a colour by what an event means: failures red, inputs
// and messages blue, model and tool facts grey, completion green.
func typeColour(t string) colour {
	switch fsm.EventType(t) {
	case fsm.TaskFailed, fsm.ToolCallFailed:
		return red
	case fsm.TaskCompleted, fsm.StepCompleted, fsm.ToolCallCompleted:
		return green
	case fsm.MessageReceived, fsm.WebhookTriggered, fsm.ScheduleFired:
		return blue
	case fsm.NeedMoreInfo, fsm.TaskSuspended, fsm.TaskResumed:
		return yellow
	case fsm.TaskCreated, fsm.ReasonDone:
		return magenta
	}
	return plain
}

// printTree writes a causation tree. A node with one child continues at the
// same indentation (a chain reads top to bottom); only a node with several
// children indents them, with ├─ and └─, so a long task does not march off
// the right edge of the screen.
func printTree(p *printer, n *replay.Node, mark ulid.ULID) {
	var walk func(n *replay.Node, prefix string, first string)
	walk = func(n *replay.Node, prefix, first string) {
		line := eventLine(p, n.Event)
		if mark != (ulid.ULID{}) && n.Event.ID == mark {
			line += "  " + p.paint(yellow, "<==")
		}
		p.Printf("%s%s\n", first, line)
		switch len(n.Children) {
		case 0:
		case 1:
			walk(n.Children[0], prefix, prefix)
		default:
			for i, c := range n.Children {
				if i == len(n.Children)-1 {
					walk(c, prefix+"   ", prefix+"└─ ")
				} else {
					walk(c, prefix+"│  ", prefix+"├─ ")
				}
			}
		}
	}
	walk(n, "", "")
}
