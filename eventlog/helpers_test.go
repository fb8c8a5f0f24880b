package eventlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"
)

// testClock is a deterministic clock that advances 1ms per reading.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func testOptions(fs vfs.FS) *Options {
	return &Options{FS: fs, Entropy: rand.New(rand.NewSource(1))}
}

func mustOpen(t testing.TB, dir string, o *Options) *Log {
	t.Helper()
	l, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	return l
}

func closeLog(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("Close: %v", err)
	}
}

func mustAppend(t testing.TB, l *Log, stream string, exp ExpectedVersion, evs ...Event) AppendResult {
	t.Helper()
	res, err := l.Append(context.Background(), stream, exp, evs...)
	if err != nil {
		t.Fatalf("Append(%q, %s): %v", stream, exp, err)
	}
	return res
}

func ev(typ string, body string) Event {
	return Event{Type: typ, Body: []byte(body)}
}

func collect(t testing.TB, it *Iterator) []Event {
	t.Helper()
	var out []Event
	for it.Next() {
		out = append(out, it.Event())
	}
	if err := it.Close(); err != nil {
		t.Fatalf("iterator: %v", err)
	}
	return out
}

func seqs(evs []Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

func mustVerify(t testing.TB, l *Log) Report {
	t.Helper()
	rep, err := l.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify: %v (report %+v)", err, rep)
	}
	return rep
}

func idFrom(n uint64) ulid.ULID {
	var id ulid.ULID
	id[0] = 1
	for i := 15; i > 7; i-- {
		id[i] = byte(n)
		n >>= 8
	}
	return id
}

// appendN appends n events of type typ to stream, one per append, with
// bodies "0" to "n-1".
func appendN(t testing.TB, l *Log, stream, typ string, n int) {
	t.Helper()
	for i := range n {
		mustAppend(t, l, stream, Any, ev(typ, fmt.Sprint(i)))
	}
}
