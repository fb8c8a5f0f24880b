package eventlog

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// streamIndexEntries returns the log's stream index entries as
// "stream/last=first+count".
func streamIndexEntries(t *testing.T, db pebble.Reader) []string {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{PrefixStream}, UpperBound: []byte{PrefixStream + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		s, last, _ := ParseStreamIndexKey(it.Key())
		first, n, ok := DecodeStreamIndexValue(it.Value())
		if !ok {
			t.Fatalf("malformed value %x", it.Value())
		}
		out = append(out, fmt.Sprintf("%s/%d=%d+%d", s, last, first, n))
	}
	return out
}

// TestStreamIndexOneEntryPerAppend: an append's events to one stream get
// one stream index entry, keyed by their last version; stream reads from
// any version, the stream's version and Verify see every event.
func TestStreamIndexOneEntryPerAppend(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(mem))
	defer closeLog(t, l)
	evs := func(n int) []Event {
		out := make([]Event, n)
		for i := range out {
			out[i] = ev("E", fmt.Sprint(i))
		}
		return out
	}
	mustAppend(t, l, "a", NoStream, evs(3)...)                                                       // a 1-3 at 1-3
	mustAppend(t, l, "b", NoStream, evs(1)...)                                                       // b 1 at 4
	if _, err := l.AppendMulti(ctx, StreamAppend{Stream: "a", Expected: Exactly(3), Events: evs(2)}, // a 4-5 at 5-6
		StreamAppend{Stream: "b", Expected: Exactly(1), Events: evs(4)}); err != nil { // b 2-5 at 7-10
		t.Fatal(err)
	}
	want := []string{"a/3=1+3", "a/5=5+2", "b/1=4+1", "b/5=7+4"}
	if got := streamIndexEntries(t, l.db); !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	wantSeqs := map[string][]uint64{"a": {1, 2, 3, 5, 6}, "b": {4, 7, 8, 9, 10}}
	for s, seqs := range wantSeqs {
		for from := range uint64(7) {
			var got []uint64
			for _, e := range collect(t, l.ReadStream(s, from)) {
				if e.Stream != s {
					t.Fatalf("read %s, got %+v", s, e)
				}
				got = append(got, e.Seq)
			}
			start := min(max(from, 1)-1, uint64(len(seqs)))
			if !slices.Equal(got, seqs[start:]) {
				t.Fatalf("ReadStream(%s, %d) = %v, want %v", s, from, got, seqs[start:])
			}
		}
		if v, err := l.StreamVersion(s); err != nil || v != 5 {
			t.Fatalf("StreamVersion(%s) = %d, %v", s, v, err)
		}
	}
	rep := mustVerify(t, l)
	if rep.StreamEntries != 4 || rep.Streams != 2 || rep.Events != 10 {
		t.Fatalf("report %+v", rep)
	}
	// The committer's version cache is not what answers: reopen.
	closeLog(t, l)
	l = mustOpen(t, "db", testOptions(mem))
	if _, err := l.Append(ctx, "a", Exactly(5), ev("E", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "b", Exactly(4), ev("E", "")); !errors.Is(err, ErrConflict) {
		t.Fatalf("append at a stale version: %v", err)
	}
}

// TestStreamIndexStreamReadSeesOnlyItsSnapshot: a stream read created
// before an append does not return the append's events, even where one
// entry covers events on both sides of the reader's head.
func TestStreamIndexReadBelowHead(t *testing.T) {
	mem := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(mem))
	defer closeLog(t, l)
	mustAppend(t, l, "a", NoStream, ev("E", "1"), ev("E", "2"), ev("E", "3"))
	it := l.ReadStream("a", 1)
	it.head = 2 // as if the append were half visible
	if got := seqs(collect(t, it)); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("read %v", got)
	}
	if v, s, err := l.lastStreamEntry("a", 2); err != nil || v != 2 || s != 2 {
		t.Fatalf("lastStreamEntry below the head: %d %d %v", v, s, err)
	}
}

// TestVerifyStreamIndexEntries damages an entry covering several events
// and checks that Verify names it, as it names a damaged per-event entry.
func TestVerifyStreamIndexEntries(t *testing.T) {
	// a: versions 1-3 at 1-3 (one entry), then 4 at 5; b: 1 at 4, 2-4 at 6-8.
	build := func(t *testing.T, damage func(db *pebble.DB)) *Log {
		mem := vfs.NewMem()
		l := mustOpen(t, "db", testOptions(mem))
		mustAppend(t, l, "a", NoStream, ev("E", ""), ev("E", ""), ev("E", ""))
		mustAppend(t, l, "b", NoStream, ev("E", ""))
		mustAppend(t, l, "a", Any, ev("E", ""))
		mustAppend(t, l, "b", Any, ev("E", ""), ev("E", ""), ev("E", ""))
		mustVerify(t, l)
		closeLog(t, l)
		db, err := pebble.Open("db", &pebble.Options{FS: mem, Logger: pebbleLogger{l: (&Options{}).EnsureDefaults().Logger}})
		if err != nil {
			t.Fatal(err)
		}
		damage(db)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, "db", testOptions(mem))
		t.Cleanup(func() { closeLog(t, l) })
		return l
	}
	cases := []struct {
		name   string
		damage func(db *pebble.DB)
		seq    uint64
		reason string
	}{
		{"entry deleted", func(db *pebble.DB) { del(t, db, StreamIndexKey("a", 3)) }, 1, `stream index entry ("a", 1) missing`},
		{"count too small", func(db *pebble.DB) {
			del(t, db, StreamIndexKey("a", 3))
			set(t, db, StreamIndexKey("a", 3), AppendStreamIndexValue(nil, 2, 2))
		}, 1, `stream index entry ("a", 1) missing`},
		{"first seq wrong", func(db *pebble.DB) {
			set(t, db, StreamIndexKey("b", 4), AppendStreamIndexValue(nil, 5, 3))
		}, 6, `stream index entry ("b", 2) points to 5, not 6`},
		{"count past the head", func(db *pebble.DB) {
			set(t, db, StreamIndexKey("b", 4), AppendStreamIndexValue(nil, 6, 4))
		}, 0, "outside the log"},
		{"count stored as 1", func(db *pebble.DB) {
			set(t, db, StreamIndexKey("a", 4), append(EncodeSeqValue(5), 1))
		}, 0, "malformed stream index entry"},
		{"overlapping entries", func(db *pebble.DB) {
			set(t, db, StreamIndexKey("a", 2), AppendStreamIndexValue(nil, 1, 2))
		}, 0, "indexed twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := build(t, tc.damage)
			rep, err := l.Verify(context.Background())
			if err == nil {
				t.Fatalf("verify passed: %+v", rep)
			}
			found := false
			for _, p := range rep.Problems {
				found = found || (p.Seq == tc.seq || tc.seq == 0) && contains(p.Reason, tc.reason)
			}
			if !found {
				t.Fatalf("problems %v, want seq %d %q", rep.Problems, tc.seq, tc.reason)
			}
			// Stream reads fail rather than skip or invent events.
			for _, s := range []string{"a", "b"} {
				it := l.ReadStream(s, 1)
				n := 0
				for it.Next() {
					n++
				}
				if err := it.Close(); err == nil && n != 4 {
					t.Fatalf("ReadStream(%s) read %d events without an error", s, n)
				}
			}
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestFormat3Upgrade: testdata/format3 (written by the build before one
// stream index entry per append) stays at format 3 read-only and becomes
// format 5 at the first writable open; format 4 (3 with holes) becomes 6.
// replay's TestOldFormatStreamIndex checks that its answers do not change.
func TestFormat3Upgrade(t *testing.T) {
	dir := copyDir(t, filepath.Join("testdata", "format3"))
	if got := formatOf(t, dir); got != FormatVersion3 {
		t.Fatalf("testdata at format %d, want 3", got)
	}
	ro, err := Open(dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	mustVerify(t, ro)
	closeLog(t, ro)
	if got := formatOf(t, dir); got != FormatVersion3 {
		t.Fatalf("a read-only open changed the format to %d", got)
	}
	l := mustOpen(t, dir, nil)
	mustVerify(t, l)
	closeLog(t, l)
	if got := formatOf(t, dir); got != FormatVersion {
		t.Fatalf("format %d after a writable open, want %d", got, FormatVersion)
	}

	dir = copyDir(t, filepath.Join("testdata", "format3"))
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{l: (&Options{}).EnsureDefaults().Logger}})
	if err != nil {
		t.Fatal(err)
	}
	set(t, db, FormatKey, []byte{0, 0, 0, byte(FormatVersion3Archived)})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	closeLog(t, mustOpen(t, dir, nil))
	if got := formatOf(t, dir); got != FormatVersionArchived {
		t.Fatalf("format %d, want %d", got, FormatVersionArchived)
	}
}
