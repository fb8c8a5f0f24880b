package eventlog

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"

	"github.com/pegasus-engine/pegasus/internal/durable"
)

// walDamage is the first WAL record that does not read back.
type walDamage struct {
	file   string // base name, e.g. "000012.log"
	offset int64  // where the bad record starts: the end of the good prefix
	newest bool   // the newest WAL, whose unclean end may be a torn write
	err    error
}

func (d *walDamage) corruption(reason string) *CorruptionError {
	return &CorruptionError{File: d.file, Offset: d.offset, Reason: fmt.Sprintf("%s (%v)", reason, d.err)}
}

// scanWALs reads every WAL in dir, oldest first, and returns the first
// record that does not read back, or nil if every WAL ends cleanly. It
// names the damage for an operator; Pebble's own replay decides what is
// corrupt.
func scanWALs(fs vfs.FS, dir string) (*walDamage, error) {
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err != nil {
		return nil, err
	}
	for i, ll := range logs {
		if d := scanWAL(ll); d != nil {
			d.newest = i == len(logs)-1
			return d, nil
		}
	}
	return nil, nil
}

func scanWAL(ll wal.LogicalLog) *walDamage {
	r := ll.OpenForRead()
	defer r.Close()
	_, path := ll.SegmentLocation(0)
	for {
		rec, off, err := r.NextRecord()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if off.PhysicalFile != "" {
				path = off.PhysicalFile
			}
			return &walDamage{file: filepath.Base(path), offset: off.Physical, err: err}
		}
	}
}

// newestWAL returns the base name of the newest WAL in dir, or "".
func newestWAL(fs vfs.FS, dir string) string {
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err != nil || len(logs) == 0 {
		return ""
	}
	_, path := logs[len(logs)-1].SegmentLocation(0)
	return filepath.Base(path)
}

// walMissing reports whether the WAL numbered num (the newest the head
// marker recorded) is missing from dir while no later WAL exists, and
// returns its file name. Pebble deletes a WAL only once its memtable is
// flushed, which happens only after a newer WAL was created (a rotation,
// or Open creating its own), and it recycles only such obsolete WALs: the
// newest WAL it created is never removed by Pebble. Such a WAL gone with
// nothing newer was removed by something else, with whatever was written to
// it. The one window where Pebble itself deletes the marker's WAL before it
// creates the next (the flush of the replayed WALs in a writable
// pebble.Open) is closed by Open, which clears the marker's wal first. A
// num of 0 (unknown) is never missing.
func walMissing(fs vfs.FS, dir string, num uint64) (name string, missing bool, err error) {
	if num == 0 {
		return "", false, nil
	}
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err != nil {
		return "", false, err
	}
	name = wal.NumWAL(num).String() + ".log"
	for _, ll := range logs {
		if uint64(ll.Num) >= num {
			return name, false, nil
		}
	}
	return name, true, nil
}

// cutWALs keeps the good prefix of the damaged WAL and drops every later
// WAL, for Options.AcceptDataLoss. Every file it changes or removes is first
// copied into the directory lostDir (inside dir), so nothing is destroyed.
func cutWALs(fs vfs.FS, dir, lostDir string, d *walDamage) error {
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err != nil {
		return err
	}
	if err := fs.MkdirAll(lostDir, 0o700); err != nil {
		return err
	}
	cut := false
	for _, ll := range logs {
		_, path := ll.SegmentLocation(0)
		name := filepath.Base(path)
		if name == d.file {
			cut = true
		}
		if !cut {
			continue
		}
		data, err := readAll(fs, path)
		if err != nil {
			return err
		}
		if err := writeFileSynced(fs, fs.PathJoin(lostDir, name), data); err != nil {
			return err
		}
		if name == d.file {
			err = writeFileSynced(fs, path, data[:min(d.offset, int64(len(data)))])
		} else {
			err = fs.Remove(path)
		}
		if err != nil {
			return err
		}
	}
	if !cut {
		return fmt.Errorf("eventlog: damaged WAL %s not found", d.file)
	}
	return durable.SyncDir(fs, dir)
}

func readAll(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// writeFileSynced replaces path with data durably (internal/durable).
func writeFileSynced(fs vfs.FS, path string, data []byte) error {
	return durable.WriteFile(fs, path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
