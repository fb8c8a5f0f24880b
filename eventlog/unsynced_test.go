package eventlog

import (
	"context"
	mrand "math/rand"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestUnsyncedCrash: with Options.Unsynced, power loss at a random moment
// (only synced data kept, plus a random share of the rest) may lose the
// last appends, acknowledged or not, but the log always opens (the
// marker never claims a head that was not synced), what survives is a
// prefix of what was appended, in order, every index agrees (Verify), and
// everything appended before a clean Close or a head the marker recorded
// survives.
func TestUnsyncedCrash(t *testing.T) {
	rng, seed, iters := crashParams(t, 7, 60, 15)
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	var appended []Event // what the log held before the last crash, in order
	lost := 0
	for iter := range iters {
		l, err := Open("db", &Options{FS: fs, Unsynced: true, Entropy: mrand.New(mrand.NewSource(rng.Int64())), MemTableSize: 1 << 20})
		if err != nil {
			t.Fatalf("iteration %d (seed %d): open after power loss: %v", iter, seed, err)
		}
		if _, err := l.Verify(ctx); err != nil {
			t.Fatalf("iteration %d: verify: %v", iter, err)
		}
		head := l.Head()
		m, _ := l.marked()
		if head > uint64(len(appended)) || m.head > head {
			t.Fatalf("iteration %d: head %d, marker %d, %d appended", iter, head, m.head, len(appended))
		}
		lost += len(appended) - int(head)
		for i, ev := range collect(t, l.Scan(0, Forward)) {
			if ev.ID != appended[i].ID || ev.Seq != uint64(i+1) {
				t.Fatalf("iteration %d: event %d is %s, appended %s", iter, i+1, ev.ID, appended[i].ID)
			}
		}
		appended = appended[:head]
		if rng.IntN(2) == 0 {
			l.markEvery = 0 // the head recorded after every commit
		}
		for range 1 + rng.IntN(40) {
			res, err := l.Append(ctx, "s", Any, Event{ID: l.NewID(), Type: "E", Body: make([]byte, rng.IntN(300))})
			if err != nil {
				t.Fatal(err)
			}
			appended = append(appended, res.Events...)
		}
		if rng.IntN(4) == 0 {
			closeLog(t, l) // clean: everything synced
			l = mustOpen(t, "db", &Options{FS: fs, Unsynced: true})
			if l.Head() != uint64(len(appended)) {
				t.Fatalf("iteration %d: head %d after a clean close of %d", iter, l.Head(), len(appended))
			}
		}
		// The marker's head is synced: it survives the crash.
		m, _ = l.marked()
		must := m.head
		clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
		closeLog(t, l)
		fs = clone
		if l2, err := Open("db", &Options{FS: fs, Unsynced: true, ReadOnly: true}); err != nil {
			t.Fatalf("iteration %d: open read-only after power loss: %v", iter, err)
		} else {
			if l2.Head() < must {
				t.Fatalf("iteration %d: head %d after power loss, the marker had recorded %d", iter, l2.Head(), must)
			}
			closeLog(t, l2)
		}
	}
	t.Logf("%d appended events lost over %d crashes", lost, iters)
}
