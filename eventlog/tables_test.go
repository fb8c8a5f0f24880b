package eventlog

import (
	"bytes"
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestTablesHoldOneNamespace checks that flushes and compactions end a
// table where the keys' namespace changes: the first byte, and in the aux
// key space the first bytes SplitTables named. A table spanning several
// namespaces would overlap every older key between them.
func TestTablesHoldOneNamespace(t *testing.T) {
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	ctx := context.Background()
	for i := range 20 {
		res := mustAppend(t, l, "s", Any, ev("A", "a"))
		caused := ev("B", "b")
		caused.Causation = res.Events[0].ID
		mustAppend(t, l, "s", Any, caused)
		if err := l.WriteAux(ctx, func(b *AuxBatch) error {
			b.SplitTables(2)
			b.Set([]byte{'a', '/', byte(i)}, []byte("task"))
			b.Set([]byte{'b', '/', byte(i)}, []byte("summary"))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		levels, err := l.db.SSTables()
		if err != nil {
			t.Fatal(err)
		}
		tables := 0
		for level, infos := range levels {
			for _, info := range infos {
				tables++
				lo, hi := info.Smallest.UserKey, info.Largest.UserKey
				n := 1
				if lo[0] == PrefixAux {
					n = 3
				}
				if len(lo) < n || len(hi) < n || !bytes.Equal(lo[:n], hi[:n]) {
					t.Errorf("%s: L%d table %s spans %q to %q", when, level, info.FileNum, lo, hi)
				}
			}
		}
		// c, e, i, m, s and two aux ranges.
		if tables < 7 {
			t.Errorf("%s: %d tables, want at least 7", when, tables)
		}
	}
	if err := l.db.Flush(); err != nil {
		t.Fatal(err)
	}
	check("after a flush")
	if err := l.db.Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	check("after a compaction")
}
