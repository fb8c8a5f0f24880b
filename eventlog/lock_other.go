//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package eventlog

import "os"

// lockShared is a no-op where POSIX record locks are unavailable: read-only
// opens then rely on the in-process registry alone.
func lockShared(*os.File) error { return nil }
