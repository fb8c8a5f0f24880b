package replay

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the random histories (0: derived from the clock; the seed used is logged)")

// testSeed returns the seed for a randomized test and logs it, so that a
// failure can be replayed with -seed.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed %d)", s, s)
	return s
}

// openLog opens (creating) a log in dir on fs.
func openLog(t testing.TB, fs vfs.FS, dir string, readOnly bool) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open(dir, &eventlog.Options{FS: fs, ReadOnly: readOnly})
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	return l
}

// logWith returns a log on a fresh in-memory filesystem holding evs.
func logWith(t testing.TB, evs []eventlog.Event) (*eventlog.Log, vfs.FS) {
	t.Helper()
	fs := vfs.NewMem()
	l := openLog(t, fs, "db", false)
	if err := replaytest.AppendAll(context.Background(), l, evs, 0); err != nil {
		t.Fatal(err)
	}
	return l, fs
}

// mustMem wraps events in a MemLog.
func mustMem(t testing.TB, evs []eventlog.Event) *MemLog {
	t.Helper()
	m, err := NewMemLog(evs...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// foldMem folds src from zero into a new in-memory View.
func foldMem(t testing.TB, src Source) *View {
	t.Helper()
	v, err := NewView(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Fold(context.Background(), v, src, FoldOptions{}); err != nil {
		t.Fatalf("fold: %v", err)
	}
	return v
}

func dump(t testing.TB, v *View) *Dump {
	t.Helper()
	d, err := v.Dump(context.Background())
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return d
}

// sameState fails the test if two dumps are not byte-identical.
func sameState(t testing.TB, what string, want, got *Dump) {
	t.Helper()
	if bytes.Equal(want.Bytes(), got.Bytes()) {
		return
	}
	t.Fatalf("%s: state differs from the fold from zero:\n%s", what, strings.Join(want.Diff(got, 10), "\n"))
}

// crashMem is a crashable in-memory file system whose Link and CrashClone
// exclude each other, and whose crash images are crashMems too. Pebble's
// MemFS (v2.1.7) read-locks its clone lock twice in Link, so a CrashClone
// that comes between the two (a crash image taken while an ingest links
// its sstable) deadlocks both; TestCrashDuringCheckpoint hung on it once.
type crashMem struct {
	*vfs.MemFS
	mu sync.Mutex
}

func newCrashMem() *crashMem { return &crashMem{MemFS: vfs.NewCrashableMem()} }

// Link is vfs.MemFS.Link, never during a CrashClone.
func (m *crashMem) Link(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.MemFS.Link(oldname, newname)
}

// CrashClone is vfs.MemFS.CrashClone, never during a Link.
func (m *crashMem) CrashClone(cfg vfs.CrashCloneCfg) *crashMem {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &crashMem{MemFS: m.MemFS.CrashClone(cfg)}
}
