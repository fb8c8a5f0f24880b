package bench

import "github.com/cockroachdb/pebble/v2"

// CompactDir flushes and compacts the whole key space of a closed Pebble
// database in dir, so that what remains on disk is the data set itself
// (pegasus-bench -tasks measures a daemon's data directory with it).
func CompactDir(dir string) error { return compactDir(dir) }

// DirSize is the disk space used by the files under dir (allocated
// blocks, so preallocated WAL space counts).
func DirSize(dir string) int64 { return dirSize(dir) }

// OpenPebble opens the Pebble database in dir without its logging.
func OpenPebble(dir string, readOnly bool) (*pebble.DB, error) {
	return pebble.Open(dir, &pebble.Options{Logger: quietLogger{}, ReadOnly: readOnly})
}
