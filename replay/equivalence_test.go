package replay

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// TestGeneratedHistoriesAreLegal guards the generator the other tests rely
// on: every event it makes is accepted by the fold.
func TestGeneratedHistoriesAreLegal(t *testing.T) {
	seed := testSeed(t)
	evs := replaytest.Generate(seed, replaytest.Config{Tasks: 50, Finish: true})
	v := foldMem(t, mustMem(t, evs))
	if issues, n := v.Issues(); n != 0 {
		t.Fatalf("the fold refused %d generated events; first: %+v", n, issues[0])
	}
	st := v.Stats()
	if st.Tasks != 50 || st.Completed+st.Failed != 50 {
		t.Fatalf("stats: %d tasks, %d completed, %d failed; want 50 finished", st.Tasks, st.Completed, st.Failed)
	}
	if v.ActiveCount() != 0 {
		t.Fatalf("%d tasks still active after a finished history", v.ActiveCount())
	}
}

// TestFoldEquivalence is the metamorphic test of the fold: for a random
// history, folding from zero, in random batch sizes, through a persisting
// View with frequent checkpoints, from a checkpoint taken at a random
// point, and live from a subscription all give byte-identical state; and a
// task's state rebuilt from a snapshot equals its state rebuilt from zero.
func TestFoldEquivalence(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	for round := 0; round < 3; round++ {
		cfg := replaytest.Config{Tasks: 20 + rng.IntN(40), Concurrency: 1 + rng.IntN(12), Finish: rng.IntN(2) == 0}
		foldEquivalence(t, rng, cfg, nil)
	}
}

// TestFoldEquivalenceLargeInputs is TestFoldEquivalence with inputs of 4
// to 12 KiB, which the persisted task records and snapshots refer to
// (projection.EncodeStoredTask) instead of copying, and a budget that
// makes unfinished tasks leave memory: a task read back from a checkpoint,
// its input read from the event that created it, equals the task folded
// from zero, byte for byte.
func TestFoldEquivalenceLargeInputs(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	cfg := replaytest.Config{Tasks: 80, Concurrency: 60, Finish: rng.IntN(2) == 0, InputSize: 8 << 10}
	refs := 0
	foldEquivalence(t, rng, cfg, func(l *eventlog.Log, o *Options) {
		o.MemoryBudget = MinMemoryBudget
		if l == nil {
			return
		}
		it := l.ScanAux([]byte(prefTask))
		defer it.Close()
		for it.Next() {
			if _, ref, err := projection.DecodeStoredTask(it.Value()); err != nil {
				t.Fatal(err)
			} else if !ref.IsZero() {
				refs++
			}
		}
	})
	if refs == 0 {
		t.Fatal("no persisted task record refers to its input")
	}
}

// foldEquivalence runs one round of TestFoldEquivalence on a history
// generated with cfg. tune, if not nil, changes the options of the
// persisting Views (l nil) and inspects the log they persisted to.
func foldEquivalence(t *testing.T, rng *rand.Rand, cfg replaytest.Config, tune func(l *eventlog.Log, o *Options)) {
	evs := replaytest.Generate(rng.Uint64(), cfg)
	mem := mustMem(t, evs)
	ref := dump(t, foldMem(t, mem))
	ctx := context.Background()

	// Batches: the same View folded up to random bounds, piece by piece.
	v, _ := NewView(nil)
	for v.Seq() < mem.Head() {
		next := v.Seq() + 1 + uint64(rng.IntN(40))
		if _, err := Fold(ctx, v, mem, FoldOptions{Bound: AtSeq(next)}); err != nil {
			t.Fatal(err)
		}
	}
	sameState(t, "batches", ref, dump(t, v))

	// Persisting, with checkpoints every few events and snapshots
	// every few versions; then recovery from the last checkpoint.
	opts := &Options{CheckpointEvery: 1 + rng.IntN(50), SnapshotEvery: uint64(1 + rng.IntN(8))}
	if tune != nil {
		tune(nil, opts)
	}
	l, fs := logWith(t, evs)
	pv, rec, err := Open(ctx, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Rebuilt || rec.Head != mem.Head() {
		t.Fatalf("first open: %+v", rec)
	}
	sameState(t, "persisting fold", ref, dump(t, pv))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, fs, "db", false)
	pv, rec, err = Open(ctx, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Rebuilt || rec.Checkpoint != mem.Head() || rec.Folded != 0 {
		t.Fatalf("reopen should load the checkpoint and fold nothing: %+v", rec)
	}
	sameState(t, "reopened", ref, dump(t, pv))
	if tune != nil {
		tune(l, opts)
	}

	// Per-task snapshots: the state of random tasks at random points,
	// from the snapshots and task records in the log, equals the state
	// folded from zero (the MemLog has no snapshots).
	lr := FromLog(l)
	usedSnapshot := false
	for i := 0; i < 30; i++ {
		ev := evs[rng.IntN(len(evs))]
		if ev.Stream[0] == '$' {
			continue
		}
		b := AtSeq(ev.Seq + uint64(rng.IntN(30)))
		if base, _, ok, err := bestSnapshot(l, ev.Stream, b); err != nil {
			t.Fatal(err)
		} else if ok && base.Version > 1 {
			usedSnapshot = true
		}
		fromSnap, err1 := StateAt(ctx, lr, ev.Stream, b)
		fromZero, err2 := StateAt(ctx, mem, ev.Stream, b)
		if err1 != nil || err2 != nil {
			t.Fatalf("state at %v: %v / %v", b, err1, err2)
		}
		e1, _ := fsm.EncodeTask(fromSnap)
		e2, _ := fsm.EncodeTask(fromZero)
		if !bytes.Equal(e1, e2) {
			t.Fatalf("task %s at %v: snapshot rebuild differs from zero rebuild", ev.Stream, b)
		}
	}
	if !usedSnapshot {
		t.Fatalf("no state-at query started from a snapshot (SnapshotEvery %d)", opts.SnapshotEvery)
	}
	l.Close()

	// A checkpoint at a random point, then the rest of the log.
	cut := 1 + rng.IntN(len(evs)-1)
	l2, fs2 := logWith(t, evs[:cut])
	if _, _, err := Open(ctx, l2, opts); err != nil {
		t.Fatal(err)
	}
	if err := replaytest.AppendAll(ctx, l2, evs[cut:], 1+rng.IntN(100)); err != nil {
		t.Fatal(err)
	}
	l2.Close()
	l2 = openLog(t, fs2, "db", false)
	cv, rec, err := Open(ctx, l2, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Checkpoint != uint64(cut) || rec.Folded != len(evs)-cut {
		t.Fatalf("open after a checkpoint at %d: %+v", cut, rec)
	}
	sameState(t, "checkpoint + tail", ref, dump(t, cv))
	l2.Close()

	// Live: follow an empty log while the history is appended.
	l3, _ := logWith(t, nil)
	lv, _, err := Open(ctx, l3, opts)
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var hookCalls int
	var lastSeq uint64
	var hookErr error
	// The hook's call for the last event, not the view's position: the
	// view is at an event before its hook runs, and a cancel then may
	// stop the fold between the two (a checkpoint it waits for).
	last, followed := make(chan struct{}), make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(followed)
		hookErr = lv.Follow(fctx, l3, func(ch *Change) error {
			hookCalls++
			if ch.Raw.Seq != lastSeq+1 {
				t.Errorf("hook saw seq %d after %d", ch.Raw.Seq, lastSeq)
			}
			lastSeq = ch.Raw.Seq
			if lastSeq == mem.Head() {
				close(last)
			}
			return nil
		})
	}()
	if err := replaytest.AppendAll(ctx, l3, evs, 1+rng.IntN(20)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-last:
	case <-followed:
	}
	if err := lv.WaitFor(ctx, mem.Head()); err != nil {
		t.Fatal(err)
	}
	cancel()
	wg.Wait()
	if hookErr != context.Canceled {
		t.Fatalf("Follow returned %v, want context.Canceled", hookErr)
	}
	if hookCalls != len(evs) {
		t.Fatalf("hook called %d times for %d events", hookCalls, len(evs))
	}
	sameState(t, "live", ref, dump(t, lv))
	l3.Close()
}

// TestOpenRebuildsOnIdentityChange: projections persisted under other
// options (here a different stats window) are discarded and rebuilt.
func TestOpenRebuildsOnIdentityChange(t *testing.T) {
	evs := replaytest.Generate(7, replaytest.Config{Tasks: 10, Finish: true})
	l, fs := logWith(t, evs)
	ctx := context.Background()
	if _, _, err := Open(ctx, l, nil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = openLog(t, fs, "db", false)
	defer l.Close()
	o := &Options{}
	o.Stats.Window = 30
	v, rec, err := Open(ctx, l, o)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Rebuilt || rec.Folded != len(evs) {
		t.Fatalf("want a rebuild from zero, got %+v", rec)
	}
	if got := v.Stats().WindowMinutes; got != 30 {
		t.Fatalf("window %d, want 30", got)
	}
	rep, err := Verify(ctx, l, &VerifyOptions{Options: o})
	if err != nil || !rep.OK() || rep.Checkpoint != uint64(len(evs)) {
		t.Fatalf("verify after rebuild: %v %s (checkpoint %d)", err, rep.Summary(), rep.Checkpoint)
	}
}

// TestOpenReadOnly is the CLI's path: a data directory opened read-only is
// folded without writing anything, from its checkpoint when it has one.
func TestOpenReadOnly(t *testing.T) {
	ctx := context.Background()
	evs := replaytest.Generate(21, replaytest.Config{Tasks: 25, Concurrency: 4})
	ref := dump(t, foldMem(t, mustMem(t, evs)))
	l, fs := logWith(t, evs)
	l.Close()

	ro := openLog(t, fs, "db", true)
	v, rec, err := Open(ctx, ro, nil) // ReadOnly is implied by the log
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Rebuilt || rec.Folded != len(evs) {
		t.Fatalf("read-only open without projections: %+v", rec)
	}
	sameState(t, "read-only rebuild", ref, dump(t, v))
	it := ro.ScanAux([]byte("proj/"))
	if it.Next() {
		t.Fatalf("a read-only open wrote %q", it.Key())
	}
	it.Close()
	ro.Close()

	rw := openLog(t, fs, "db", false)
	if _, _, err := Open(ctx, rw, &Options{CheckpointEvery: 10}); err != nil {
		t.Fatal(err)
	}
	rw.Close()
	ro = openLog(t, fs, "db", true)
	defer ro.Close()
	v, rec, err = Open(ctx, ro, &Options{ReadOnly: true, CheckpointEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Rebuilt || rec.Checkpoint != uint64(len(evs)) {
		t.Fatalf("read-only open with a checkpoint: %+v", rec)
	}
	sameState(t, "read-only from checkpoint", ref, dump(t, v))
}

// TestFollowContract: one fold at a time per View, WaitFor honours its
// context, and a hook error stops Follow with the event folded.
func TestFollowContract(t *testing.T) {
	ctx := context.Background()
	evs := replaytest.Generate(4, replaytest.Config{Tasks: 3, Concurrency: 1, Finish: true})
	l, _ := logWith(t, nil)
	defer l.Close()
	v, _, err := Open(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	stop := errors.New("stop")
	done := make(chan error, 1)
	go func() {
		done <- v.Follow(ctx, l, func(ch *Change) error {
			if ch.Raw.Seq == 1 {
				close(started)
				return nil
			}
			return stop
		})
	}()
	if err := replaytest.AppendAll(ctx, l, evs[:1], 0); err != nil {
		t.Fatal(err)
	}
	<-started
	if _, err := Fold(ctx, v, FromLog(l), FoldOptions{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second fold on a following view: %v", err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := v.WaitFor(short, 99); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitFor with a cancelled context: %v", err)
	}
	if err := replaytest.AppendAll(ctx, l, evs[1:2], 0); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("Follow returned %v, want the hook's error", err)
	}
	if v.Seq() != 2 {
		t.Fatalf("view at %d, want 2 (the event the hook failed on stays folded)", v.Seq())
	}
}
