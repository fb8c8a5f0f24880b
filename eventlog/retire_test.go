package eventlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// retireFixture appends three interleaved streams a, b, c (b stays), and a
// "$memory" event caused by a's first event, and returns the retirement of
// a and c.
func retireFixture(t testing.TB, l *Log) Retirement {
	t.Helper()
	var evs []Event
	for i := range 4 {
		for _, s := range []string{"a", "b", "c"} {
			evs = append(evs, mustAppend(t, l, s, Any, ev("E", fmt.Sprintf("%s%d", s, i))).Events...)
		}
	}
	mustAppend(t, l, "$memory", Any, Event{Type: "FACT", Causation: evs[0].ID})
	return retirementOf(t, l, "a", "c")
}

func retirementOf(t testing.TB, l *Log, streams ...string) Retirement {
	t.Helper()
	r := Retirement{Manifest: Event{ID: l.NewID(), Type: TypeEventsArchived, Body: []byte("manifest")}}
	for _, s := range streams {
		got := collect(t, l.ReadStream(s, 1))
		r.Streams = append(r.Streams, RetiredStream{Stream: s, Version: uint64(len(got))})
		for _, e := range got {
			r.Events = append(r.Events, RetiredEvent{Seq: e.Seq, ID: e.ID, Causation: e.Causation})
		}
	}
	slices.SortFunc(r.Events, func(a, b RetiredEvent) int { return int(a.Seq) - int(b.Seq) })
	return r
}

func TestRetire(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(mem))
	r := retireFixture(t, l)
	r.Aux = func(b *AuxBatch) error { b.Set([]byte("proj/gone"), nil); return nil }
	before := collect(t, l.Scan(1, Forward))
	head := l.Head()
	res, err := l.Retire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstSeq != head+1 || l.Head() != head+1 {
		t.Fatalf("manifest at %d, head %d, want %d", res.FirstSeq, l.Head(), head+1)
	}
	var want []uint64
	for _, e := range before {
		if e.Stream != "a" && e.Stream != "c" {
			want = append(want, e.Seq)
		}
	}
	want = append(want, head+1)
	check := func(t *testing.T, l *Log) {
		if got := seqs(collect(t, l.Scan(1, Forward))); !slices.Equal(got, want) {
			t.Fatalf("forward scan %v, want %v", got, want)
		}
		back := seqs(collect(t, l.Scan(head+1, Backward)))
		slices.Reverse(back)
		if !slices.Equal(back, want) {
			t.Fatalf("backward scan %v, want %v", back, want)
		}
		if got := seqs(collect(t, l.Scan(3, Forward))); !slices.Equal(got, want[1:]) {
			t.Fatalf("scan from inside a hole: %v, want %v", got, want[1:])
		}
		for _, from := range []uint64{1, 3} { // from a hole, from inside one
			sub := l.Subscribe(ctx, from)
			var got []uint64
			for _, w := range want {
				if w < from {
					continue
				}
				e, err := sub.Next(ctx)
				if err != nil {
					t.Fatalf("subscription from %d, after %v: %v", from, got, err)
				}
				got = append(got, e.Seq)
			}
			sub.Close()
			if w := slices.DeleteFunc(slices.Clone(want), func(s uint64) bool { return s < from }); !slices.Equal(got, w) {
				t.Fatalf("subscription from %d: %v, want %v", from, got, w)
			}
		}
		if _, err := l.GetSeq(1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("GetSeq of a removed event: %v", err)
		}
		if _, err := l.Get(r.Events[0].ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of a removed event: %v", err)
		}
		if v, err := l.StreamVersion("a"); err != nil || v != 0 {
			t.Fatalf("version of a removed stream: %d, %v", v, err)
		}
		if kids := collect(t, l.Children(r.Events[0].ID)); len(kids) != 1 || kids[0].Stream != "$memory" {
			t.Fatalf("kept child of a removed event: %+v", kids)
		}
		rep := mustVerify(t, l)
		if rep.Holes != 5 || rep.Retired != 8 {
			t.Fatalf("report: %d holes, %d retired; want 5, 8", rep.Holes, rep.Retired)
		}
		holes, err := l.Holes()
		if err != nil || len(holes) != 5 || holes[0] != (Hole{First: 1, Last: 1, Manifest: head + 1}) {
			t.Fatalf("holes %+v, %v", holes, err)
		}
		if _, err := l.GetAux([]byte("proj/gone")); err != nil {
			t.Fatalf("aux write of the retirement: %v", err)
		}
	}
	check(t, l)
	// A retry of the same retirement is idempotent.
	if again, err := l.Retire(ctx, r); err != nil || again.FirstSeq != res.FirstSeq {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	// Retiring again what is gone is refused.
	r2 := r
	r2.Manifest.ID = l.NewID()
	if _, err := l.Retire(ctx, r2); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second retirement of the same streams: %v", err)
	}
	if err := l.CompactRetired(ctx, 1, head); err != nil {
		t.Fatal(err)
	}
	check(t, l)
	closeLog(t, l)
	l = mustOpen(t, "db", testOptions(mem))
	defer closeLog(t, l)
	check(t, l)
	// Sequences go on after the manifest; a removed stream starts over.
	if res := mustAppend(t, l, "a", NoStream, ev("E", "new")); res.FirstSeq != head+2 || res.Version != 1 {
		t.Fatalf("append after retirement: %+v", res)
	}
	mustVerify(t, l)
}

func TestRetireRefused(t *testing.T) {
	ctx := context.Background()
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	r := retireFixture(t, l)
	head := l.Head()

	// A stream that grew after it was read: nothing happens. (Retire
	// finds the unlisted event; the committer's version check covers an
	// append that lands between that check and the commit.)
	mustAppend(t, l, "c", Any, ev("E", "late"))
	if _, err := l.Retire(ctx, r); !errors.Is(err, ErrInvalid) {
		t.Fatalf("retire a grown stream: %v", err)
	}
	l.testHookRetire = func() { mustAppend(t, l, "a", Any, ev("E", "racing")) }
	var ce *ConflictError
	if _, err := l.Retire(ctx, retirementOf(t, l, "a", "c")); !errors.As(err, &ce) || ce.Stream != "a" {
		t.Fatalf("retire a stream that grows before the commit: %v", err)
	}
	l.testHookRetire = nil
	if got, holes := collect(t, l.Scan(1, Forward)), mustHoles(t, l); len(got) != int(head)+2 || len(holes) != 0 {
		t.Fatalf("refused retirements changed the log: %d events, holes %v", len(got), holes)
	}
	for name, bad := range map[string]func(*Retirement){
		"type":        func(r *Retirement) { r.Manifest.Type = "X" },
		"count":       func(r *Retirement) { r.Events = r.Events[1:] },
		"order":       func(r *Retirement) { r.Events[0], r.Events[1] = r.Events[1], r.Events[0] },
		"system":      func(r *Retirement) { r.Streams[0].Stream = SystemStream },
		"beyond":      func(r *Retirement) { r.Events[len(r.Events)-1].Seq = 1 << 40 },
		"aux fails":   func(r *Retirement) { r.Aux = func(*AuxBatch) error { return errors.New("no") } },
		"no streams":  func(r *Retirement) { r.Streams = nil },
		"other event": func(r *Retirement) { r.Events[0].Seq = 2 }, // b's
		"wrong id":    func(r *Retirement) { r.Events[0].ID = r.Events[1].ID },
	} {
		r := retirementOf(t, l, "a", "c")
		bad(&r)
		if _, err := l.Retire(ctx, r); err == nil {
			t.Errorf("%s: retirement accepted", name)
		}
	}
	mustVerify(t, l)
}

func mustHoles(t testing.TB, l *Log) []Hole {
	t.Helper()
	h, err := l.Holes()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestVerifyHoles: a gap is accepted only where a hole key records it and
// points to an EVENTS_ARCHIVED event; anything else stays corruption.
func TestVerifyHoles(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*Log, uint64) {
		l := mustOpen(t, "db", testOptions(vfs.NewMem()))
		t.Cleanup(func() { closeLog(t, l) })
		r := retireFixture(t, l)
		res, err := l.Retire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return l, res.FirstSeq
	}
	raw := func(t *testing.T, l *Log, fn func(b *pebble.Batch)) {
		b := l.db.NewBatch()
		fn(b)
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	holeVal := func(last, manifest uint64) []byte {
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, last), manifest)
	}
	cases := map[string]struct {
		edit func(b *pebble.Batch, l *Log, manifest uint64)
		want string
	}{
		"gap without hole": {func(b *pebble.Batch, l *Log, m uint64) {
			e, _ := l.GetSeq(2)
			b.Delete(EventKey(2), nil)
			b.Delete(StreamIndexKey(e.Stream, e.Version), nil)
			b.Delete(IDIndexKey(e.ID), nil)
		}, "records 2 to 4 missing"},
		"hole without manifest": {func(b *pebble.Batch, l *Log, m uint64) {
			b.Set(holeKey(1), holeVal(1, m-1), nil) // m-1 is the $memory event
		}, "which is not a EVENTS_ARCHIVED event"},
		"record left in a hole": {func(b *pebble.Batch, l *Log, m uint64) {
			b.Set(holeKey(2), holeVal(2, m), nil)
		}, "inside the archived range"},
		"malformed hole": {func(b *pebble.Batch, l *Log, m uint64) {
			b.Set(holeKey(40), []byte{1}, nil)
		}, "malformed hole key"},
		"format": {func(b *pebble.Batch, l *Log, m uint64) {
			b.Set(FormatKey, binary.BigEndian.AppendUint32(nil, FormatVersion), nil)
		}, "the log has holes but format version 5"},
		"format 3": {func(b *pebble.Batch, l *Log, m uint64) {
			b.Set(FormatKey, binary.BigEndian.AppendUint32(nil, FormatVersion3), nil)
		}, "the log has holes but format version 3"},
		"format 1": {func(b *pebble.Batch, l *Log, m uint64) {
			b.Set(FormatKey, binary.BigEndian.AppendUint32(nil, FormatVersion1), nil)
		}, "the log has holes but format version 1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l, m := setup(t)
			raw(t, l, func(b *pebble.Batch) { tc.edit(b, l, m) })
			rep, err := l.Verify(ctx)
			if err == nil {
				t.Fatalf("verify passed: %+v", rep)
			}
			found := false
			for _, p := range rep.Problems {
				found = found || strings.Contains(p.Reason, tc.want)
			}
			if !found {
				t.Fatalf("problems %v, want one with %q", rep.Problems, tc.want)
			}
		})
	}
}

// TestRetireCrash simulates power loss at a random moment around a
// retirement running beside appenders: the recovered log has either every
// retired event and no manifest, or the manifest and none of them, and
// Verify passes.
func TestRetireCrash(t *testing.T) {
	rng, _, iters := crashParams(t, 1, *crashIters/4, 10)
	for iter := range iters {
		ctx := context.Background()
		fs := vfs.NewCrashableMem()
		o := &Options{FS: fs, Entropy: mrand.New(mrand.NewSource(rng.Int64())), MemTableSize: 1 << 20}
		l := mustOpen(t, "db", o)
		r := retireFixture(t, l)
		for i := range rng.IntN(50) {
			mustAppend(t, l, "b", Any, ev("E", fmt.Sprint(i)))
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := range 50 {
				if _, err := l.Append(ctx, "d", Any, ev("E", fmt.Sprint(i))); err != nil {
					return
				}
			}
		}()
		var clone *vfs.MemFS
		crashAt := rng.IntN(3)
		if crashAt == 0 {
			clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
		}
		_, err := l.Retire(ctx, r)
		if err != nil {
			t.Fatalf("iteration %d: retire: %v", iter, err)
		}
		if crashAt == 1 {
			clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
		}
		if err := l.CompactRetired(ctx, 1, r.Events[len(r.Events)-1].Seq); err != nil {
			t.Fatal(err)
		}
		if crashAt == 2 {
			clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
		}
		<-done
		closeLog(t, l)

		l = mustOpen(t, "db", &Options{FS: clone})
		mustVerify(t, l)
		_, gone := l.Get(r.Manifest.ID)
		retired := gone == nil
		for _, e := range r.Events {
			_, err := l.Get(e.ID)
			if retired != errors.Is(err, ErrNotFound) {
				t.Fatalf("iteration %d (crash %d): manifest present %v but event %d: %v", iter, crashAt, retired, e.Seq, err)
			}
		}
		if crashAt > 0 && !retired {
			t.Fatalf("iteration %d: acknowledged retirement lost", iter)
		}
		closeLog(t, l)
	}
}
