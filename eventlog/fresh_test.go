package eventlog

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// An id NewID drew skips the index reads on its first use only: a
// retry of the append is still answered from the log, a second append
// that expects a new stream under the same name is still refused, and
// a stream named after a drawn id by an append whose events carry
// other ids is seen by the next append that expects it new.
func TestFreshIDsAreCheckedAfterTheirFirstUse(t *testing.T) {
	l := mustOpen(t, t.TempDir(), nil)
	defer closeLog(t, l)
	ctx := context.Background()

	id := l.NewID()
	ev := Event{ID: id, Type: "CREATED", Body: []byte("a")}
	first, err := l.Append(ctx, id.String(), NoStream, ev)
	if err != nil {
		t.Fatal(err)
	}
	// The retry: the same event, answered as stored.
	again, err := l.Append(ctx, id.String(), NoStream, ev)
	if err != nil || again.LastSeq != first.LastSeq {
		t.Fatalf("retry: %+v %v, want the first append's result %+v", again, err, first)
	}
	// The same id with other content is refused.
	if _, err := l.Append(ctx, id.String(), NoStream, Event{ID: id, Type: "OTHER"}); !errors.Is(err, ErrIDReused) {
		t.Fatalf("the id again with other content: %v, want ErrIDReused", err)
	}
	// A new stream under the same name is a conflict.
	var conflict *ConflictError
	if _, err := l.Append(ctx, id.String(), NoStream, Event{Type: "SECOND"}); !errors.As(err, &conflict) || conflict.Current != 1 {
		t.Fatalf("a second creation of the stream: %v, want a conflict at version 1", err)
	}

	// The stream is named first, by events of other ids; the id is used
	// later: both uses are checked against the log.
	named := l.NewID()
	if _, err := l.Append(ctx, named.String(), NoStream, Event{Type: "FIRST"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, named.String(), NoStream, Event{ID: named, Type: "LATE"}); !errors.As(err, &conflict) || conflict.Current != 1 {
		t.Fatalf("creating a stream named earlier: %v, want a conflict at version 1", err)
	}
	// The lower-case spelling of a drawn id is another stream.
	lower := l.NewID()
	if _, err := l.Append(ctx, strings.ToLower(lower.String()), NoStream, Event{Type: "A"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, lower.String(), NoStream, Event{Type: "B"}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

// The set of fresh ids stays bounded when ids are drawn and never used.
func TestFreshIDsBounded(t *testing.T) {
	l := mustOpen(t, t.TempDir(), nil)
	defer closeLog(t, l)
	for range maxFresh + 10 {
		l.NewID()
	}
	l.idMu.Lock()
	n := len(l.fresh)
	l.idMu.Unlock()
	if n > maxFresh {
		t.Fatalf("%d fresh ids held, want at most %d", n, maxFresh)
	}
}

// BenchmarkNewID draws ids as the agent does for its events: each one
// is then used once as an event's id (takeFresh), never as a stream's
// name, so the log remembers it as fresh for that until it forgets it.
func BenchmarkNewID(b *testing.B) {
	l := mustOpen(b, b.TempDir(), nil)
	defer closeLog(b, l)
	b.ReportAllocs()
	for b.Loop() {
		id := l.NewID()
		if !l.takeFresh(id, freshID) {
			b.Fatal("a drawn id is not fresh")
		}
	}
}
