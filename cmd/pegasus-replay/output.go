package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/pegasus-engine/pegasus/internal/cliconv"
)

// printer writes a command's result: human text (aligned columns, colour on
// a terminal only) or, with --json, one stable JSON document.
type printer struct {
	w     io.Writer
	json  bool
	color bool
	width int // terminal columns; 0: do not cut
}

// newPrinter decides how to print for this invocation. Colour needs all of:
// no --json, no --no-color, NO_COLOR unset or empty (https://no-color.org),
// TERM not "dumb", and stdout a terminal.
func newPrinter(std *stdio, g globals) *printer {
	color := !g.json && !g.noColor && std.outTTY &&
		std.getenv("NO_COLOR") == "" && std.getenv("TERM") != "dumb"
	p := &printer{w: std.out, json: g.json, color: color}
	if std.outTTY && std.width != nil {
		p.width = std.width()
	}
	return p
}

// JSON writes v as one indented JSON document followed by a newline.
func (p *printer) JSON(v any) error {
	enc := json.NewEncoder(p.w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Printf writes human text.
func (p *printer) Printf(format string, args ...any) {
	fmt.Fprintf(p.w, format, args...)
}

// colour is an ANSI foreground colour. Every code is five bytes long, and
// so is the reset (39, the default foreground): a painted cell is always ten
// bytes longer than its text, which keeps tabwriter's columns aligned as
// long as a column is painted in every row or in none (table enforces it).
type colour string

const (
	plain   colour = "\x1b[39m"
	red     colour = "\x1b[31m"
	green   colour = "\x1b[32m"
	yellow  colour = "\x1b[33m"
	blue    colour = "\x1b[34m"
	magenta colour = "\x1b[35m"
	cyan    colour = "\x1b[36m"
	grey    colour = "\x1b[90m"
)

// paint wraps s in c when colour is on.
func (p *printer) paint(c colour, s string) string {
	if !p.color {
		return s
	}
	return string(c) + s + string(plain)
}

// stateColour is how a state reads at a glance: green done, red failed,
// yellow waiting on a human, cyan working.
func stateColour(s string) colour {
	switch s {
	case "completed":
		return green
	case "failed":
		return red
	case "suspended":
		return yellow
	case "reasoning", "acting":
		return cyan
	}
	return plain
}

// cell is one table cell; a zero colour means plain.
type cell struct {
	text string
	c    colour
}

// table collects rows and prints them in aligned columns with
// text/tabwriter. Columns listed in painted are coloured in every row
// (including the header, in plain), which is what keeps them aligned.
type table struct {
	header  []string
	rows    [][]cell
	painted map[int]bool
}

func newTable(header ...string) *table {
	return &table{header: header, painted: map[int]bool{}}
}

// row appends a row of plain cells.
func (t *table) row(cells ...string) {
	r := make([]cell, len(cells))
	for i, s := range cells {
		r[i] = cell{text: s}
	}
	t.rows = append(t.rows, r)
}

// rowc appends a row of cells that may be coloured; a column with a coloured
// cell in any row is painted in every row.
func (t *table) rowc(cells ...cell) {
	for i, c := range cells {
		if c.c != "" && c.c != plain {
			t.painted[i] = true
		}
	}
	t.rows = append(t.rows, cells)
}

func (t *table) print(p *printer) error {
	t.fit(p.width)
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	line := func(cells []cell) {
		var b strings.Builder
		for i, c := range cells {
			if i > 0 {
				b.WriteByte('\t')
			}
			text := sanitize(c.text)
			if t.painted[i] {
				col := c.c
				if col == "" {
					col = plain
				}
				text = p.paint(col, text)
			}
			b.WriteString(text)
		}
		b.WriteByte('\n')
		io.WriteString(tw, b.String())
	}
	if len(t.header) > 0 {
		h := make([]cell, len(t.header))
		for i, s := range t.header {
			h[i] = cell{text: s}
		}
		line(h)
	}
	for _, r := range t.rows {
		line(r)
	}
	return tw.Flush()
}

// fit cuts the last column so that rows fit in width columns (0: leave
// them). The other columns are never cut: they are short and needed.
func (t *table) fit(width int) {
	if width <= 0 {
		return
	}
	var widths []int
	measure := func(i int, s string) {
		for len(widths) <= i {
			widths = append(widths, 0)
		}
		widths[i] = max(widths[i], utf8.RuneCountInString(sanitize(s)))
	}
	for i, h := range t.header {
		measure(i, h)
	}
	last := 0
	for _, r := range t.rows {
		for i, c := range r {
			measure(i, c.text)
		}
		last = max(last, len(r)-1)
	}
	used := 0
	for i := 0; i < last && i < len(widths); i++ {
		used += widths[i] + 2
	}
	room := max(width-used-1, 24)
	for _, r := range t.rows {
		if len(r) > 0 {
			r[len(r)-1].text = truncate(r[len(r)-1].text, room)
		}
	}
}

// sanitize keeps a cell on one line and free of tabs and terminal escapes
// that recorded text (model output, tool results) might carry.
func sanitize(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return s
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t' || r == '\r':
			return ' '
		case r < 0x20 || r == 0x7f:
			return -1
		}
		return r
	}, s)
}

// truncate shortens s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	s = sanitize(s)
	if n <= 0 {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Time formats used in human output. JSON always uses RFC 3339 with
// nanoseconds in UTC (encoding/json's time.Time).
const humanTime = cliconv.HumanTime

func fmtTime(t time.Time) string { return cliconv.Time(t) }

// fmtDelta renders the time since the previous event: "+1.250s", "+3m02s".
func fmtDelta(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDelta(-d)[1:]
	case d < time.Minute:
		return fmt.Sprintf("+%.3fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("+%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("+%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// fmtAge renders how long ago t was, relative to now, coarsely: "3d", "4h",
// "12m", "40s".
func fmtAge(now, t time.Time) string { return cliconv.Age(now, t) }
