package eventlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestScanAuxRange: a range of aux keys in either direction, bounds
// inclusive below and exclusive above, nil upper meaning every key from
// lower on.
func TestScanAuxRange(t *testing.T) {
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	if err := l.WriteAux(context.Background(), func(b *AuxBatch) error {
		for _, k := range []string{"j", "k/1", "k/2", "k/3", "k/4", "l"} {
			b.Set([]byte(k), []byte("v"+k))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	scan := func(lower, upper string, dir Direction) []string {
		var up []byte
		if upper != "" {
			up = []byte(upper)
		}
		it := l.ScanAuxRange([]byte(lower), up, dir)
		var keys []string
		for it.Next() {
			if string(it.Value()) != "v"+string(it.Key()) {
				t.Fatalf("value of %q: %q", it.Key(), it.Value())
			}
			keys = append(keys, string(it.Key()))
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	for _, c := range []struct {
		lower, upper string
		dir          Direction
		want         []string
	}{
		{"k/2", "k/4", Forward, []string{"k/2", "k/3"}},
		{"k/2", "k/4", Backward, []string{"k/3", "k/2"}},
		{"k/", "", Forward, []string{"k/1", "k/2", "k/3", "k/4", "l"}},
		{"k/", "", Backward, []string{"l", "k/4", "k/3", "k/2", "k/1"}},
		{"k/5", "l", Backward, nil},
	} {
		if got := scan(c.lower, c.upper, c.dir); !slices.Equal(got, c.want) {
			t.Errorf("[%q, %q) %v: %v, want %v", c.lower, c.upper, c.dir, got, c.want)
		}
	}
}

// TestIngestAux: an ingested set of aux writes overrides older values and
// deletes keys (the last write of a key in fn wins), survives a reopen,
// leaves no temporary file, and keeps appends going; DeleteRange and a
// read-only log are refused.
func TestIngestAux(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(fs))
	if err := l.WriteAux(ctx, func(b *AuxBatch) error {
		b.Set([]byte("a"), []byte("old"))
		b.Set([]byte("gone"), []byte("old"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "s", NoStream, ev("E", "1"))
	if err := l.IngestAux(ctx, func(b *AuxBatch) error {
		b.Set([]byte("c"), []byte("first"))
		b.Set([]byte("a"), []byte("new"))
		b.Delete([]byte("gone"))
		b.Set([]byte("c"), []byte("last"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "s", Exactly(1), ev("E", "2"))
	if err := l.IngestAux(ctx, func(b *AuxBatch) error {
		b.DeleteRange([]byte("a"), []byte("b"))
		return nil
	}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("DeleteRange: %v, want ErrInvalid", err)
	}
	closeLog(t, l)
	names, err := fs.List("db")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "aux-ingest-") {
			t.Fatalf("temporary file %s left", n)
		}
	}

	l = mustOpen(t, "db", &Options{FS: fs, ReadOnly: true})
	defer closeLog(t, l)
	for k, want := range map[string]string{"a": "new", "c": "last", "gone": ""} {
		v, err := l.GetAux([]byte(k))
		if want == "" {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %q, %v; want it deleted", k, v, err)
			}
			continue
		}
		if err != nil || string(v) != want {
			t.Errorf("%s: %q, %v; want %q", k, v, err, want)
		}
	}
	if l.Head() != 2 {
		t.Fatalf("head %d, want 2", l.Head())
	}
	if err := l.IngestAux(ctx, func(b *AuxBatch) error { b.Set([]byte("x"), nil); return nil }); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only: %v, want ErrReadOnly", err)
	}
}

// TestIngestAuxWriteError: a failed write of the sstable changes nothing
// that reads can see, poisons the log like a failed WriteAux (a full or
// failing disk), and leaves the data there at the next open.
func TestIngestAuxWriteError(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var armed atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.Contains(op.Path, "aux-ingest-") {
			return errorfs.ErrInjected
		}
		return nil
	}))
	l := mustOpen(t, "db", testOptions(fs))
	if err := l.WriteAux(ctx, func(b *AuxBatch) error { b.Set([]byte("a"), []byte("old")); return nil }); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "s", NoStream, ev("E", "1"))
	armed.Store(true)
	err := l.IngestAux(ctx, func(b *AuxBatch) error {
		b.Set([]byte("a"), []byte("new"))
		b.Set([]byte("b"), []byte("new"))
		return nil
	})
	if !errors.Is(err, ErrFailed) || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("IngestAux: %v, want ErrFailed wrapping the injected error", err)
	}
	if v, err := l.GetAux([]byte("a")); err != nil || string(v) != "old" {
		t.Fatalf("a: %q, %v; want old", v, err)
	}
	if _, err := l.GetAux([]byte("b")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("b: %v, want ErrNotFound", err)
	}
	if _, err := l.Append(ctx, "s", Exactly(1), ev("E", "2")); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed ingest: %v, want ErrFailed", err)
	}
	l.Close()
	armed.Store(false)
	l = mustOpen(t, "db", testOptions(fs))
	defer closeLog(t, l)
	if v, err := l.GetAux([]byte("a")); err != nil || string(v) != "old" || l.Head() != 1 {
		t.Fatalf("after reopening: a %q, %v, head %d; want old, head 1", v, err, l.Head())
	}
}

// TestIngestLeftoversRemovedAtOpen: the temporary file of an IngestAux that
// a crash interrupted (a table never ingested, or a second link to one
// Pebble holds) is removed by the next writable open, and what was
// ingested stays readable; a read-only open leaves the directory alone.
func TestIngestLeftoversRemovedAtOpen(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(fs))
	if err := l.IngestAux(context.Background(), func(b *AuxBatch) error {
		b.Set([]byte("k"), []byte("v"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	closeLog(t, l)
	for _, n := range []string{"aux-ingest-7.sst.tmp", "aux-ingest-8.sst.tmp"} {
		f, err := fs.Create(fs.PathJoin("db", n), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("partial table")); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	leftovers := func() (n int) {
		names, err := fs.List("db")
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if strings.HasPrefix(name, "aux-ingest-") {
				n++
			}
		}
		return n
	}
	ro := mustOpen(t, "db", &Options{FS: fs, ReadOnly: true})
	closeLog(t, ro)
	if n := leftovers(); n != 2 {
		t.Fatalf("a read-only open left %d of 2 leftovers", n)
	}
	l = mustOpen(t, "db", testOptions(fs))
	defer closeLog(t, l)
	if n := leftovers(); n != 0 {
		t.Fatalf("%d leftovers after a writable open", n)
	}
	if v, err := l.GetAux([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("ingested key: %q %v", v, err)
	}
}

// TestIngestAuxSplitTables: a batch split into one sstable per key range
// reads back as one table would (overrides, deletes, the last write of a
// key), leaves no temporary file, and is ingested all or nothing: a
// failure writing its second table leaves the first unseen.
func TestIngestAuxSplitTables(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	var creates atomic.Int32
	failAt := int32(-1)
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.Contains(op.Path, "aux-ingest-") {
			if creates.Add(1) == atomic.LoadInt32(&failAt) {
				return errorfs.ErrInjected
			}
		}
		return nil
	}))
	l := mustOpen(t, "db", testOptions(fs))
	if err := l.WriteAux(ctx, func(b *AuxBatch) error {
		b.Set([]byte("p/1"), []byte("old"))
		b.Set([]byte("q/1"), []byte("old"))
		b.Set([]byte("r/gone"), []byte("old"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, "s", NoStream, ev("E", "1"))
	creates.Store(0)
	if err := l.IngestAux(ctx, func(b *AuxBatch) error {
		b.SplitTables(2)
		b.Set([]byte("q/2"), []byte("first"))
		b.Set([]byte("p/2"), []byte("new"))
		b.Set([]byte("p/1"), []byte("new"))
		b.Delete([]byte("r/gone"))
		b.Set([]byte("q/2"), []byte("last"))
		b.Set([]byte("meta"), []byte("m"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := creates.Load(); n != 5 {
		// p/1 rewrites a stored key, p/2 follows every stored p/ key.
		t.Errorf("%d tables written, want 5 (me, p/ rewritten, p/ new, q/, r/)", n)
	}
	want := map[string]string{"p/1": "new", "p/2": "new", "q/1": "old", "q/2": "last", "r/gone": "", "meta": "m"}
	check := func(l *Log, when string) {
		t.Helper()
		for k, w := range want {
			v, err := l.GetAux([]byte(k))
			if w == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("%s: %s: %q, %v; want it deleted", when, k, v, err)
				}
				continue
			}
			if err != nil || string(v) != w {
				t.Errorf("%s: %s: %q, %v; want %q", when, k, v, err, w)
			}
		}
	}
	check(l, "ingested")

	creates.Store(0)
	atomic.StoreInt32(&failAt, 2)
	err := l.IngestAux(ctx, func(b *AuxBatch) error {
		b.SplitTables(2)
		b.Set([]byte("p/3"), []byte("x"))
		b.Set([]byte("q/3"), []byte("x"))
		return nil
	})
	if !errors.Is(err, ErrFailed) || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("IngestAux failing at its second table: %v, want ErrFailed wrapping the injected error", err)
	}
	for _, k := range []string{"p/3", "q/3"} {
		if _, err := l.GetAux([]byte(k)); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s after the failed ingest: %v, want ErrNotFound", k, err)
		}
	}
	l.Close()
	atomic.StoreInt32(&failAt, -1)
	names, err := mem.List("db")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "aux-ingest-") {
			t.Fatalf("temporary file %s left", n)
		}
	}
	l = mustOpen(t, "db", testOptions(fs))
	defer closeLog(t, l)
	check(l, "reopened")
	if _, err := l.GetAux([]byte("p/3")); !errors.Is(err, ErrNotFound) || l.Head() != 1 {
		t.Fatalf("reopened: p/3 %v, head %d; want ErrNotFound, head 1", err, l.Head())
	}
}

// TestIngestAuxCopiesKeys: IngestAux keeps its own copies of the keys,
// however many (several chunks of them), while the caller reuses its
// buffer.
func TestIngestAuxCopiesKeys(t *testing.T) {
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	const n = 5000
	key := make([]byte, 0, 64)
	if err := l.IngestAux(context.Background(), func(b *AuxBatch) error {
		for i := range n {
			key = fmt.Appendf(key[:0], "k/%040d", i)
			if i%7 == 0 {
				b.Delete(key)
			} else {
				b.Set(key, []byte(strconv.Itoa(i)))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		v, err := l.GetAux(fmt.Appendf(nil, "k/%040d", i))
		switch {
		case i%7 == 0 && !errors.Is(err, ErrNotFound):
			t.Fatalf("key %d: %q, %v; want it deleted", i, v, err)
		case i%7 != 0 && (err != nil || string(v) != strconv.Itoa(i)):
			t.Fatalf("key %d: %q, %v", i, v, err)
		}
	}
}
