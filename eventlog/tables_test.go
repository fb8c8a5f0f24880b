package eventlog

import (
	"bytes"
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

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
