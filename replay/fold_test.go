package replay

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"unsafe"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// TestOwnerTake: a borrowed event taken by the fold shares nothing with the
// buffer it was read from, across the interning table's reset.
func TestOwnerTake(t *testing.T) {
	o := newOwner()
	buf := []byte("stream-0000000TYPEbody")
	for i := range maxInterned + 10 {
		copy(buf, fmt.Sprintf("stream-%07d", i))
		b := buf[:len("stream-0000000")]
		// Stream aliases buf, as a borrowed scan's does.
		ev := eventlog.Event{Stream: unsafe.String(&b[0], len(b)), Type: "TYPE", Body: buf[len("stream-0000000TYPE"):]}
		o.take(&ev, true)
		copy(buf, "XXXXXXXXXXXXXXXXXXXXXX")
		if want := fmt.Sprintf("stream-%07d", i); ev.Stream != want || ev.Type != "TYPE" || !bytes.Equal(ev.Body, []byte("body")) {
			t.Fatalf("event %d after the buffer changed: %q %q %q", i, ev.Stream, ev.Type, ev.Body)
		}
		copy(buf[len("stream-0000000"):], "TYPEbody")
	}
	if len(o.names) > maxInterned {
		t.Fatalf("%d names interned, more than %d", len(o.names), maxInterned)
	}
}

// scribbleSource hands out its events borrowed, as a Pebble log does
// (eventlog.ScanBorrowed): stream, type and body are read from one buffer
// that the next event, and the end of the scan, write over.
type scribbleSource struct {
	*MemLog
	bufs []*[]byte // the iterators' buffers, overwritten once more at the end
}

func (s *scribbleSource) borrowedEvents(ctx context.Context, from uint64) Iterator {
	it := &scribbleIter{in: s.MemLog.Events(ctx, from), buf: new([]byte)}
	s.bufs = append(s.bufs, it.buf)
	return it
}

func (s *scribbleSource) scribble() {
	for _, b := range s.bufs {
		for i := range *b {
			(*b)[i] = 'X'
		}
	}
}

type scribbleIter struct {
	in  Iterator
	buf *[]byte
	ev  eventlog.Event
}

func (it *scribbleIter) Next() bool {
	b := *it.buf
	for i := range b {
		b[i] = 'X' // what the previous event lent is gone
	}
	if !it.in.Next() {
		return false
	}
	ev := it.in.Event()
	b = append(append(append(b[:0], ev.Stream...), ev.Type...), ev.Body...)
	*it.buf = b
	ns, nt := len(ev.Stream), len(ev.Type)
	ev.Stream = unsafe.String(unsafe.SliceData(b), ns)
	ev.Type = unsafe.String(&b[ns], nt)
	if ev.Body != nil {
		ev.Body = b[ns+nt : len(b) : len(b)]
	}
	it.ev = ev
	return true
}

func (it *scribbleIter) Event() eventlog.Event { return it.ev }
func (it *scribbleIter) Err() error            { return it.in.Err() }
func (it *scribbleIter) Close() error          { return it.in.Close() }

// TestFoldBorrowedBodiesOutliveTheirSource: a fold that reads borrowed
// events (the bodies copied, the decoded strings aliasing the copies)
// gives the state of a fold of owned events, read after every buffer it
// borrowed from was overwritten; with small and large inputs.
func TestFoldBorrowedBodiesOutliveTheirSource(t *testing.T) {
	seed := testSeed(t)
	for _, size := range []int{64, 3 << 10} {
		evs := replaytest.Generate(seed, replaytest.Config{Tasks: 60, Concurrency: 20, InputSize: size})
		mem := mustMem(t, evs)
		ref := dump(t, foldMem(t, mem))
		src := &scribbleSource{MemLog: mem}
		v, err := NewView(nil)
		if err != nil {
			t.Fatal(err)
		}
		// In pieces, so that the later folds' chunks are new ones.
		for v.Seq() < mem.Head() {
			if _, err := Fold(context.Background(), v, src, FoldOptions{Bound: AtSeq(v.Seq() + 97)}); err != nil {
				t.Fatal(err)
			}
		}
		if len(src.bufs) < 2 {
			t.Fatalf("the fold read borrowed %d times", len(src.bufs))
		}
		src.scribble()
		sameState(t, fmt.Sprintf("borrowed fold, inputs of %d bytes", size), ref, dump(t, v))
	}
}
