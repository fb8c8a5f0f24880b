package cliconv

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Version is what --version prints: the module version, the commit it was
// built from, the Go version, and the formats of what it writes, so that a
// bug report says exactly which build wrote a log.
//
//	pegasusd (devel)
//	  commit:        496d4921... (2026-11-22T18:00:00Z, modified)
//	  go:            go1.26.8 linux/amd64
//	  log format:    1
//	  pebble format: 024
func Version(prog string) string {
	version, commit, when, modified := "(unknown)", "(unknown)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	detail := when
	if modified {
		if detail != "" {
			detail += ", "
		}
		detail += "modified"
	}
	if detail != "" {
		commit += " (" + detail + ")"
	}
	return fmt.Sprintf("%s %s\n  commit:        %s\n  go:            %s %s/%s\n  log format:    %d\n  pebble format: %s\n",
		prog, version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH,
		eventlog.FormatVersion, eventlog.PebbleFormat())
}
