package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// faultInjector fails the file operations that match, from the at-th one
// on, while armed: a disk that starts failing in the middle of a
// checkpoint and stays failed.
type faultInjector struct {
	mu    sync.Mutex
	armed bool
	at    int
	seen  int
	hit   int
	match func(errorfs.Op) bool
}

func (f *faultInjector) MaybeError(op errorfs.Op) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.armed || !f.match(op) {
		return nil
	}
	if f.seen++; f.seen < f.at {
		return nil
	}
	f.hit++
	return errorfs.ErrInjected
}

func (f *faultInjector) String() string { return fmt.Sprintf("fail from operation %d", f.at) }

func (f *faultInjector) arm(on bool) (hit int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed, f.seen = on, 0
	hit, f.hit = f.hit, 0
	return hit
}

// TestCheckpointIOErrors injects write and sync errors while a projections
// checkpoint is committed: the injector is armed right before
// View.Checkpoint and fails the write-ahead log (or every file) from the
// first, second or third matching operation on, while a live fold
// (Follow) runs. What must hold, whatever way the checkpoint is committed
// (synced or not, in one batch or several):
//
//   - the failure is reported: by Checkpoint, or at the latest by the next
//     synced append, which is not acknowledged;
//   - the log refuses writes honestly: Health matches eventlog.ErrFailed
//     with the injected error and Failed() is closed (the daemon's /readyz
//     turns 503 with the reason from Health, cmd/pegasusd TestFullDisk);
//   - no partial state is visible: the View still equals a fold from zero
//     of what the log holds, and so do the projections recovered after a
//     reopen, read-only (persisted projections read as they are) and
//     writable;
//   - nothing acknowledged is lost after the reopen, and the append that
//     failed is there whole or not at all.
func TestCheckpointIOErrors(t *testing.T) {
	seed := testSeed(t)
	evs := replaytest.Generate(seed, replaytest.Config{Tasks: 24, Concurrency: 6, TextSize: 200})
	if len(evs) < 60 {
		t.Fatalf("history of %d events", len(evs))
	}
	isWAL := func(op errorfs.Op) bool { return strings.HasSuffix(op.Path, ".log") }
	anyFile := func(errorfs.Op) bool { return true }
	failedCheckpoints := 0
	defer func() {
		if failedCheckpoints == 0 && !t.Failed() {
			t.Error("no injected error made a checkpoint fail: the test does not reach the checkpoint's commit")
		}
	}()
	isWrite := func(op errorfs.Op) bool {
		return op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt || op.Kind == errorfs.OpCreate
	}
	isSync := func(op errorfs.Op) bool {
		return op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
	}
	for _, where := range []struct {
		name string
		path func(errorfs.Op) bool
		from []int // the checkpoint writes, then syncs; more if it commits several batches
	}{{"wal", isWAL, []int{1, 2, 3}}, {"any", anyFile, []int{1}}} {
		for _, kind := range []struct {
			name string
			op   func(errorfs.Op) bool
		}{{"write", isWrite}, {"sync", isSync}} {
			for _, at := range where.from {
				t.Run(fmt.Sprintf("%s-%s-from-%d", where.name, kind.name, at), func(t *testing.T) {
					inj := &faultInjector{at: at, match: func(op errorfs.Op) bool { return where.path(op) && kind.op(op) }}
					if checkpointFault(t, evs, inj) {
						failedCheckpoints++
					}
				})
			}
		}
	}
}

// checkpointFault runs one case and reports whether the checkpoint itself
// failed.
func checkpointFault(t *testing.T, evs []eventlog.Event, inj *faultInjector) (checkpointFailed bool) {
	ctx := context.Background()
	mem := vfs.NewMem()
	logOpts := func(fs vfs.FS, readOnly bool) *eventlog.Options {
		return &eventlog.Options{FS: fs, ReadOnly: readOnly, MemTableSize: 1 << 20}
	}
	l, err := eventlog.Open("db", logOpts(reuseFS{FS: errorfs.Wrap(mem, inj), inj: inj}, false))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { l.Close() }() // may report the failure
	half, tail := len(evs)/2, len(evs)-10
	if err := replaytest.AppendAll(ctx, l, evs[:half], 0); err != nil {
		t.Fatal(err)
	}
	v, rec, err := Open(ctx, l, faultViewOptions()) // a first checkpoint, at half
	if err != nil {
		t.Fatal(err)
	}
	if rec.Head != uint64(half) {
		t.Fatalf("recovered to %d, want %d", rec.Head, half)
	}
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- v.Follow(fctx, l, nil) }()
	if err := replaytest.AppendAll(ctx, l, evs[half:tail], 7); err != nil {
		t.Fatal(err)
	}
	acked := uint64(tail)
	if err := v.WaitFor(ctx, acked); err != nil {
		t.Fatal(err)
	}

	makeMemtableRoom(t, l)
	inj.arm(true)
	ckErr := v.Checkpoint(ctx)
	// The disk is still failing: appends go on one event at a time (one
	// synced commit each) until one fails; it must fail, whether or not
	// the checkpoint saw the failure, and none after it is acknowledged.
	var appErr error
	for _, ev := range evs[tail:] {
		if appErr = replaytest.AppendAll(ctx, l, []eventlog.Event{ev}, 0); appErr != nil {
			break
		}
		acked++
	}
	hit := inj.arm(false)
	t.Logf("checkpoint: %v; append after %d more: %v; %d operations failed", ckErr, acked-uint64(tail), appErr, hit)
	if hit == 0 {
		t.Fatal("no operation failed: the injector missed the checkpoint and the appends")
	}
	if ckErr != nil && !errors.Is(ckErr, eventlog.ErrFailed) && !errors.Is(ckErr, errorfs.ErrInjected) {
		t.Fatalf("checkpoint: %v", ckErr)
	}
	if !errors.Is(appErr, eventlog.ErrFailed) {
		t.Fatalf("append on a failing disk: %v", appErr)
	}
	select {
	case <-l.Failed():
	default:
		t.Fatal("Failed() is not closed")
	}
	if h := l.Health(); !errors.Is(h, eventlog.ErrFailed) || !errors.Is(h, errorfs.ErrInjected) {
		t.Fatalf("Health: %v", h)
	}
	if l.Head() != acked {
		t.Fatalf("head %d after the failure, %d acknowledged", l.Head(), acked)
	}
	// The View serves what it folded, all of it acknowledged.
	if err := v.WaitFor(ctx, acked); err != nil {
		t.Fatal(err)
	}
	sameState(t, "view after the failure", dump(t, foldMem(t, FromLog(l))), dump(t, v))
	// Still refused once the disk works again: the outcome of the failed
	// commit is unknown until the log is reopened.
	if err := replaytest.AppendAll(ctx, l, evs[acked:], 0); !errors.Is(err, eventlog.ErrFailed) {
		t.Fatalf("append after the failure: %v", err)
	}
	if err := v.Checkpoint(ctx); err == nil && ckErr != nil {
		t.Fatal("a checkpoint succeeded on the poisoned log")
	}
	stopFollow()
	if err := <-followed; !errors.Is(err, context.Canceled) {
		t.Fatalf("follow: %v", err)
	}
	l.Close()

	// What a post-mortem sees (pegasus-replay, read-only): the persisted
	// projections as they are, plus the tail.
	ro, err := eventlog.Open("db", logOpts(mem, true))
	if err != nil {
		t.Fatalf("read-only open after the failure: %v", err)
	}
	checkFaultRecovery(t, ro, evs, acked, true)
	ro.Close()

	// A restart recovers, and everything acknowledged is there.
	l, err = eventlog.Open("db", logOpts(mem, false))
	if err != nil {
		t.Fatalf("reopen after the failure: %v", err)
	}
	checkFaultRecovery(t, l, evs, acked, false)
	// And it takes writes again.
	if err := replaytest.AppendAll(ctx, l, evs[l.Head():], 0); err != nil {
		t.Fatalf("append after the restart: %v", err)
	}
	return ckErr != nil
}

// makeMemtableRoom leaves Pebble's current memtable empty at its full
// size (the log runs with 1 MiB memtables), so that the checkpoint and the
// appends of the armed window (a few hundred KiB) do not make Pebble
// switch to a new WAL. An I/O error at that switch ends the process
// (Pebble panics with its mutex released, a fatal error no recover
// catches): eventlog's TestWALRotationIOErrorEndsProcess covers that case
// in a child process. A batch of half a memtable or more is written by
// Pebble as its own flushable batch, with a switch to a new WAL and a new
// empty memtable; memtables start at 256 KiB and double at each switch up
// to MemTableSize, so after three such batches the new one has 1 MiB free.
func makeMemtableRoom(t *testing.T, l *eventlog.Log) {
	t.Helper()
	filler := bytes.Repeat([]byte{'f'}, 600<<10)
	for range 3 {
		if err := l.WriteAux(context.Background(), func(b *eventlog.AuxBatch) error {
			b.Set([]byte("faults-test/filler"), filler)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// reuseFS makes the writes to recycled WALs go through the injector too:
// errorfs.FS.ReuseForWrite returns the file unwrapped.
type reuseFS struct {
	vfs.FS // an errorfs.FS
	inj    errorfs.Injector
}

func (fs reuseFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	if err != nil {
		return nil, err
	}
	return injFile{File: f, path: newname, inj: fs.inj}, nil
}

func (fs reuseFS) Unwrap() vfs.FS { return fs.FS }

// injFile asks the injector before each write and sync, as errorfs does.
type injFile struct {
	vfs.File
	path string
	inj  errorfs.Injector
}

func (f injFile) Write(p []byte) (int, error) {
	if err := f.inj.MaybeError(errorfs.Op{Kind: errorfs.OpFileWrite, Path: f.path}); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f injFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.inj.MaybeError(errorfs.Op{Kind: errorfs.OpFileWriteAt, Path: f.path, Offset: off}); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f injFile) Sync() error {
	if err := f.inj.MaybeError(errorfs.Op{Kind: errorfs.OpFileSync, Path: f.path}); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f injFile) SyncData() error {
	if err := f.inj.MaybeError(errorfs.Op{Kind: errorfs.OpFileSyncData, Path: f.path}); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f injFile) SyncTo(length int64) (bool, error) {
	if err := f.inj.MaybeError(errorfs.Op{Kind: errorfs.OpFileSyncTo, Path: f.path}); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

// faultViewOptions checkpoints only when asked (the test arms the
// injector for that checkpoint), with task snapshots in it.
func faultViewOptions() *Options { return &Options{CheckpointEvery: 1 << 30, SnapshotEvery: 3} }

// checkFaultRecovery checks a log reopened after a failed checkpoint: every
// acknowledged event at its sequence, the failed append whole or absent,
// and recovered projections equal to a fold from zero.
func checkFaultRecovery(t *testing.T, l *eventlog.Log, evs []eventlog.Event, acked uint64, readOnly bool) {
	t.Helper()
	ctx := context.Background()
	head := l.Head()
	if head != acked && head != acked+1 {
		t.Fatalf("head %d: want %d (the failed append absent) or %d (present)", head, acked, acked+1)
	}
	it := l.Scan(1, eventlog.Forward)
	n := uint64(0)
	for it.Next() {
		n++
		if ev := it.Event(); ev.Seq != n || ev.ID != evs[n-1].ID {
			it.Close()
			t.Fatalf("seq %d holds %s at seq %d, want %s", n, ev.ID, ev.Seq, evs[n-1].ID)
		}
	}
	if err := it.Close(); err != nil || n != head {
		t.Fatalf("scanned %d events of %d: %v", n, head, err)
	}
	opts := faultViewOptions()
	opts.ReadOnly = readOnly
	v, rec, err := Open(ctx, l, opts)
	if err != nil {
		t.Fatalf("recovery (read-only %v): %v", readOnly, err)
	}
	t.Logf("recovered (read-only %v): head %d, from checkpoint %d, rebuilt %v %s", readOnly, rec.Head, rec.Checkpoint, rec.Rebuilt, rec.Reason)
	if rec.Head != head {
		t.Fatalf("recovered to %d, head %d", rec.Head, head)
	}
	sameState(t, fmt.Sprintf("recovered (read-only %v)", readOnly), dump(t, foldMem(t, FromLog(l))), dump(t, v))
	if rep, err := Verify(ctx, l, &VerifyOptions{Options: faultViewOptions()}); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %s", err, rep.Summary())
	}
}
