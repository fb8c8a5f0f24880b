package replay

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// TestCrashDuringCheckpoint simulates power loss while a projection
// checkpoint is being written, both as one batch through the write-ahead
// log and as an ingested sstable: the filesystem is cloned (as a crash
// would leave it) at every write and sync of any file during the
// checkpoint, with a random part of the unsynced data of the write-ahead
// log, and all or none of the rest (see powerLossCfg). Every clone must
// reopen to projections equal to a fresh fold of the log it holds, and
// recovery must have loaded either the previous checkpoint or the new one.
func TestCrashDuringCheckpoint(t *testing.T) {
	for _, c := range []struct {
		name   string
		ingest int
	}{{"batch", 1 << 30}, {"ingest", 1}} {
		t.Run(c.name, func(t *testing.T) { crashDuringCheckpoint(t, c.ingest) })
	}
}

func crashDuringCheckpoint(t *testing.T, ingestBytes int) {
	seed := testSeed(t)
	ctx := context.Background()
	evs := replaytest.Generate(seed, replaytest.Config{Tasks: 40, Concurrency: 6})
	half := len(evs) / 2

	crashFS := newCrashMem()
	var armed atomic.Bool
	var mu sync.Mutex
	var clones []*crashMem
	rng := rand.New(rand.NewPCG(seed, 2))
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !armed.Load() || op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasSuffix(op.Path, ".log") {
			// An sstable, the MANIFEST, a directory: all or none.
			for _, pct := range []int{0, 100} {
				clones = append(clones, crashFS.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng}))
			}
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
			// Part of the batch may be written: keep a random part of it.
			clones = append(clones, crashFS.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng}))
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			// The whole batch is written and not synced: lose it, keep it,
			// or keep a random part of it.
			for _, pct := range []int{0, 100, rng.IntN(101)} {
				clones = append(clones, crashFS.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng}))
			}
		}
		return nil
	})
	fs := errorfs.Wrap(crashFS, inj)
	l := openLog(t, fs, "db", false)
	if err := replaytest.AppendAll(ctx, l, evs[:half], 0); err != nil {
		t.Fatal(err)
	}
	opts := &Options{CheckpointEvery: 1 << 30, SnapshotEvery: 2, ingestBytes: ingestBytes}
	v, rec, err := Open(ctx, l, opts) // checkpoint 1 at half
	if err != nil {
		t.Fatal(err)
	}
	if rec.Head != uint64(half) {
		t.Fatalf("first checkpoint at %d, want %d", rec.Head, half)
	}
	if err := replaytest.AppendAll(ctx, l, evs[half:], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Fold(ctx, v, FromLog(l), FoldOptions{}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := v.Checkpoint(ctx); err != nil { // checkpoint 2 at the head
		t.Fatal(err)
	}
	armed.Store(false)
	// And a crash right after the checkpoint returned.
	mu.Lock()
	clones = append(clones, crashFS.CrashClone(vfs.CrashCloneCfg{}))
	mu.Unlock()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(clones) == 0 {
		t.Fatal("no write happened during the checkpoint: the crash points were never hit")
	}
	loaded := map[uint64]int{}
	for i, clone := range clones {
		cl := openLog(t, clone, "db", false)
		if cl.Head() != uint64(len(evs)) {
			t.Fatalf("clone %d: head %d, want %d (acknowledged events lost)", i, cl.Head(), len(evs))
		}
		fresh := dump(t, foldMem(t, FromLog(cl)))
		rv, rec, err := Open(ctx, cl, opts)
		if err != nil {
			t.Fatalf("clone %d: recovery: %v", i, err)
		}
		if rec.Checkpoint != uint64(half) && rec.Checkpoint != uint64(len(evs)) {
			t.Fatalf("clone %d: recovered from checkpoint %d, want %d or %d", i, rec.Checkpoint, half, len(evs))
		}
		loaded[rec.Checkpoint]++
		sameState(t, "after crash", fresh, dump(t, rv))
		rep, err := Verify(ctx, cl, &VerifyOptions{Options: opts})
		if err != nil || !rep.OK() {
			t.Fatalf("clone %d: verify: %v %s", i, err, rep.Summary())
		}
		cl.Close()
	}
	t.Logf("%d crash points; recovered from checkpoint seq: %v", len(clones), loaded)
	if loaded[uint64(half)] == 0 || loaded[uint64(len(evs))] == 0 {
		t.Fatalf("want crashes recovering from both the old and the new checkpoint, got %v", loaded)
	}
}
