//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package eventlog

import (
	"io"
	"os"
	"syscall"
)

// lockShared takes a non-blocking POSIX shared (read) lock on the whole file.
// It conflicts with the exclusive lock Pebble's writer holds, and with
// nothing else, so any number of read-only opens can share a directory.
func lockShared(f *os.File) error {
	lk := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: io.SeekStart}
	return syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
}
