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

// TestIngestAuxKeepsNewKeysApart checks that IngestAux writes the keys
// that follow everything stored in their range in a table of their own,
// which goes to the bottom level, apart from the rewrites of older keys.
func TestIngestAuxKeepsNewKeysApart(t *testing.T) {
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	ctx := context.Background()
	ingest := func(from, to int) {
		t.Helper()
		if err := l.IngestAux(ctx, func(b *AuxBatch) error {
			b.SplitTables(2)
			for i := from; i <= to; i++ {
				b.Set([]byte{'t', '/', byte(i)}, []byte{byte(from)})
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	ingest(1, 5)
	ingest(5, 9) // 5 rewritten, 6 to 9 new
	levels, err := l.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var fresh []int
	for level, infos := range levels {
		for _, info := range infos {
			lo, hi := info.Smallest.UserKey, info.Largest.UserKey
			if bytes.Compare(lo, []byte("xt/\x05")) <= 0 && bytes.Compare(hi, []byte("xt/\x06")) >= 0 {
				t.Errorf("L%d table %s spans %q to %q: the rewrite of 5 and the new keys in one table", level, info.FileNum, lo, hi)
			}
			if bytes.Equal(lo, []byte("xt/\x06")) {
				fresh = append(fresh, level)
			}
		}
	}
	if len(fresh) != 1 || fresh[0] != 6 {
		t.Errorf("the new keys' table is in levels %v, want [6]", fresh)
	}
	for i := 1; i <= 9; i++ {
		want := byte(1)
		if i >= 5 {
			want = 5
		}
		v, err := l.GetAux([]byte{'t', '/', byte(i)})
		if err != nil || len(v) != 1 || v[0] != want {
			t.Errorf("GetAux(t/%d) = %v, %v, want [%d]", i, v, err, want)
		}
	}
}
