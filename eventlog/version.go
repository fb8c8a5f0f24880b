package eventlog

import "github.com/cockroachdb/pebble/v2"

// PebbleFormat is the Pebble format major version of the store this build
// writes, for --version and bug reports. Read it here rather than from the
// Options, so that a change of format in options.go needs no change in the
// programs that print it.
func PebbleFormat() pebble.FormatMajorVersion { return pebble.FormatNewest }
