package eventlog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// syncGate wraps fs so that, once armed, the next WAL sync blocks until the
// test releases it, and then succeeds or fails with the given error.
type syncGate struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed when the held sync starts
	release chan error    // what the held sync returns
}

func newSyncGate(fs vfs.FS) (*syncGate, vfs.FS) {
	g := &syncGate{entered: make(chan struct{}), release: make(chan error, 1)}
	return g, errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") || (op.Kind != errorfs.OpFileSync && op.Kind != errorfs.OpFileSyncData) {
			return nil
		}
		g.mu.Lock()
		hold := g.armed
		g.armed = false
		g.mu.Unlock()
		if !hold {
			return nil
		}
		close(g.entered)
		return <-g.release
	}))
}

func (g *syncGate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

// TestUnsyncedGroupStaysInvisible holds a group's WAL sync after Pebble
// applied the group: the log shows nothing of it (Head, Scan, ReadStream,
// Get, GetSeq, StreamVersion, a live subscription) and acknowledges nothing,
// neither the group's append nor the later appends checked against it (one
// that expects the group's version, an idempotent replay of it), until the
// sync returns. If the sync succeeds, everything appears and is
// acknowledged in order; if it fails, nothing is, and the appends checked
// against the lost group fail too.
func TestUnsyncedGroupStaysInvisible(t *testing.T) {
	for _, syncErr := range []error{nil, errorfs.ErrInjected} {
		t.Run(fmt.Sprintf("sync-error=%v", syncErr), func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			gate, fs := newSyncGate(mem)
			l := mustOpen(t, "db", testOptions(fs))
			defer func() { closeLog(t, l) }()
			appendN(t, l, "before", "OK", 3)
			const head = 3
			sub := l.Subscribe(ctx, head+1)
			defer sub.Close()
			subGot := make(chan Event, 8)
			subErr := make(chan error, 1)
			go func() {
				for {
					e, err := sub.Next(ctx)
					if err != nil {
						subErr <- err
						return
					}
					subGot <- e
				}
			}()

			type outcome struct {
				res AppendResult
				err error
			}
			appendAsync := func(exp ExpectedVersion, evs ...Event) <-chan outcome {
				ch := make(chan outcome, 1)
				go func() {
					res, err := l.Append(ctx, "a", exp, evs...)
					ch <- outcome{res, err}
				}()
				return ch
			}

			gate.arm()
			released := false
			defer func() {
				if !released { // a failed check: let Close finish
					gate.release <- nil
				}
			}()
			group := []Event{{ID: l.NewID(), Type: "A1"}, {ID: l.NewID(), Type: "A2"}}
			first := appendAsync(NoStream, group...)
			<-gate.entered
			// The sync is held. Pebble has the group (or is about to: the
			// WAL write precedes the memtable's), so wait until its reads
			// show it; the log's must not.
			for {
				if _, closer, err := l.db.Get(EventKey(head + 2)); err == nil {
					closer.Close()
					break
				} else if !errors.Is(err, pebble.ErrNotFound) {
					t.Fatal(err)
				}
				runtime.Gosched()
			}
			// Checked against the applied group, answered after its sync.
			next := appendAsync(Exactly(2), ev("B", ""))
			replay := appendAsync(NoStream, group...)

			if h := l.Head(); h != head {
				t.Fatalf("Head %d while the group's sync is held, want %d", h, head)
			}
			if got := collect(t, l.Scan(0, Forward)); len(got) != head {
				t.Fatalf("Scan shows %d events while the sync is held, want %d", len(got), head)
			}
			if got := collect(t, l.ReadStream("a", 0)); len(got) != 0 {
				t.Fatalf("ReadStream shows %d unsynced events", len(got))
			}
			if _, err := l.Get(group[0].ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of an unsynced event: %v", err)
			}
			if _, err := l.GetSeq(head + 1); !errors.Is(err, ErrNotFound) {
				t.Fatalf("GetSeq of an unsynced event: %v", err)
			}
			if v, err := l.StreamVersion("a"); err != nil || v != 0 {
				t.Fatalf("StreamVersion of an unsynced stream: %d, %v", v, err)
			}
			if it := l.Scan(head+2, Forward); !errors.Is(it.Close(), ErrBeyondHead) {
				t.Fatal("Scan from beyond the durable head did not fail with ErrBeyondHead")
			}
			for name, ch := range map[string]<-chan outcome{"the group's append": first, "an append checked against it": next, "a replay of it": replay} {
				select {
				case o := <-ch:
					t.Fatalf("%s answered before the group's sync returned: %+v", name, o)
				default:
				}
			}
			select {
			case e := <-subGot:
				t.Fatalf("subscription delivered unsynced seq %d", e.Seq)
			default:
			}

			gate.release <- syncErr
			released = true
			a, b, r := <-first, <-next, <-replay
			if syncErr != nil {
				for name, o := range map[string]outcome{"the group's append": a, "an append checked against it": b, "a replay of it": r} {
					if !errors.Is(o.err, ErrFailed) {
						t.Fatalf("%s after its sync failed: %+v, want ErrFailed", name, o)
					}
				}
				if h := l.Head(); h != head {
					t.Fatalf("Head %d after the sync failed, want %d", h, head)
				}
				if _, err := l.Get(group[0].ID); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Get of an event whose sync failed: %v", err)
				}
				select {
				case e := <-subGot:
					t.Fatalf("subscription delivered seq %d of a failed sync", e.Seq)
				default:
				}
				l.Close() // reports the failure
				// After a restart the acknowledged events are there, and
				// the group wholly or not at all.
				l = mustOpen(t, "db", testOptions(mem))
				mustVerify(t, l)
				if h := l.Head(); h != head && h != head+2 {
					t.Fatalf("head after a restart: %d, want %d or %d", h, head, head+2)
				}
				return
			}
			if a.err != nil || a.res.FirstSeq != head+1 || a.res.LastSeq != head+2 {
				t.Fatalf("the group's append: %+v", a)
			}
			if b.err != nil || b.res.FirstSeq != head+3 || b.res.Version != 3 {
				t.Fatalf("the append checked against the group: %+v", b)
			}
			if r.err != nil || r.res.FirstSeq != head+1 || r.res.LastSeq != head+2 {
				t.Fatalf("the replay: %+v", r)
			}
			if h := l.Head(); h != head+3 {
				t.Fatalf("Head %d after the syncs, want %d", h, head+3)
			}
			for want := uint64(head + 1); want <= head+3; want++ {
				select {
				case e := <-subGot:
					if e.Seq != want {
						t.Fatalf("subscription delivered seq %d, want %d", e.Seq, want)
					}
				case err := <-subErr:
					t.Fatal(err)
				}
			}
			if got := seqs(collect(t, l.ReadStream("a", 0))); fmt.Sprint(got) != "[4 5 6]" {
				t.Fatalf("stream after the syncs: %v", got)
			}
		})
	}
}

// TestCommitterSmallGroupsUnderLoad runs concurrent appenders against
// groups of at most three events, so that requests queue while a group
// syncs and most groups are full, then closes the log while appends are
// still coming: nothing hangs, every acknowledged append is there after
// reopening, in its stream's order.
func TestCommitterSmallGroupsUnderLoad(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	o := testOptions(mem)
	o.MaxGroupEvents = 3
	l := mustOpen(t, "db", o)
	const writers, each = 16, 40
	var wg sync.WaitGroup
	acked := make([]int, writers) // appends acknowledged per stream
	closed := make(chan error, 1)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, err := l.Append(ctx, fmt.Sprintf("w%d", w), Exactly(uint64(i)), ev("E", fmt.Sprint(i)))
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("writer %d append %d: %v", w, i, err)
					}
					return
				}
				acked[w]++
				if w == 0 && i == each/2 {
					go func() { closed <- l.Close() }() // while the others still append
				}
			}
		}()
	}
	wg.Wait()
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	l = mustOpen(t, "db", testOptions(mem))
	defer closeLog(t, l)
	mustVerify(t, l)
	for w := range writers {
		got := collect(t, l.ReadStream(fmt.Sprintf("w%d", w), 0))
		if len(got) < acked[w] {
			t.Fatalf("stream w%d holds %d events, %d were acknowledged", w, len(got), acked[w])
		}
		for i, e := range got {
			if string(e.Body) != fmt.Sprint(i) {
				t.Fatalf("stream w%d event %d has body %q", w, i, e.Body)
			}
		}
	}
}
