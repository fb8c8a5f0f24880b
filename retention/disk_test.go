package retention

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

var (
	diskRounds = flag.Int("retention.disk.rounds", 8, "rounds of TestDiskLevelsOff (docs/benchmarks.md: 60)")
	diskTasks  = flag.Int("retention.disk.tasks", 80, "tasks appended per round in TestDiskLevelsOff (docs/benchmarks.md: 300)")
)

// TestDiskLevelsOff is the retention benchmark of docs/benchmarks.md: a
// steady load (the same number of tasks every round, about ten events
// each), a retention run after each
// round with a window of three rounds, and the data directory's size
// measured after each run. The live log holds about four rounds of tasks
// whatever the number of rounds, so its size levels off; the archive grows
// with the history. With the default flags it is short enough for CI and
// asserts the levelling; -v prints the curve.
//
//	go test ./retention -run TestDiskLevelsOff -v -retention.disk.rounds=60 -retention.disk.tasks=300
//
// The load is replaytest's generated tasks with their inputs written in
// the task's own stream (the daemon's flow); events on "$inputs" are left
// out, since retention keeps reserved streams. Long-term memory events
// ("$memory") are kept and are the residual growth the table shows.
func TestDiskLevelsOff(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data, archive := filepath.Join(dir, "data"), filepath.Join(dir, "archive")
	l, err := eventlog.Open(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	v, _, err := replay.Open(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	rounds, per := *diskRounds, *diskTasks
	g := replaytest.New(1, replaytest.Config{Tasks: 2 * rounds * per, Start: start, Finish: true, Concurrency: 16})
	var now time.Time
	var appended, memory int
	o := &Options{Window: 0, ArchiveDir: archive, Checkpoint: v.Checkpoint, Clock: func() time.Time { return now }}
	sizes, total := make([]int64, rounds), make([]int, rounds)
	kept := make([]int64, rounds) // of which WALs Pebble keeps for reuse
	t.Logf("%5s %10s %10s %10s %12s %12s", "round", "appended", "live", "$memory", "data MiB", "archive MiB")
	for r := range rounds {
		// One round: per tasks' worth of events, appended in batches.
		var roundStart time.Time
		for n := 0; n < per*10; {
			evs := g.Next(500)
			if evs == nil {
				break
			}
			n += len(evs)
			if roundStart.IsZero() {
				roundStart = evs[0].Time
			}
			if err := appendKeep(ctx, l, evs, &appended, &memory); err != nil {
				t.Fatal(err)
			}
			now = evs[len(evs)-1].Time
		}
		if r == 0 {
			o.Window = 3 * now.Sub(roundStart)
		}
		if _, err := replay.Fold(ctx, v, replay.FromLog(l), replay.FoldOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := Run(ctx, l, o); err != nil {
			t.Fatal(err)
		}
		live := liveEvents(t, l)
		settle(t, l)
		files := dirFiles(t, data)
		sizes[r], total[r], kept[r] = sum(files), appended, recycledWALs(files)
		t.Logf("%5d %10d %10d %10d %12.2f %12.2f", r+1, appended, live, memory, mib(sizes[r]), mib(sum(dirFiles(t, archive))))
	}
	rep, err := replay.Verify(ctx, l, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("verify after %d rounds: %v %s", rounds, err, rep.Summary())
	}
	// Levelling off: once the window has filled and the first archived
	// ranges are compacted (round 6), the live directory grows by less
	// than a quarter of the rate the history grows at (what still grows
	// is long-term memory, kept by design). The WALs that Pebble keeps for
	// reuse (at most three, a fixed allowance) are left out: they appear
	// whenever the memtable is switched, which an ingested checkpoint
	// overlapping the last run's deletions does.
	if rounds >= 8 {
		grew := float64(sizes[rounds-1]-kept[rounds-1])/float64(sizes[5]-kept[5]) - 1
		history := float64(total[rounds-1])/float64(total[5]) - 1
		if grew > history/4 {
			t.Fatalf("data directory %.2f MiB at round 6, %.2f MiB at round %d (+%.0f%%) while the history grew %.0f%%: not levelling off",
				mib(sizes[5]), mib(sizes[rounds-1]), rounds, 100*grew, 100*history)
		}
	}
}

// appendKeep appends generated events, dropping those on "$inputs" (see
// TestDiskLevelsOff), keeping their ids, times and bodies.
func appendKeep(ctx context.Context, l *eventlog.Log, evs []eventlog.Event, appended, memory *int) error {
	var as []eventlog.StreamAppend
	for _, ev := range evs {
		switch ev.Stream {
		case projection.InputsStream:
			continue
		case projection.MemoryStream:
			*memory++
		}
		*appended++
		if k := len(as); k > 0 && as[k-1].Stream == ev.Stream {
			as[k-1].Events = append(as[k-1].Events, ev)
			continue
		}
		as = append(as, eventlog.StreamAppend{Stream: ev.Stream, Expected: eventlog.Any, Events: []eventlog.Event{ev}})
	}
	if len(as) == 0 {
		return nil
	}
	_, err := l.AppendMulti(ctx, as...)
	return err
}

func liveEvents(t testing.TB, l *eventlog.Log) int {
	it := l.Scan(1, eventlog.Forward)
	n := 0
	for it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// fileSizes returns the size of every file under the root of fsys, by
// slash-separated path. Pebble deletes obsolete files (compacted tables,
// WALs beyond those it recycles) in the background, after the compaction
// or flush that made them obsolete has returned, so a file listed may be
// gone when its size is read: it no longer takes space and is left out.
// Any other error is returned.
func fileSizes(fsys fs.FS) (map[string]int64, error) {
	out := map[string]int64{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != "." && errors.Is(err, fs.ErrNotExist) {
				return nil // a directory deleted after it was listed
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		}
		out[p] = info.Size()
		return nil
	})
	return out, err
}

// dirFiles returns the size of every file under dir, by path.
func dirFiles(t testing.TB, dir string) map[string]int64 {
	files, err := fileSizes(os.DirFS(dir))
	if err != nil {
		t.Fatal(fmt.Errorf("size of %s: %w", dir, err))
	}
	return files
}

// settle waits until the log's storage runs no compaction and holds no
// table it no longer uses: Pebble deletes obsolete tables in the
// background, later on a loaded machine, and a compaction writes its
// output before its inputs go, so a directory listed before then counts
// data twice. It polls the storage's metrics (the engine's own goroutines
// do this work, nothing to wait on) and gives up after a minute, when the
// directory is measured as it is.
func settle(t testing.TB, l *eventlog.Log) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := l.StorageMetrics()
		if err != nil {
			t.Fatal(err)
		}
		if m.Compact.NumInProgress == 0 && m.Table.ObsoleteCount == 0 && m.Table.ZombieCount == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("storage still busy after a minute: %d compactions, %d obsolete and %d zombie tables",
				m.Compact.NumInProgress, m.Table.ObsoleteCount, m.Table.ZombieCount)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func sum(files map[string]int64) int64 {
	var n int64
	for _, size := range files {
		n += size
	}
	return n
}

// recycledWALs returns the size of the WAL files among files (as
// fileSizes returns them for a data directory) but the newest: those
// Pebble keeps to reuse.
func recycledWALs(files map[string]int64) int64 {
	var logs []string
	for p := range files {
		if path.Ext(p) == ".log" && !strings.Contains(p, "/") {
			logs = append(logs, p)
		}
	}
	slices.Sort(logs) // names are zero-padded numbers
	var n int64
	for _, p := range logs[:max(0, len(logs)-1)] {
		n += files[p]
	}
	return n
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// vanishingFS is a directory whose listing names a file that is gone when
// its size is read, as when Pebble deletes an obsolete table between the
// two.
type vanishingFS struct {
	fstest.MapFS
	gone string
}

func (v vanishingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := v.MapFS.ReadDir(name)
	for i, e := range entries {
		if path.Join(name, e.Name()) == v.gone {
			entries[i] = vanishedEntry{e}
		}
	}
	return entries, err
}

type vanishedEntry struct{ fs.DirEntry }

func (e vanishedEntry) Info() (fs.FileInfo, error) {
	return nil, &fs.PathError{Op: "lstat", Path: e.Name(), Err: fs.ErrNotExist}
}

// TestFileSizesSkipsVanishedFiles: a file deleted while the directory is
// walked takes no space and counts for nothing; it is not an error.
func TestFileSizesSkipsVanishedFiles(t *testing.T) {
	fsys := vanishingFS{MapFS: fstest.MapFS{
		"000004.log":     {Data: make([]byte, 10)},
		"000005.sst":     {Data: make([]byte, 100)},
		"000006.sst":     {Data: make([]byte, 1000)},
		"archive/a.gz":   {Data: make([]byte, 7)},
		"MANIFEST-00001": {Data: make([]byte, 3)},
	}, gone: "000005.sst"}
	files, err := fileSizes(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if n := sum(files); n != 1020 || len(files) != 4 {
		t.Fatalf("files %v, %d bytes; want 4 files, 1020 bytes", files, n)
	}
}
