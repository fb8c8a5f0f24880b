package durable

import (
	"errors"
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func read(t *testing.T, fs vfs.FS, path string) string {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWriteFile: a write replaces the file; a failed one leaves it as it
// was and no temporary file behind; a power loss after WriteFile returned
// keeps the new content (the rename and the directory are synced).
func TestWriteFile(t *testing.T) {
	mem := vfs.NewCrashableMem()
	if err := mem.MkdirAll("d", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(mem, mem.PathDir("d")); err != nil {
		t.Fatal(err)
	}
	put := func(s string) func(io.Writer) error {
		return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
	}
	if err := WriteFile(mem, "d/f", put("one")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := WriteFile(mem, "d/f", func(w io.Writer) error { put("half")(w); return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed write: %v", err)
	}
	if got := read(t, mem, "d/f"); got != "one" {
		t.Fatalf("after a failed write: %q", got)
	}
	if _, err := mem.Stat("d/f.tmp"); err == nil {
		t.Fatal("temporary file left")
	}
	if err := WriteFile(mem, "d/f", put("two")); err != nil {
		t.Fatal(err)
	}
	img := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if got := read(t, img, "d/f"); got != "two" {
		t.Fatalf("after a power loss: %q", got)
	}
}
