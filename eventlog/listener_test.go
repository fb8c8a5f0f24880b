package eventlog

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Appends that fill the memtable make the storage engine flush the full
// memtable; Options.Events hears it, with the flush's duration and bytes.
func TestStorageEventsFlush(t *testing.T) {
	flushed := make(chan uint64, 16)
	o := testOptions(vfs.NewMem())
	o.MemTableSize = 1 << 20
	o.Events = &StorageEvents{
		Flush: func(d time.Duration, b uint64) {
			if d <= 0 {
				t.Errorf("flush duration %s", d)
			}
			select {
			case flushed <- b:
			default:
			}
		},
	}
	l := mustOpen(t, "db", o)
	defer closeLog(t, l)
	body := bytes.Repeat([]byte("x"), 16<<10)
	deadline := time.After(time.Minute) // a bound on a broken test, not a wait
	for i := 0; ; i++ {
		select {
		case b := <-flushed:
			if b == 0 {
				t.Errorf("a flush of 0 bytes")
			}
			return
		case <-deadline:
			t.Fatalf("no flush after %d appends of %d bytes", i, len(body))
		default:
		}
		if _, err := l.Append(context.Background(), "s", Any, Event{Type: "T", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
}
