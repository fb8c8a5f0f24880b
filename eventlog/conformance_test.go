package eventlog

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// opener opens a fresh, empty log for one subtest and arranges its closing.
type opener func(t *testing.T, o *Options) *Log

// runConformance is the log's behavioural contract, as titled cases. Every
// implementation (and every filesystem) must pass all of them.
func runConformance(t *testing.T, open opener) {
	ctx := context.Background()
	cases := []struct {
		name string
		fn   func(t *testing.T, l *Log, clock *testClock)
	}{
		{"append assigns seq, version, id, time and correlation", func(t *testing.T, l *Log, clock *testClock) {
			res := mustAppend(t, l, "task-1", NoStream, ev("A", "a"), ev("B", "b"))
			if res.FirstSeq != 1 || res.LastSeq != 2 || res.Version != 2 || len(res.Events) != 2 {
				t.Fatalf("result %+v", res)
			}
			for i, e := range res.Events {
				if e.Seq != uint64(i+1) || e.Version != uint64(i+1) || e.Stream != "task-1" {
					t.Errorf("event %d: seq %d version %d stream %q", i, e.Seq, e.Version, e.Stream)
				}
				if e.ID.IsZero() || e.Correlation != e.ID || e.Time.IsZero() || e.Time.Location() != time.UTC {
					t.Errorf("event %d: id %s correlation %s time %v", i, e.ID, e.Correlation, e.Time)
				}
			}
			if res.Events[0].ID.Compare(res.Events[1].ID) >= 0 {
				t.Errorf("ids not increasing: %s %s", res.Events[0].ID, res.Events[1].ID)
			}
			res2 := mustAppend(t, l, "task-2", Any, ev("C", ""))
			if res2.FirstSeq != 3 || res2.Version != 1 {
				t.Fatalf("second stream: %+v", res2)
			}
			if l.Head() != 3 {
				t.Fatalf("head %d", l.Head())
			}
		}},
		{"stored events read back identical", func(t *testing.T, l *Log, clock *testClock) {
			in := Event{
				ID: l.NewID(), Type: "T", Time: time.Date(2030, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600)),
				Schema: 7, Metadata: map[string]string{"b": "2", "a": "1"}, Body: []byte{0x81, 0xa1, 'k', 0x01},
				Causation: idFrom(99), Correlation: idFrom(100),
			}
			res := mustAppend(t, l, "s", Any, in)
			got, err := l.Get(in.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, res.Events[0]) {
				t.Fatalf("read %+v\nappended %+v", got, res.Events[0])
			}
			if !got.Time.Equal(in.Time) || got.Time.Location() != time.UTC {
				t.Errorf("time %v, want %v in UTC", got.Time, in.Time)
			}
			scanned := collect(t, l.Scan(1, Forward))
			if len(scanned) != 1 || !reflect.DeepEqual(scanned[0], got) {
				t.Fatalf("scan %+v", scanned)
			}
		}},
		{"expected version conflicts name the current version", func(t *testing.T, l *Log, clock *testClock) {
			mustAppend(t, l, "s", NoStream, ev("A", ""))
			mustAppend(t, l, "s", Exactly(1), ev("B", ""))
			mustAppend(t, l, "s", Any, ev("C", ""))
			for _, exp := range []ExpectedVersion{NoStream, Exactly(2), Exactly(4)} {
				_, err := l.Append(ctx, "s", exp, ev("X", ""))
				var ce *ConflictError
				if !errors.Is(err, ErrConflict) || !errors.As(err, &ce) || ce.Current != 3 || ce.Expected != exp {
					t.Fatalf("expected %s: %v", exp, err)
				}
				if !strings.Contains(err.Error(), "current version is 3") {
					t.Errorf("message %q does not say the current version", err)
				}
			}
			if v, _ := l.StreamVersion("s"); v != 3 || l.Head() != 3 {
				t.Fatalf("version %d head %d after conflicts", v, l.Head())
			}
			mustAppend(t, l, "s", Exactly(3), ev("D", ""))
		}},
		{"append multi is atomic across streams", func(t *testing.T, l *Log, clock *testClock) {
			mustAppend(t, l, "child", NoStream, ev("A", ""))
			_, err := l.AppendMulti(ctx,
				StreamAppend{Stream: "parent", Expected: NoStream, Events: []Event{ev("P", "")}},
				StreamAppend{Stream: "child", Expected: NoStream, Events: []Event{ev("C", "")}})
			if !errors.Is(err, ErrConflict) {
				t.Fatalf("want conflict, got %v", err)
			}
			if v, _ := l.StreamVersion("parent"); v != 0 || l.Head() != 1 {
				t.Fatalf("partial multi-append: parent version %d head %d", v, l.Head())
			}
			res, err := l.AppendMulti(ctx,
				StreamAppend{Stream: "parent", Expected: NoStream, Events: []Event{ev("P1", ""), ev("P2", "")}},
				StreamAppend{Stream: "child", Expected: Exactly(1), Events: []Event{ev("C", "")}},
				StreamAppend{Stream: "parent", Expected: Exactly(2), Events: []Event{ev("P3", "")}})
			if err != nil {
				t.Fatal(err)
			}
			want := []AppendResult{{FirstSeq: 2, LastSeq: 3, Version: 2}, {FirstSeq: 4, LastSeq: 4, Version: 2}, {FirstSeq: 5, LastSeq: 5, Version: 3}}
			for i := range want {
				if res[i].FirstSeq != want[i].FirstSeq || res[i].LastSeq != want[i].LastSeq || res[i].Version != want[i].Version {
					t.Errorf("result %d: %+v, want %+v", i, res[i], want[i])
				}
			}
		}},
		{"invalid appends are rejected", func(t *testing.T, l *Log, clock *testClock) {
			id := l.NewID()
			for name, fn := range map[string]func() error{
				"empty stream":  func() error { _, err := l.Append(ctx, "", Any, ev("A", "")); return err },
				"NUL in stream": func() error { _, err := l.Append(ctx, "a\x00b", Any, ev("A", "")); return err },
				"long stream":   func() error { _, err := l.Append(ctx, strings.Repeat("s", 257), Any, ev("A", "")); return err },
				"empty type":    func() error { _, err := l.Append(ctx, "s", Any, ev("", "")); return err },
				"no events":     func() error { _, err := l.Append(ctx, "s", Any); return err },
				"no streams":    func() error { _, err := l.AppendMulti(ctx); return err },
				"bad expected":  func() error { _, err := l.Append(ctx, "s", ExpectedVersion(-2), ev("A", "")); return err },
				"duplicate id": func() error {
					_, err := l.Append(ctx, "s", Any, Event{ID: id, Type: "A"}, Event{ID: id, Type: "A"})
					return err
				},
				"huge metadata": func() error {
					_, err := l.Append(ctx, "s", Any, Event{Type: "A", Metadata: map[string]string{"k": strings.Repeat("v", 5000)}})
					return err
				},
				"time too late": func() error {
					_, err := l.Append(ctx, "s", Any, Event{Type: "A", Time: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)})
					return err
				},
				"body too large": func() error {
					_, err := l.Append(ctx, "s", Any, Event{Type: "A", Body: make([]byte, 5<<20)})
					return err
				},
			} {
				if err := fn(); !errors.Is(err, ErrInvalid) {
					t.Errorf("%s: want ErrInvalid, got %v", name, err)
				}
			}
			if l.Head() != 0 {
				t.Fatalf("head %d after invalid appends", l.Head())
			}
		}},
		{"idempotent replay returns the first positions", func(t *testing.T, l *Log, clock *testClock) {
			a, b := Event{ID: l.NewID(), Type: "A", Body: []byte("1")}, Event{ID: l.NewID(), Type: "B", Body: []byte("2")}
			first := mustAppend(t, l, "s", NoStream, a, b)
			mustAppend(t, l, "s", Any, ev("C", ""))
			again, err := l.Append(ctx, "s", NoStream, a, b) // stale expected version: still a replay
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again, first) {
				t.Fatalf("replay %+v\nfirst %+v", again, first)
			}
			if l.Head() != 3 {
				t.Fatalf("replay wrote: head %d", l.Head())
			}
		}},
		{"id reuse with different content fails", func(t *testing.T, l *Log, clock *testClock) {
			a := Event{ID: l.NewID(), Type: "A", Body: []byte("1")}
			mustAppend(t, l, "s", Any, a)
			for name, e := range map[string]Event{
				"body":   {ID: a.ID, Type: "A", Body: []byte("2")},
				"type":   {ID: a.ID, Type: "B", Body: []byte("1")},
				"schema": {ID: a.ID, Type: "A", Body: []byte("1"), Schema: 2},
			} {
				if _, err := l.Append(ctx, "s", Any, e); !errors.Is(err, ErrIDReused) {
					t.Errorf("%s: want ErrIDReused, got %v", name, err)
				}
			}
			if _, err := l.Append(ctx, "other", Any, a); !errors.Is(err, ErrIDReused) {
				t.Errorf("other stream: want ErrIDReused, got %v", err)
			}
			_, err := l.Append(ctx, "s", Any, a, Event{ID: l.NewID(), Type: "B"})
			if !errors.Is(err, ErrIDReused) || !strings.Contains(err.Error(), "partial replay") {
				t.Errorf("partial replay: %v", err)
			}
			if l.Head() != 1 {
				t.Fatalf("head %d", l.Head())
			}
		}},
		{"same id twice in one group commits once", func(t *testing.T, l *Log, clock *testClock) {
			a := Event{ID: l.NewID(), Type: "A"}
			errs := make(chan error, 8)
			results := make(chan AppendResult, 8)
			for range 8 {
				go func() {
					res, err := l.Append(ctx, "s", Any, a)
					results <- res
					errs <- err
				}()
			}
			for range 8 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
				if res := <-results; res.FirstSeq != 1 {
					t.Fatalf("replay position %d", res.FirstSeq)
				}
			}
			if l.Head() != 1 {
				t.Fatalf("head %d", l.Head())
			}
		}},
		{"scan forward and backward from a position", func(t *testing.T, l *Log, clock *testClock) {
			for i := range 10 {
				mustAppend(t, l, fmt.Sprintf("s%d", i%3), Any, ev("E", fmt.Sprint(i)))
			}
			check := func(from uint64, dir Direction, want []uint64) {
				t.Helper()
				if got := seqs(collect(t, l.Scan(from, dir))); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Errorf("Scan(%d, %d) = %v, want %v", from, dir, got, want)
				}
			}
			check(0, Forward, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
			check(8, Forward, []uint64{8, 9, 10})
			check(11, Forward, nil)
			check(3, Backward, []uint64{3, 2, 1})
			check(^uint64(0), Backward, []uint64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1})
			check(0, Backward, nil)
		}},
		{"iterators see the log as of their creation", func(t *testing.T, l *Log, clock *testClock) {
			mustAppend(t, l, "s", Any, ev("A", ""))
			it := l.Scan(1, Forward)
			st := l.ReadStream("s", 1)
			mustAppend(t, l, "s", Any, ev("B", ""))
			if got := seqs(collect(t, it)); !slices.Equal(got, []uint64{1}) {
				t.Errorf("scan saw %v", got)
			}
			if got := seqs(collect(t, st)); !slices.Equal(got, []uint64{1}) {
				t.Errorf("stream read saw %v", got)
			}
		}},
		{"read a stream from a version", func(t *testing.T, l *Log, clock *testClock) {
			for i := range 6 {
				mustAppend(t, l, []string{"a", "b", "ab"}[i%3], Any, ev("E", fmt.Sprint(i)))
			}
			got := collect(t, l.ReadStream("a", 0))
			if !slices.Equal(seqs(got), []uint64{1, 4}) || got[1].Version != 2 || string(got[1].Body) != "3" {
				t.Fatalf("stream a: %+v", got)
			}
			if got := seqs(collect(t, l.ReadStream("a", 2))); !slices.Equal(got, []uint64{4}) {
				t.Fatalf("stream a from 2: %v", got)
			}
			if got := collect(t, l.ReadStream("nope", 0)); len(got) != 0 {
				t.Fatalf("missing stream: %v", got)
			}
			it := l.ReadStream("", 0)
			if it.Next() || !errors.Is(it.Close(), ErrInvalid) {
				t.Fatal("invalid stream name accepted")
			}
			if v, err := l.StreamVersion("ab"); err != nil || v != 2 {
				t.Fatalf("StreamVersion(ab) = %d, %v", v, err)
			}
			if v, err := l.StreamVersion("nope"); err != nil || v != 0 {
				t.Fatalf("StreamVersion(nope) = %d, %v", v, err)
			}
		}},
		{"get by id", func(t *testing.T, l *Log, clock *testClock) {
			res := mustAppend(t, l, "s", Any, ev("A", "x"), ev("B", "y"))
			got, err := l.Get(res.Events[1].ID)
			if err != nil || got.Seq != 2 || got.Type != "B" {
				t.Fatalf("Get: %+v %v", got, err)
			}
			if _, err := l.Get(idFrom(12345)); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get(unknown): %v", err)
			}
			if got, err := l.GetSeq(1); err != nil || got.Type != "A" {
				t.Fatalf("GetSeq(1): %+v %v", got, err)
			}
			if _, err := l.GetSeq(3); !errors.Is(err, ErrNotFound) {
				t.Fatalf("GetSeq(3): %v", err)
			}
		}},
		{"children by causation and inherited correlation", func(t *testing.T, l *Log, clock *testClock) {
			root := mustAppend(t, l, "t", Any, ev("ROOT", "")).Events[0]
			c1 := mustAppend(t, l, "t", Any, Event{Type: "C1", Causation: root.ID}).Events[0]
			mustAppend(t, l, "other", Any, ev("NOISE", ""))
			res := mustAppend(t, l, "u", Any, Event{ID: l.NewID(), Type: "C2", Causation: root.ID}, Event{Type: "G", Causation: c1.ID})
			c2, g := res.Events[0], res.Events[1]
			kids := collect(t, l.Children(root.ID))
			if !slices.Equal(seqs(kids), []uint64{c1.Seq, c2.Seq}) {
				t.Fatalf("children %v", seqs(kids))
			}
			if got := collect(t, l.Children(c1.ID)); !slices.Equal(seqs(got), []uint64{g.Seq}) {
				t.Fatalf("grandchildren %v", seqs(got))
			}
			if len(collect(t, l.Children(g.ID))) != 0 {
				t.Fatal("leaf has children")
			}
			for _, e := range []Event{c1, c2, g} {
				if e.Correlation != root.ID {
					t.Errorf("%s correlation %s, want root %s", e.Type, e.Correlation, root.ID)
				}
			}
			// A cause earlier in the same append.
			a := Event{ID: l.NewID(), Type: "A"}
			b := Event{Type: "B", Causation: a.ID}
			res = mustAppend(t, l, "v", Any, a, b)
			if res.Events[1].Correlation != a.ID {
				t.Errorf("in-append causation: correlation %s, want %s", res.Events[1].Correlation, a.ID)
			}
			// An unknown cause: the event is its own root.
			orphan := mustAppend(t, l, "v", Any, Event{Type: "O", Causation: idFrom(7)}).Events[0]
			if orphan.Correlation != orphan.ID {
				t.Errorf("orphan correlation %s", orphan.Correlation)
			}
		}},
		{"subscription catches up then goes live", func(t *testing.T, l *Log, clock *testClock) {
			mustAppend(t, l, "s", Any, ev("A", ""), ev("B", ""))
			sub := l.Subscribe(ctx, 2)
			defer sub.Close()
			e, err := sub.Next(ctx)
			if err != nil || e.Seq != 2 {
				t.Fatalf("catch-up: %+v %v", e, err)
			}
			appended := make(chan error, 1)
			go func() {
				_, err := l.Append(ctx, "s", Any, ev("C", "live"))
				appended <- err
			}()
			e, err = sub.Next(ctx)
			if aerr := <-appended; aerr != nil {
				t.Fatal(aerr)
			}
			if err != nil || e.Seq != 3 || string(e.Body) != "live" {
				t.Fatalf("live: %+v %v", e, err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := sub.Next(cctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Next: %v", err)
			}
			sub.Close()
			if _, err := sub.Next(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("Next after Close: %v", err)
			}
		}},
		{"aux key space", func(t *testing.T, l *Log, clock *testClock) {
			err := l.WriteAux(ctx, func(b *AuxBatch) error {
				b.Set([]byte("proj/a"), []byte("1"))
				b.Set([]byte("proj/b"), []byte("2"))
				b.Set([]byte("proj/c"), []byte("3"))
				b.Set([]byte("other"), []byte("4"))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if v, err := l.GetAux([]byte("proj/b")); err != nil || string(v) != "2" {
				t.Fatalf("GetAux: %q %v", v, err)
			}
			err = l.WriteAux(ctx, func(b *AuxBatch) error {
				b.Delete([]byte("proj/a"))
				b.DeleteRange([]byte("proj/c"), []byte("proj/d"))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.GetAux([]byte("proj/a")); !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted key: %v", err)
			}
			it := l.ScanAux([]byte("proj/"))
			var keys []string
			for it.Next() {
				keys = append(keys, string(it.Key())+"="+string(it.Value()))
			}
			if err := it.Close(); err != nil || !slices.Equal(keys, []string{"proj/b=2"}) {
				t.Fatalf("ScanAux: %v %v", keys, err)
			}
			fail := errors.New("abort")
			if err := l.WriteAux(ctx, func(b *AuxBatch) error { b.Set([]byte("z"), nil); return fail }); err != fail {
				t.Fatalf("aborted WriteAux: %v", err)
			}
			if _, err := l.GetAux([]byte("z")); !errors.Is(err, ErrNotFound) {
				t.Fatal("aborted WriteAux wrote")
			}
			// Aux keys never reach the log.
			if err := l.WriteAux(ctx, func(b *AuxBatch) error { b.DeleteRange(nil, nil); return nil }); err != nil {
				t.Fatal(err)
			}
			mustAppend(t, l, "s", Any, ev("A", ""))
			if rep := mustVerify(t, l); rep.AuxKeys != 0 || rep.Events != 1 {
				t.Fatalf("report %+v", rep)
			}
		}},
		{"ids are monotonic even if the clock goes back", func(t *testing.T, l *Log, clock *testClock) {
			prev := l.NewID()
			for i := range 100 {
				if i == 50 {
					clock.mu.Lock()
					clock.t = clock.t.Add(-time.Hour)
					clock.mu.Unlock()
				}
				id := l.NewID()
				if id.Compare(prev) <= 0 {
					t.Fatalf("id %d: %s after %s", i, id, prev)
				}
				prev = id
			}
		}},
		{"cancelled context", func(t *testing.T, l *Log, clock *testClock) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := l.Append(cctx, "s", Any, ev("A", "")); !errors.Is(err, context.Canceled) {
				t.Fatalf("Append: %v", err)
			}
			if l.Head() != 0 {
				t.Fatal("cancelled append was written")
			}
		}},
		{"verify a sound log", func(t *testing.T, l *Log, clock *testClock) {
			for i := range 50 {
				mustAppend(t, l, fmt.Sprintf("s%d", i%7), Any, Event{Type: "E", Causation: idFrom(uint64(i % 4))})
			}
			rep := mustVerify(t, l)
			if rep.Events != 50 || rep.Head != 50 || rep.Streams != 7 || rep.StreamEntries != 50 || rep.IDEntries != 50 || rep.CausationEntries != 50 {
				t.Fatalf("report %+v", rep)
			}
		}},
		{"closed log refuses everything", func(t *testing.T, l *Log, clock *testClock) {
			mustAppend(t, l, "s", Any, ev("A", ""))
			it := l.Scan(1, Forward)
			sub := l.Subscribe(ctx, 2)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(ctx, "s", Any, ev("B", "")); !errors.Is(err, ErrClosed) {
				t.Errorf("Append: %v", err)
			}
			if it.Next() || !errors.Is(it.Err(), ErrClosed) {
				t.Errorf("open iterator: %v", it.Err())
			}
			it.Close()
			if _, err := sub.Next(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("subscription: %v", err)
			}
			if _, err := l.Get(idFrom(1)); !errors.Is(err, ErrClosed) {
				t.Errorf("Get: %v", err)
			}
			if it := l.Scan(1, Forward); it.Next() || !errors.Is(it.Err(), ErrClosed) {
				t.Errorf("Scan: %v", it.Err())
			}
			if err := l.WriteAux(ctx, func(*AuxBatch) error { return nil }); !errors.Is(err, ErrClosed) {
				t.Errorf("WriteAux: %v", err)
			}
			if _, err := l.Verify(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("Verify: %v", err)
			}
			if err := l.Close(); !errors.Is(err, ErrClosed) {
				t.Errorf("second Close: %v", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clock := newTestClock()
			o := &Options{Clock: clock.Now}
			l := open(t, o)
			c.fn(t, l, clock)
		})
	}
}

func TestConformance(t *testing.T) {
	t.Run("memfs", func(t *testing.T) {
		runConformance(t, func(t *testing.T, o *Options) *Log {
			o.FS = vfs.NewMem()
			l := mustOpen(t, "db", o)
			t.Cleanup(func() { closeLog(t, l) })
			return l
		})
	})
	t.Run("disk", func(t *testing.T) {
		runConformance(t, func(t *testing.T, o *Options) *Log {
			l := mustOpen(t, filepath.Join(t.TempDir(), "db"), o)
			t.Cleanup(func() { closeLog(t, l) })
			return l
		})
	})
}
