//go:build linux

package eventlog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSmallLogSmallWAL: Pebble preallocates 110% of MemTableSize for every
// WAL; the log caps that, so a log of a few events takes about a megabyte
// of WAL on disk, not 35 MiB, whatever the memtable size.
func TestSmallLogSmallWAL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	l, err := Open(dir, &Options{MemTableSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer closeLog(t, l)
	for i := range 30 {
		if _, err := l.Append(context.Background(), "task", Exactly(uint64(i)), ev("STEP", "")); err != nil {
			t.Fatal(err)
		}
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var wal int64
	for _, e := range es {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		wal += fi.Sys().(*syscall.Stat_t).Blocks * 512
	}
	if wal == 0 || wal > 2*maxWALPrealloc {
		t.Fatalf("WALs of a 30-event log take %d bytes on disk, want at most %d", wal, 2*maxWALPrealloc)
	}
}
