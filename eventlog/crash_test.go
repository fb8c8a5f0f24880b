package eventlog

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/oklog/ulid/v2"
)

var (
	crashIters = flag.Int("crash.iters", 200, "iterations of TestCrash")
	crashSeed  = flag.Int64("crash.seed", 0, "seed for TestCrash (0: time-based)")
)

// TestCrash simulates power loss while concurrent appenders run: at a random
// moment it clones the in-memory filesystem keeping only synced data plus a
// random share of unsynced data, reopens the clone and checks that every
// acknowledged event is there exactly once, that the log is a gap-free
// prefix and that every index agrees with the log (Verify). Each iteration
// continues from the previous crash's state for a few generations, so
// recovery from a recovered log is exercised too.
func TestCrash(t *testing.T) {
	rng, seed, iters := crashParams(t, 0, *crashIters, 20)

	var fs *vfs.MemFS
	var acked map[ulid.ULID]uint64 // across generations
	for iter := range iters {
		if iter%8 == 0 {
			fs = vfs.NewCrashableMem()
			acked = map[ulid.ULID]uint64{}
		}
		fs = crashOnce(t, iter, rng, fs, acked)
		if t.Failed() {
			t.Fatalf("iteration %d failed (seed %d)", iter, seed)
		}
	}
}

// crashParams returns the random source of a crash test (its seed logged,
// -crash.seed honoured) and its iterations (short under -short).
func crashParams(t *testing.T, stream uint64, iters, short int) (*rand.Rand, int64, int) {
	seed := *crashSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (reproduce with -crash.seed=%d)", seed, seed)
	if testing.Short() {
		iters = min(iters, short)
	}
	return rand.New(rand.NewPCG(uint64(seed), stream)), seed, iters
}

func crashOnce(t *testing.T, iter int, rng *rand.Rand, fs *vfs.MemFS, acked map[ulid.ULID]uint64) *vfs.MemFS {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := &Options{FS: fs, Entropy: mrand.New(mrand.NewSource(rng.Int64())), MemTableSize: 1 << 20}
	l, err := Open("db", o)
	if err != nil {
		t.Fatalf("iteration %d: open: %v", iter, err)
	}
	if _, err := l.Verify(ctx); err != nil {
		t.Fatalf("iteration %d: verify after recovery: %v", iter, err)
	}
	for id, seq := range acked {
		got, err := l.Get(id)
		if err != nil || got.Seq != seq {
			t.Fatalf("iteration %d: acknowledged event %s (seq %d) after crash: %+v, %v", iter, id, seq, got.Seq, err)
		}
	}

	var mu sync.Mutex
	var ackedNow []Event
	progress := make(chan struct{}, 1)
	writers := 1 + rng.IntN(4)
	var wg sync.WaitGroup
	for w := range writers {
		wrng := rand.New(rand.NewPCG(rng.Uint64(), 0))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				n := 1 + wrng.IntN(3)
				evs := make([]Event, n)
				for j := range evs {
					evs[j] = Event{
						ID:   l.NewID(),
						Type: "E",
						Body: []byte(strings.Repeat(fmt.Sprint(w), wrng.IntN(200))),
					}
				}
				stream := fmt.Sprintf("task-%d", wrng.IntN(5))
				res, err := l.Append(ctx, stream, Any, evs...)
				if err != nil {
					if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
						t.Errorf("append: %v", err)
					}
					return
				}
				mu.Lock()
				ackedNow = append(ackedNow, res.Events...)
				mu.Unlock()
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
	}
	// Crash after a random number of acknowledged appends, while appends
	// are in flight.
	for range rng.IntN(30) {
		<-progress
	}
	mu.Lock()
	for _, e := range ackedNow {
		acked[e.ID] = e.Seq
	}
	mu.Unlock()
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
	cancel()
	wg.Wait()
	closeLog(t, l)
	return clone
}

// switchedFS wraps fs so that, while switched on, the operations match
// selects fail with err.
func switchedFS(fs vfs.FS, err error, match func(errorfs.Op) bool) (vfs.FS, func(on bool)) {
	var mu sync.Mutex
	inject := false
	efs := errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		mu.Lock()
		defer mu.Unlock()
		if inject && match(op) {
			return err
		}
		return nil
	}))
	return efs, func(on bool) {
		mu.Lock()
		inject = on
		mu.Unlock()
	}
}

// TestInjectedIOErrors makes the WAL fail (on write or on sync) in the middle
// of concurrent appends: the appends fail, no partial batch is ever visible,
// the log refuses writes afterwards, and after a restart every batch is
// either wholly present or wholly absent.
func TestInjectedIOErrors(t *testing.T) {
	for name, kind := range map[string]errorfs.OpKind{"wal-write": errorfs.OpFileWrite, "wal-sync": errorfs.OpFileSync} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			efs, inject := switchedFS(mem, errorfs.ErrInjected, func(op errorfs.Op) bool {
				return strings.HasSuffix(op.Path, ".log") && (op.Kind == kind || (kind == errorfs.OpFileSync && op.Kind == errorfs.OpFileSyncData))
			})
			l := mustOpen(t, "db", testOptions(efs))
			appendN(t, l, "s", "OK", 10)
			inject(true)

			var wg sync.WaitGroup
			batches := make([][]Event, 8)
			errs := make([]error, 8)
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					evs := []Event{{ID: l.NewID(), Type: "X"}, {ID: l.NewID(), Type: "Y"}, {ID: l.NewID(), Type: "Z"}}
					batches[w] = evs
					_, errs[w] = l.Append(ctx, fmt.Sprintf("w%d", w), Any, evs...)
				}()
			}
			wg.Wait()
			for w, err := range errs {
				if !errors.Is(err, ErrFailed) {
					t.Fatalf("append %d during I/O errors: %v", w, err)
				}
			}
			if l.Head() != 10 || len(collect(t, l.Scan(0, Forward))) != 10 {
				t.Fatalf("failed appends visible: head %d", l.Head())
			}
			for _, b := range batches {
				for _, e := range b {
					if _, err := l.Get(e.ID); !errors.Is(err, ErrNotFound) {
						t.Fatalf("failed event visible through Get: %v", err)
					}
				}
			}
			inject(false)
			// Health says so at once, and Failed has fired.
			select {
			case <-l.Failed():
			default:
				t.Fatal("Failed() not closed after a failed commit")
			}
			if h := l.Health(); !errors.Is(h, ErrFailed) || !errors.Is(h, errorfs.ErrInjected) {
				t.Fatalf("Health after a failed commit: %v", h)
			}
			// Poisoned: no retry, even now that the disk works.
			if _, err := l.Append(ctx, "s", Any, ev("AFTER", "")); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("append after failure: %v", err)
			}
			if err := l.WriteAux(ctx, func(b *AuxBatch) error { b.Set([]byte("k"), nil); return nil }); !errors.Is(err, ErrFailed) {
				t.Fatalf("WriteAux after failure: %v", err)
			}
			if got := collect(t, l.ReadStream("s", 0)); len(got) != 10 {
				t.Fatalf("reads after failure: %d events", len(got))
			}
			l.Close() // may report the failure

			// After a restart, each failed batch is all there or not at all.
			l = mustOpen(t, "db", testOptions(mem))
			defer closeLog(t, l)
			mustVerify(t, l)
			for w, b := range batches {
				present := 0
				for _, e := range b {
					if _, err := l.Get(e.ID); err == nil {
						present++
					}
				}
				if present != 0 && present != len(b) {
					t.Fatalf("batch %d partially present after restart: %d of %d", w, present, len(b))
				}
			}
			t.Logf("head after restart: %d", l.Head())
		})
	}
}

// TestInjectedStorageErrors fails the other files a commit depends on: the
// head marker (rewritten while a commit that reserves more sequences syncs, before it is acknowledged), and the
// MANIFEST (written by a background flush, where Pebble calls Fatalf). The
// log refuses writes, Health reports the cause (a full disk is ENOSPC), no
// panic escapes, and after a restart on a working disk every acknowledged
// event is there.
func TestInjectedStorageErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		match func(op errorfs.Op) bool
		// appends is how many 16 KiB events to append with errors on;
		// enough to fill a 1 MiB memtable for the MANIFEST.
		appends int
	}{
		{"marker", func(op errorfs.Op) bool {
			return strings.Contains(op.Path, MarkerFile) && (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpFileWrite)
		}, reserveStep + 1},
		{"manifest", func(op errorfs.Op) bool {
			return strings.Contains(op.Path, "MANIFEST") && (op.Kind == errorfs.OpCreate ||
				op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData)
		}, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			efs, inject := switchedFS(mem, syscall.ENOSPC, c.match)
			o := testOptions(efs)
			o.MemTableSize = 1 << 20
			l := mustOpen(t, "db", o)
			inject(true)
			var acked []Event
			body := bytes.Repeat([]byte("x"), 16<<10)
			for range c.appends {
				res, err := l.Append(ctx, "s", Any, Event{Type: "BIG", Body: body})
				if err != nil {
					if !errors.Is(err, ErrFailed) {
						t.Fatalf("append: %v", err)
					}
					break
				}
				acked = append(acked, res.Events...)
			}
			<-l.Failed() // the flush fails in the background
			if h := l.Health(); !errors.Is(h, ErrFailed) || !errors.Is(h, syscall.ENOSPC) {
				t.Fatalf("Health: %v", h)
			}
			if _, err := l.Append(ctx, "s", Any, ev("AFTER", "")); !errors.Is(err, ErrFailed) {
				t.Fatalf("append after the failure: %v", err)
			}
			l.Close() // may report the failure
			inject(false)

			l = mustOpen(t, "db", testOptions(mem))
			defer closeLog(t, l)
			mustVerify(t, l)
			for _, e := range acked {
				if _, err := l.Get(e.ID); err != nil {
					t.Fatalf("acknowledged event %d lost: %v", e.Seq, err)
				}
			}
			t.Logf("%d acknowledged before the failure, head %d after restart", len(acked), l.Head())
		})
	}
}

// TestOpenOnFullDisk opens an existing log while every write fails with
// ENOSPC, as a restart on a still-full disk does: Open fails with the
// cause (the daemon exits non-zero and its supervisor retries), nothing
// panics, and once space is back the log opens with every event.
func TestOpenOnFullDisk(t *testing.T) {
	mem := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(mem))
	appendN(t, l, "s", "E", 20)
	closeLog(t, l)
	full := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData ||
			op.Kind == errorfs.OpCreate {
			return syscall.ENOSPC
		}
		return nil
	}))
	if l, err := Open("db", testOptions(full)); err == nil {
		l.Close()
		t.Fatal("Open on a full disk succeeded")
	} else if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Open on a full disk: %v, want the ENOSPC", err)
	}
	l = mustOpen(t, "db", testOptions(mem))
	defer closeLog(t, l)
	if l.Head() != 20 {
		t.Fatalf("head %d after the disk came back", l.Head())
	}
	mustVerify(t, l)
}
