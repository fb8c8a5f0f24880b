package cliconv

import (
	"fmt"
	"strconv"
	"time"

	"github.com/pegasus-engine/pegasus/projection"
)

// Listing conventions: oldest first (creation order) unless --desc, and
// this many tasks a page (the API's default too).
const PageSize = 50

// HumanTime is the layout of times in human output, always in UTC. JSON
// output uses RFC 3339 with nanoseconds in UTC.
const HumanTime = "2006-01-02 15:04:05.000"

// Time formats t for people: UTC, or "-" for the zero time.
func Time(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(HumanTime)
}

// Colour reports whether human output may be coloured: not --json, not
// --no-color, NO_COLOR unset or empty, TERM not "dumb", and stdout a
// terminal.
func Colour(getenv func(string) string, json, noColor, stdoutTTY bool) bool {
	return !json && !noColor && stdoutTTY && getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
}

// TaskColumns are the columns of a task listing, in both programs.
var TaskColumns = []string{"TASK", "STATE", "MACHINE", "TYPE", "PRI", "AGE", "ITER", "EVENTS", "SOURCE", "INPUT"}

// TaskRow renders one task of a listing as the cells under TaskColumns.
// queued marks a task waiting for a slot; now is for the AGE column.
func TaskRow(s projection.Summary, queued bool, now time.Time) []string {
	input := s.Input
	if s.Error != "" {
		input = "error: " + s.Error
	}
	state := string(s.State)
	if queued {
		state += " (queued)"
	}
	return []string{s.ID, state, OrDash(s.Machine), OrDash(s.Type), strconv.Itoa(s.Priority), Age(now, s.CreatedAt),
		strconv.Itoa(s.Iteration), strconv.FormatUint(s.Events, 10), OrDash(s.Source), input}
}

// MoreLine is what a listing prints under a page that has a next one.
func MoreLine(cursor string) string {
	return fmt.Sprintf("more: --cursor %s (or --all)", cursor)
}

// OrDash is s, or "-" for an empty cell of a table.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Age renders how long ago t was, relative to now, coarsely: "3d", "4h",
// "12m", "40s".
func Age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
