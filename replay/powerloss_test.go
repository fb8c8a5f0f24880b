package replay

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

var (
	powerTasks  = flag.Int("powerloss.tasks", 0, "tasks of TestPowerLoss (0: a short run of 40)")
	powerPoints = flag.Int("powerloss.points", 0, "crash points of TestPowerLoss, half of them during a checkpoint (0: 8)")
)

// powerLossCfg says what a power loss keeps of what was not synced: all
// of it or none of it, at random. (A random part of it would also drop
// directory entries independently of each other: Pebble's MANIFEST and the
// marker naming it are made durable by one directory sync, and an image
// that keeps the new marker but not the new MANIFEST is refused at open.
// Torn writes of the log are TestCrashDuringCheckpoint's and eventlog's.)
func powerLossCfg(rng *rand.Rand) vfs.CrashCloneCfg {
	return vfs.CrashCloneCfg{UnsyncedDataPercent: 100 * rng.IntN(2), RNG: rng}
}

// crashPoints keeps a uniform sample of n crash images out of all the
// write operations it is offered (reservoir sampling): each image is the
// file system as a power loss at that operation would leave it
// (powerLossCfg), and the log head acknowledged before it.
type crashPoints struct {
	mu     sync.Mutex
	rng    *rand.Rand
	n      int
	seen   int
	images []crashImage
}

type crashImage struct {
	fs    *crashMem
	acked uint64 // every event up to this sequence was acknowledged
	op    errorfs.Op
}

func (c *crashPoints) offer(fs *crashMem, acked func() uint64, op errorfs.Op) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen++
	i := len(c.images)
	if i >= c.n {
		if i = c.rng.IntN(c.seen); i >= c.n {
			return
		}
	}
	// Read the head before the image: what it acknowledges was synced.
	img := crashImage{acked: acked(), op: op}
	img.fs = fs.CrashClone(powerLossCfg(c.rng))
	if i == len(c.images) {
		c.images = append(c.images, img)
	} else {
		c.images[i] = img
	}
}

// TestPowerLoss simulates power loss, not just process death, under the
// daemon's whole storage stack at once: a writer appends a generated
// history in random batches (synced group commits), the live fold follows
// it and checkpoints in the background (a small memory budget and
// CheckpointEvery make them frequent), and the writer also asks for
// checkpoints, as the admin endpoint and the stop do. Crash images of the
// file system are taken at write operations sampled uniformly, half of
// them while a checkpoint is running. Each image is then recovered
// (eventlog.Open, replay.Open) while a second power loss is taken at a
// random write operation of the recovery itself, and that image is
// recovered too. Every recovery must keep every acknowledged event, with
// its id, at its sequence, and must rebuild projections byte-identical to
// a fold from zero of what survived; verify must pass. Run longer with
// -powerloss.tasks 400 -powerloss.points 40.
func TestPowerLoss(t *testing.T) {
	seed := testSeed(t)
	ctx := context.Background()
	tasks, points := *powerTasks, *powerPoints
	if tasks == 0 {
		tasks = 40
	}
	if points == 0 {
		points = 8
	}
	// Inputs of 750 to 2,250 bytes: the task records copy some and refer
	// to the others in the log (projection.InputRefMin).
	evs := replaytest.Generate(seed, replaytest.Config{Tasks: tasks, Concurrency: 6, TextSize: 400, InputSize: 1500})
	// Checkpoints of 8 KiB or more are ingested as sstables, the smaller
	// ones are batches: both kinds run.
	opts := &Options{MemoryBudget: MinMemoryBudget, CheckpointEvery: 40, SnapshotEvery: 4, ingestBytes: 8 << 10}
	logOpts := func(fs vfs.FS) *eventlog.Options {
		return &eventlog.Options{FS: fs, MemTableSize: 1 << 20} // small memtables: flushes and MANIFEST edits too
	}

	crashFS := newCrashMem()
	var l atomic.Pointer[eventlog.Log]
	var view atomic.Pointer[View]
	head := func() uint64 {
		if lp := l.Load(); lp != nil {
			return lp.Head()
		}
		return 0
	}
	during := &crashPoints{rng: rand.New(rand.NewPCG(seed, 11)), n: points / 2}
	other := &crashPoints{rng: rand.New(rand.NewPCG(seed, 12)), n: points - points/2}
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
			return nil
		}
		if v := view.Load(); v != nil && len(v.ckSem) == 1 { // a checkpoint holds the token
			during.offer(crashFS, head, op)
		} else {
			other.offer(crashFS, head, op)
		}
		return nil
	})
	lg, err := eventlog.Open("db", logOpts(errorfs.Wrap(crashFS, inj)))
	if err != nil {
		t.Fatal(err)
	}
	l.Store(lg)
	v, _, err := Open(ctx, lg, opts)
	if err != nil {
		t.Fatal(err)
	}
	view.Store(v)
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- v.Follow(fctx, lg, nil) }()

	rng := rand.New(rand.NewPCG(seed, 13))
	for rest, batch := evs, 0; len(rest) > 0; batch++ {
		n := min(len(rest), 1+rng.IntN(12))
		if err := replaytest.AppendAll(ctx, lg, rest[:n], 0); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
		if batch%17 == 16 {
			if err := v.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A fold that stops (a failed checkpoint) must fail the test, not
	// leave WaitFor waiting.
	wctx, cancelWait := context.WithCancel(ctx)
	go func() {
		err := <-followed
		followed <- err
		cancelWait()
	}()
	if err := v.WaitFor(wctx, uint64(len(evs))); err != nil {
		t.Fatalf("waiting for the fold: %v (follow: %v)", err, <-followed)
	}
	if err := v.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	stopFollow()
	if err := <-followed; !errors.Is(err, context.Canceled) {
		t.Fatalf("follow: %v", err)
	}
	view.Store(nil)
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	images := append(during.images, other.images...)
	if len(during.images) == 0 {
		t.Fatalf("no write happened during a checkpoint (%d writes elsewhere)", other.seen)
	}
	t.Logf("%d crash images: %d of %d writes during a checkpoint, %d of %d elsewhere",
		len(images), len(during.images), during.seen, len(other.images), other.seen)

	nested := 0
	for i, img := range images {
		// Recover, with a second power loss at a random write of the
		// recovery: eventlog.Open's WAL replay, replay.Open's fold and
		// checkpoints.
		var (
			mu     sync.Mutex // Pebble writes from several goroutines
			writes int
			second *crashImage
		)
		at := 1 + rng.IntN(60)
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if writes++; writes == at {
				second = &crashImage{fs: img.fs.CrashClone(powerLossCfg(rng)), acked: img.acked, op: op}
			}
			return nil
		})
		checkRecovery(t, ctx, i, "", evs, img, errorfs.Wrap(img.fs, inj), logOpts, opts)
		mu.Lock()
		again := second
		mu.Unlock()
		if again != nil {
			nested++
			checkRecovery(t, ctx, i, " (crashed again while recovering)", evs, *again, again.fs, logOpts, opts)
		}
	}
	t.Logf("%d recoveries crashed in turn and were recovered", nested)
	if nested == 0 {
		t.Fatal("no crash during a recovery")
	}
}

// checkRecovery opens the log and the projections of a crash image on fs
// and checks them against the history and a fold from zero.
func checkRecovery(t *testing.T, ctx context.Context, i int, what string, evs []eventlog.Event, img crashImage,
	fs vfs.FS, logOpts func(vfs.FS) *eventlog.Options, opts *Options) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("image %d%s, taken at write op %v on %s with seq %d acknowledged: "+format,
			append([]any{i, what, img.op.Kind, img.op.Path, img.acked}, args...)...)
	}
	cl, err := eventlog.Open("db", logOpts(fs))
	if err != nil {
		fail("open log: %v", err)
	}
	defer cl.Close()
	if cl.Head() < img.acked {
		fail("head %d: acknowledged events lost", cl.Head())
	}
	it := cl.Scan(1, eventlog.Forward)
	n := uint64(0)
	for it.Next() {
		n++
		if ev := it.Event(); ev.Seq != n || ev.ID != evs[n-1].ID {
			it.Close()
			fail("seq %d holds event %s at seq %d, want %s", n, ev.ID, ev.Seq, evs[n-1].ID)
		}
	}
	if err := it.Err(); err != nil {
		fail("scan: %v", err)
	}
	it.Close()
	if n != cl.Head() {
		fail("%d events scanned, head %d", n, cl.Head())
	}
	v, rec, err := Open(ctx, cl, opts)
	if err != nil {
		fail("recovery: %v", err)
	}
	if rec.Head != cl.Head() {
		fail("recovered to %d, head %d", rec.Head, cl.Head())
	}
	sameState(t, "recovered after a power loss", dump(t, foldMem(t, FromLog(cl))), dump(t, v))
	if rep, err := Verify(ctx, cl, &VerifyOptions{Options: opts}); err != nil || !rep.OK() {
		fail("verify: %v %s", err, rep.Summary())
	}
}
