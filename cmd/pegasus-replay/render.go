package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// eventJSON is how every command shows one event in --json output (show,
// why, trace, fork, tail). Stable: fields are only ever added.
type eventJSON struct {
	Seq         uint64            `json:"seq"`
	ID          string            `json:"event_id"`
	Stream      string            `json:"stream"`
	Version     uint64            `json:"version"`
	Type        string            `json:"type"`
	Time        time.Time         `json:"time"`
	Causation   string            `json:"causation,omitempty"`
	Correlation string            `json:"correlation,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// Summary is fsm.DescribeEvent without the leading type: the one line a
	// human reads.
	Summary string `json:"summary"`
	// Body is the decoded body: the fsm (or memory) body type's JSON, or
	// for "$system" events the small msgpack map they carry; absent when
	// the body does not decode or there is none.
	Body any `json:"body,omitempty"`
	// DecodeError says why the body did not decode.
	DecodeError string `json:"decode_error,omitempty"`
}

// idString prints a ULID, "" for the zero id.
func idString(id ulid.ULID) string {
	if id == (ulid.ULID{}) {
		return ""
	}
	return id.String()
}

// toEventJSON decodes ev through replay.Decode (the decoder the fold uses)
// and describes it with fsm.DescribeEvent (what the fsm tests print).
func toEventJSON(ev eventlog.Event) eventJSON {
	j := eventJSON{
		Seq: ev.Seq, ID: idString(ev.ID), Stream: ev.Stream, Version: ev.Version, Type: ev.Type,
		Time: ev.Time.UTC(), Causation: idString(ev.Causation), Correlation: idString(ev.Correlation),
		Metadata: ev.Metadata,
	}
	dec, err := replay.Decode(ev)
	if err != nil {
		j.DecodeError = err.Error()
	}
	if dec.Body != nil {
		j.Body = dec.Body
	}
	j.Summary = summarize(dec, err)
	if dec.Body == nil && err == nil && len(ev.Body) > 0 {
		// Reserved streams ($system) carry bodies no fold interprets.
		var m map[string]any
		if codec.Decode(ev.Body, &m) == nil && len(m) > 0 {
			j.Body, j.Summary = m, describeMap(m)
		}
	}
	return j
}

// describeMap renders a generic body as sorted key=value pairs.
func describeMap(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := fmt.Sprint(m[k])
		if s, ok := m[k].(string); ok {
			v = quoteText(s)
		}
		parts[i] = k + "=" + v
	}
	return strings.Join(parts, " ")
}

// summarize is fsm.DescribeEvent without the event type it starts with
// (the type has its own column).
func summarize(dec fsm.Event, decodeErr error) string {
	if decodeErr != nil && dec.Body == nil {
		return "(body does not decode: " + decodeErr.Error() + ")"
	}
	if s, ok := describeMemory(dec.Body); ok {
		return s
	}
	s := fsm.DescribeEvent(dec)
	s = strings.TrimPrefix(s, string(dec.Type))
	return strings.TrimSpace(s)
}

// describeMemory renders the bodies of memory events, which belong to
// package projection and which fsm.DescribeEvent does not know, in the same
// key=value style.
func describeMemory(b fsm.Body) (string, bool) {
	switch x := b.(type) {
	case *projection.MemoryWrittenBody:
		return fmt.Sprintf("path=%s content=%s", x.Path, quoteText(x.Content)), true
	case *projection.MemoryAppendedBody:
		return fmt.Sprintf("path=%s appended=%s", x.Path, quoteText(x.Content)), true
	case *projection.MemoryPatchedBody:
		return fmt.Sprintf("path=%s old=%s new=%s", x.Path, quoteText(x.Old), quoteText(x.New)), true
	case *projection.EpisodeRecordedBody:
		s := "title=" + quoteText(x.Title)
		if x.TaskID != "" {
			s += " task=" + x.TaskID
		}
		return s, true
	}
	return "", false
}

// quoteText quotes a free text cut to 72 runes, as fsm's descriptions do.
func quoteText(s string) string {
	if utf8.RuneCountInString(s) > 72 {
		s = string([]rune(s)[:72]) + "…"
	}
	return strconv.Quote(s)
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
	if j.Summary != "" {
		b.WriteByte(' ')
		b.WriteString(sanitize(j.Summary))
	}
	return b.String()
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
