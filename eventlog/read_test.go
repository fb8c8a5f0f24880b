package eventlog

import (
	"bytes"
	"fmt"
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
