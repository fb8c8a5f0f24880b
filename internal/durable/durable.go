// Package durable writes files that survive a power loss whole or not at
// all: written to a temporary file, synced, renamed into place, and the
// directory synced. The event log's head marker and retention's archives
// use it.
package durable

import (
	"errors"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// WriteFile replaces path with what write writes: into path+".tmp", synced
// and closed, renamed over path, then the directory synced. If any step
// fails, path is left as it was and the temporary file is removed (when
// the failure allows it).
func WriteFile(fs vfs.FS, path string, write func(w io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err != nil {
		if rerr := fs.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return errors.Join(err, rerr)
		}
		return err
	}
	return SyncDir(fs, fs.PathDir(path))
}

// SyncDir syncs directory dir, so that the entries created, renamed or
// removed in it are durable.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}
