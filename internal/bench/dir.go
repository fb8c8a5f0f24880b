package bench

// CompactDir flushes and compacts the whole key space of a closed Pebble
// database in dir, so that what remains on disk is the data set itself
// (pegasus-bench -tasks measures a daemon's data directory with it).
func CompactDir(dir string) error { return compactDir(dir) }

// DirSize is the disk space used by the files under dir (allocated
// blocks, so preallocated WAL space counts).
func DirSize(dir string) int64 { return dirSize(dir) }
