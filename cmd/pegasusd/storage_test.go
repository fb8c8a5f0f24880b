package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/pegasus-engine/pegasus/api"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestFullDisk fills the disk under a running daemon (ENOSPC injected on
// the WAL through errorfs): the write that hits it gets 503 with a reason
// and no host path, /readyz turns 503 with the same reason at once,
// /v1/stats reports it, and the daemon stops with an error (the process
// exits non-zero for its supervisor to restart it). Restarted with space
// back, it has every task it acknowledged.
func TestFullDisk(t *testing.T) {
	cfg := testConfig(t)
	var full atomic.Bool
	cfg.engine.Log.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileWrite ||
			op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData) {
			return syscall.ENOSPC
		}
		return nil
	}))
	td := startDaemon(t, cfg)
	if r := td.do("GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("readyz before: %d %s", r.status, r.body)
	}
	id := td.submit("before the disk filled up")

	full.Store(true)
	r := td.do("POST", "/v1/tasks", `{"input":"while the disk is full"}`)
	if r.status != 503 || r.errorCode(t) != api.CodeStorageUnavailable || !strings.Contains(string(r.body), "no space left") {
		t.Fatalf("submit on a full disk: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), cfg.engine.DataDir) || strings.Contains(string(r.body), "/tmp") {
		t.Fatalf("error body shows a host path: %s", r.body)
	}
	r = td.do("GET", "/readyz", "")
	if r.status != 503 || r.errorCode(t) != api.CodeStorageUnavailable || !strings.Contains(string(r.body), "no space left") {
		t.Fatalf("readyz on a full disk: %d %s", r.status, r.body)
	}
	var stats struct {
		Log struct {
			Storage string `json:"storage"`
		} `json:"log"`
	}
	td.do("GET", "/v1/stats", "").json(t, &stats)
	if !strings.Contains(stats.Log.Storage, "no space left") {
		t.Fatalf("stats: %+v", stats)
	}

	// The daemon stops by itself, with an error for the exit code.
	err := td.d.wait(context.Background(), func() {})
	td.d = nil
	if !errors.Is(err, eventlog.ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("wait after a full disk: %v", err)
	}
	if code := exitCode(err, &strings.Builder{}); code == exitOK {
		t.Fatal("exit code 0 after a storage failure")
	}

	full.Store(false)
	td = startDaemon(t, cfg)
	if r := td.do("GET", "/v1/tasks/"+id, ""); r.status != 200 {
		t.Fatalf("acknowledged task after restart: %d %s", r.status, r.body)
	}
	if r := td.do("GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("readyz after restart: %d %s", r.status, r.body)
	}
}

// TestDamagedLogAtStart cuts the newest WAL of a stopped daemon: the next
// start refuses, naming the file and the ways out; --accept-data-loss
// starts, and the loss is on $system as DATA_LOST.
func TestDamagedLogAtStart(t *testing.T) {
	cfg := testConfig(t)
	td := startDaemon(t, cfg)
	for range 3 {
		td.submit("some work")
	}
	td.stop()
	logs := dataFiles(t, cfg.engine.DataDir, ".log")
	if len(logs) == 0 {
		t.Fatalf("no WAL in %s", cfg.engine.DataDir)
	}
	newest := logs[len(logs)-1]
	rewriteFile(t, newest, func(data []byte) []byte { return data[:len(data)/2] })

	_, err := start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !eventlog.IsCorruption(err) || !strings.Contains(err.Error(), filepath.Base(newest)) ||
		!strings.Contains(err.Error(), "--accept-data-loss") || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("start on a damaged log: %v", err)
	}

	cfg.engine.Log.AcceptDataLoss = true
	td = startDaemon(t, cfg)
	var stats struct {
		Log struct {
			Head uint64 `json:"head"`
		} `json:"log"`
	}
	td.do("GET", "/v1/stats", "").json(t, &stats)
	// The loss is recorded before the daemon's own SYSTEM_STARTED and
	// the resumed tasks' events.
	r := td.do("GET", fmt.Sprintf("/v1/events?after_seq=%d&limit=1000", max(stats.Log.Head, 500)-500), "")
	if r.status != 200 || !strings.Contains(string(r.body), eventlog.TypeDataLost) {
		t.Fatalf("events after an accepted loss: %d %.300s", r.status, r.body)
	}
	if r := td.do("GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("readyz after an accepted loss: %d %s", r.status, r.body)
	}
}

// TestCorruptTableAtStart flips a byte in a table of a stopped daemon's
// log. The daemon never panics: either recovery reads the bad block and
// start refuses with a corruption error naming the table, or it starts
// and the reads that reach the block fail with 503; from then on /readyz
// reports the corruption and new tasks are refused with the same reason.
func TestCorruptTableAtStart(t *testing.T) {
	cfg := testConfig(t)
	settledRun(t, cfg, 5)
	settledRun(t, cfg, 0) // flushes the first run's WAL into a table
	tables := eventTables(t, cfg.engine.DataDir)
	if len(tables) == 0 {
		t.Fatalf("no table of events in %s", cfg.engine.DataDir)
	}
	p := tables[0]
	sst := filepath.Base(p)
	rewriteFile(t, p, func(data []byte) []byte { data[60] ^= 0x10; return data })

	d, err := start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		if !eventlog.IsCorruption(err) || !strings.Contains(err.Error(), strings.TrimSuffix(sst, ".sst")) {
			t.Fatalf("start on a corrupt table: %v", err)
		}
		t.Logf("refused: %v", err)
		return
	}
	td := &testDaemon{t: t, d: d, url: "http://" + d.ln.Addr().String()}
	t.Cleanup(func() { d.shutdown() })
	r := td.do("GET", "/v1/events?after_seq=0&limit=1000", "")
	if r.status != 503 || r.errorCode(t) != api.CodeStorageUnavailable || !strings.Contains(string(r.body), sst) {
		t.Fatalf("reading the corrupt table: %d %.300s", r.status, r.body)
	}
	if r := td.do("GET", "/readyz", ""); r.status != 503 || !strings.Contains(string(r.body), sst) {
		t.Fatalf("readyz with a corrupt table: %d %s", r.status, r.body)
	}
	r = td.do("POST", "/v1/tasks", `{"input":"after the corruption was found"}`)
	if r.status != 503 || r.errorCode(t) != api.CodeStorageUnavailable || !strings.Contains(string(r.body), sst) ||
		!strings.Contains(string(r.body), "refuses writes") {
		t.Fatalf("submit after a corrupt table was found: %d %s", r.status, r.body)
	}
}

// TestHoleAtStart drops a run of records below the head from a stopped
// daemon's log, the way a MANIFEST that lost a table does (dropKeys).
// Recovery folds from the last checkpoint, above the hole, so the daemon
// starts; the log finds the hole at open, and the daemon is not ready and
// refuses writes, both with a reason naming the first missing record, as
// after a failed fsync. It still serves what is intact, and it stays so
// across a restart.
func TestHoleAtStart(t *testing.T) {
	cfg := testConfig(t)
	last := settledRun(t, cfg, 8)
	dropKeys(t, cfg.engine.DataDir, eventlog.EventKey(5), eventlog.EventKey(31))

	for range 2 {
		td := startDaemon(t, cfg)
		r := td.do("GET", "/readyz", "")
		if r.status != 503 || r.errorCode(t) != api.CodeStorageUnavailable || !strings.Contains(string(r.body), "seq 5") ||
			!strings.Contains(string(r.body), "refuses writes") {
			t.Fatalf("readyz over a hole: %d %s", r.status, r.body)
		}
		r = td.do("POST", "/v1/tasks", `{"input":"on top of a hole"}`)
		if r.status != 503 || r.errorCode(t) != api.CodeStorageUnavailable || !strings.Contains(string(r.body), "seq 5") {
			t.Fatalf("submit over a hole: %d %s", r.status, r.body)
		}
		if r := td.do("GET", "/v1/tasks/"+last, ""); r.status != 200 {
			t.Fatalf("a task above the hole: %d %s", r.status, r.body)
		}
		td.stop()
	}
}

// TestHoleUnderRecovery: records missing where the recovery fold reads
// (here the projections' checkpoint is gone too, so it folds from zero)
// stop the start, naming the first missing record and the way out: a
// hole cannot be cut around like a damaged tail.
func TestHoleUnderRecovery(t *testing.T) {
	cfg := testConfig(t)
	settledRun(t, cfg, 3)
	dropKeys(t, cfg.engine.DataDir, eventlog.EventKey(5), eventlog.EventKey(11))
	dropKeys(t, cfg.engine.DataDir, eventlog.AuxKey([]byte("proj/")), eventlog.AuxKey([]byte("proj0")))

	_, err := start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !eventlog.IsCorruption(err) || !strings.Contains(err.Error(), "seq 5") ||
		!strings.Contains(err.Error(), "restore the newest checkpoint") || strings.Contains(err.Error(), "--accept-data-loss") {
		t.Fatalf("start over a hole the recovery reads: %v", err)
	}
}

// settledRun runs a daemon on cfg's data directory through n tasks that
// settle, and stops it, for a test to damage what it left. It returns the
// last task's id.
func settledRun(t *testing.T, cfg *config, n int) (last string) {
	t.Helper()
	td := startDaemon(t, cfg)
	for range n {
		last = td.submit("some work")
		td.waitTask(last)
	}
	td.stop()
	return last
}

// dropKeys takes the keys [start, end) of a stopped daemon's log out of
// the tables' metadata, the way a MANIFEST that lost a table does: no
// tombstone, nothing in the WAL, the keys are in no table Pebble lists
// (Pebble's Excise edits the MANIFEST to that effect).
func dropKeys(t *testing.T, dir string, start, end []byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest,
		Logger: pebbleQuiet{}, ErrorIfNotExists: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Excise(context.Background(), pebble.KeyRange{Start: start, End: end})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// eventTables lists the paths of the tables of a stopped daemon's log
// whose keys span events (not every table does: the checkpoints' new keys
// are written in tables of their own), oldest first.
func eventTables(t *testing.T, dir string) []string {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: pebbleQuiet{}, ErrorIfNotExists: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	levels, err := db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tables := range levels {
		for _, info := range tables {
			lo, hi := info.Smallest.UserKey, info.Largest.UserKey
			if len(lo) > 0 && len(hi) > 0 && lo[0] <= eventlog.PrefixEvent && hi[0] >= eventlog.PrefixEvent {
				out = append(out, filepath.Join(dir, fmt.Sprintf("%s.sst", info.FileNum)))
			}
		}
	}
	slices.Sort(out)
	return out
}

type pebbleQuiet struct{}

func (pebbleQuiet) Infof(string, ...any)  {}
func (pebbleQuiet) Errorf(string, ...any) {}
func (pebbleQuiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// dataFiles lists the paths of the files in dir whose names end in suffix,
// in name order (Pebble's file numbers: the newest last).
func dataFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n.Name(), suffix) {
			out = append(out, filepath.Join(dir, n.Name()))
		}
	}
	return out
}

// rewriteFile replaces the file at path with damage applied to its bytes.
func rewriteFile(t *testing.T, path string, damage func([]byte) []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, damage(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
