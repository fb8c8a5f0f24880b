package eventlog

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestScanBorrowed: a borrowed scan reads the events a copying scan does
// (the caller copies what it keeps before Next), and reports a missing
// record the same way.
func TestScanBorrowed(t *testing.T) {
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	for i := range 50 {
		mustAppend(t, l, fmt.Sprintf("s%d", i%4), Any, Event{Type: fmt.Sprintf("T%d", i%3), Body: []byte(strings.Repeat("b", i)),
			Metadata: map[string]string{"k": fmt.Sprint(i)}})
	}
	want := l.Scan(5, Forward)
	got := l.ScanBorrowed(5)
	n := 0
	for want.Next() {
		if !got.Next() {
			t.Fatalf("borrowed scan ended at %d: %v", n, got.Err())
		}
		w, g := want.Event(), got.Event()
		if c := got.Current(); fmt.Sprintf("%+v", *c) != fmt.Sprintf("%+v", g) {
			t.Fatalf("event %d: in place %+v, Event %+v", n, *c, g)
		}
		// What a caller keeps it copies; compare the copies.
		gs, gt, gb := strings.Clone(g.Stream), strings.Clone(g.Type), bytes.Clone(g.Body)
		if w.Seq != g.Seq || w.Stream != gs || w.Type != gt || !bytes.Equal(w.Body, gb) || w.ID != g.ID || fmt.Sprint(w.Metadata) != fmt.Sprint(g.Metadata) {
			t.Fatalf("event %d: borrowed %+v, copied %+v", n, g, w)
		}
		n++
	}
	if got.Next() || n != 46 {
		t.Fatalf("borrowed scan: %d events, more after: %v", n, got.Err())
	}
	if err := want.Close(); err != nil {
		t.Fatal(err)
	}
	if err := got.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOwnedEventsOutliveTheirRecords: the events of the iterators that are
// not ScanBorrowed's are the caller's. Every event kept from them, through
// Event or Current, and the current one at Close, keeps its content after
// the iterator moved on, closed, and Pebble's blocks were read again over a
// small cache.
func TestOwnedEventsOutliveTheirRecords(t *testing.T) {
	o := testOptions(vfs.Default)
	o.CacheSize = 1 << 20
	l := mustOpen(t, t.TempDir(), o)
	defer closeLog(t, l)
	body := func(i int) []byte { return []byte(fmt.Sprintf("%0500d", i)) }
	const n = 4000
	for i := 0; i < n; i += 100 {
		evs := make([]Event, 100)
		for j := range evs {
			evs[j] = Event{Type: fmt.Sprintf("T%d", (i+j)%7), Body: body(i + j)}
		}
		mustAppend(t, l, fmt.Sprintf("s%d", i/100%5), Any, evs...)
	}
	if err := l.db.Flush(); err != nil {
		t.Fatal(err)
	}
	check := func(what string, e Event) {
		t.Helper()
		i := int(e.Seq) - 1
		if e.Seq == 0 || e.Type != fmt.Sprintf("T%d", i%7) || e.Stream != fmt.Sprintf("s%d", i/100%5) || !bytes.Equal(e.Body, body(i)) {
			t.Fatalf("%s: seq %d kept as %q %q %.20q...", what, e.Seq, e.Stream, e.Type, e.Body)
		}
	}
	type kept struct {
		what string
		ev   Event
	}
	var all []kept
	read := func(what string, it *Iterator, current bool) {
		k := 0
		for it.Next() {
			if current {
				all = append(all, kept{what, *it.Current()})
			} else {
				all = append(all, kept{what, it.Event()})
			}
			k++
		}
		if err := it.Close(); err != nil || k == 0 {
			t.Fatalf("%s: %d events, %v", what, k, err)
		}
	}
	read("Scan, Event", l.Scan(1, Forward), false)
	read("Scan, Current", l.Scan(1, Forward), true)
	read("Scan backward", l.Scan(n, Backward), false)
	read("ScanChecked", l.ScanChecked(1, false), true)
	read("ReadStream", l.ReadStream("s3", 1), false)
	read("ReadStream, Current", l.ReadStream("s1", 1), true)
	// The current event when the iterator is closed, asked for later.
	var closed []*Iterator
	for _, at := range []uint64{1, 1500, n} {
		it := l.Scan(at, Forward)
		if !it.Next() {
			t.Fatal(it.Err())
		}
		it.Close()
		closed = append(closed, it)
	}
	// Read everything again, borrowed, so that the small cache hands
	// the blocks' memory to other blocks.
	for range 3 {
		it := l.ScanBorrowed(1)
		for it.Next() {
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	for _, it := range closed {
		check("closed", it.Event())
	}
	for _, k := range all {
		check(k.what, k.ev)
	}
}
