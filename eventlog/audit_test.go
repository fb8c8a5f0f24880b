package eventlog

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestAuditHandsOutEveryRecord: an audit in steps hands out every record
// of a sound log, in order, as a scan reads it, and finishes with
// VerifyWith's report; a damaged record stops the records it hands out
// (Sound), and Finish audits the rest.
func TestAuditHandsOutEveryRecord(t *testing.T) {
	ctx := context.Background()
	l, evs := corruptLog(t, func(*pebble.DB, []Event) {})
	want, werr := l.Verify(ctx)
	a, err := l.NewAudit(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []Event
	for a.Next() {
		ev := a.Event()
		ev.Stream, ev.Type, ev.Body = string([]byte(ev.Stream)), string([]byte(ev.Type)), append([]byte(nil), ev.Body...)
		got = append(got, ev)
	}
	if !a.Sound() || a.Err() != nil || a.Archived() {
		t.Fatalf("sound %v, err %v, archived %v", a.Sound(), a.Err(), a.Archived())
	}
	if fmt.Sprint(got) != fmt.Sprint(evs) {
		t.Fatalf("audit handed out\n%v\nwant\n%v", got, evs)
	}
	rep, err := a.Finish()
	if fmt.Sprintf("%+v %v", rep, err) != fmt.Sprintf("%+v %v", want, werr) || err != nil {
		t.Fatalf("audit: %+v %v; Verify: %+v %v", rep, err, want, werr)
	}

	l, _ = corruptLog(t, func(db *pebble.DB, evs []Event) { del(t, db, EventKey(8)) })
	a, err = l.NewAudit(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for a.Next() {
		n++
	}
	if n != 7 || a.Sound() {
		t.Fatalf("handed out %d records before the missing one, sound %v; want 7, false", n, a.Sound())
	}
	if _, err := a.Finish(); !IsCorruption(err) {
		t.Fatalf("Finish: %v", err)
	}
}

// TestAuditEndsWithTheLog: closing the log ends an audit in steps.
func TestAuditEndsWithTheLog(t *testing.T) {
	l, _ := corruptLog(t, func(*pebble.DB, []Event) {})
	a, err := l.NewAudit(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Next() {
		t.Fatal("no first record")
	}
	closeLog(t, l)
	if a.Next() || !errors.Is(a.Err(), ErrClosed) {
		t.Fatalf("after Close: next, err %v", a.Err())
	}
	if _, err := a.Finish(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Finish after Close: %v", err)
	}
	a.Close()
}
