package eventlog

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// errWriteRefused is what readOnlyFS returns for any mutating call. Pebble
// does not make such calls when opened ReadOnly; the wrapper makes sure a
// future Pebble change cannot silently modify a checkpoint or a crashed
// daemon's directory.
var errWriteRefused = errors.New("eventlog: read-only open refused to modify the directory")

// readOnlyFS wraps an FS for Options.ReadOnly: mutations fail, and Lock takes
// a shared lock instead of creating and exclusively locking the LOCK file.
type readOnlyFS struct {
	vfs.FS
	dir string
}

func (fs readOnlyFS) Create(string, vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, errWriteRefused
}
func (fs readOnlyFS) Link(string, string) error { return errWriteRefused }
func (fs readOnlyFS) OpenReadWrite(string, vfs.DiskWriteCategory, ...vfs.OpenOption) (vfs.File, error) {
	return nil, errWriteRefused
}
func (fs readOnlyFS) Remove(string) error                { return errWriteRefused }
func (fs readOnlyFS) RemoveAll(string) error             { return errWriteRefused }
func (fs readOnlyFS) Rename(string, string) error        { return errWriteRefused }
func (fs readOnlyFS) MkdirAll(string, os.FileMode) error { return errWriteRefused }
func (fs readOnlyFS) ReuseForWrite(string, string, vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, errWriteRefused
}
func (fs readOnlyFS) Unwrap() vfs.FS { return fs.FS }

// Lock is called by Pebble for the LOCK file. A read-only open must see
// whether a writer holds the directory (reading files a live writer is
// compacting away is unsafe) without creating or truncating anything.
func (fs readOnlyFS) Lock(name string) (io.Closer, error) {
	if _, err := fs.FS.Stat(name); err != nil {
		if os.IsNotExist(err) || errors.Is(err, os.ErrNotExist) {
			// No writer ever ran here (e.g. a checkpoint copy): nothing to
			// exclude, and creating the file would modify the directory.
			return nopCloser{}, nil
		}
		return nil, err
	}
	if fs.FS == vfs.Default {
		return sharedLock(name)
	}
	// In-memory filesystems only exclude within this process, where
	// delegating is harmless.
	return fs.FS.Lock(name)
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// Process-wide registry of directories open on the OS filesystem.
//
// POSIX record locks belong to the process, not to the file descriptor:
// taking a shared lock on a file this process already holds exclusively
// would downgrade the writer's lock, and closing any descriptor of the file
// drops every lock the process holds on it. So within one process, the
// registry arbitrates, and one descriptor per directory carries the shared
// lock for all readers.
var osLocks = struct {
	sync.Mutex
	dirs map[string]*osDirLock
}{dirs: map[string]*osDirLock{}}

type osDirLock struct {
	writer  bool
	readers int
	shared  *os.File
}

func lockKey(name string) string {
	abs, err := filepath.Abs(name)
	if err != nil {
		return name
	}
	return abs
}

// acquireDir is called by Open before Pebble opens dir on the OS filesystem.
// It returns a release function to call after the DB is closed.
func acquireDir(fs vfs.FS, dir string, readOnly bool) (release func(), err error) {
	if fs != vfs.Default {
		return func() {}, nil
	}
	key := lockKey(dir)
	osLocks.Lock()
	defer osLocks.Unlock()
	l := osLocks.dirs[key]
	if l == nil {
		l = &osDirLock{}
		osLocks.dirs[key] = l
	}
	if l.writer || (!readOnly && l.readers > 0) {
		if l.readers == 0 && !l.writer {
			delete(osLocks.dirs, key)
		}
		return nil, ErrLocked
	}
	if readOnly {
		l.readers++
	} else {
		l.writer = true
	}
	return func() {
		osLocks.Lock()
		defer osLocks.Unlock()
		if readOnly {
			l.readers--
		} else {
			l.writer = false
		}
		if l.readers == 0 && !l.writer {
			if l.shared != nil {
				l.shared.Close()
			}
			delete(osLocks.dirs, key)
		}
	}, nil
}

// sharedLock takes (or joins) this process's shared lock on the LOCK file.
// The registry entry was created by acquireDir; the descriptor lives until
// the last reader releases the directory.
func sharedLock(name string) (io.Closer, error) {
	key := lockKey(filepath.Dir(name))
	osLocks.Lock()
	defer osLocks.Unlock()
	l := osLocks.dirs[key]
	if l == nil {
		return nil, errors.New("eventlog: internal error: directory not registered")
	}
	if l.shared != nil {
		return nopCloser{}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	if err := lockShared(f); err != nil {
		f.Close()
		return nil, err
	}
	l.shared = f
	return nopCloser{}, nil
}

// isLockConflict reports whether err from locking the directory means that
// someone else holds it, as opposed to an I/O or permission error.
func isLockConflict(err error) bool {
	if errors.Is(err, ErrLocked) {
		return true
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return false
	}
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process")
}
