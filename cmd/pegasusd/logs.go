package main

import (
	"io"
	"os"

	"golang.org/x/term"
)

// defaultLogFormat resolves an unset --log-format: text for a person at a
// terminal, json for a log collector everywhere else.
func defaultLogFormat(format string, w io.Writer) string {
	if format != "" {
		return format
	}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return "text"
	}
	return "json"
}
