package replay

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"github.com/pegasus-engine/pegasus/eventlog"
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
		o.take(&ev)
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
