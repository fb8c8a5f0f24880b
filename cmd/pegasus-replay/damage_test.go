package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// importedDir imports the recorded history into a new data directory and
// opens it once more, writable, so that its events move from the WAL into
// an sstable (Pebble flushes what it replays).
func importedDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if r := runCLI(t, termOpts{}, "-f", "testdata/history.ndjson", "import", dir); r.code != 0 {
		t.Fatal(r.stderr)
	}
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// damage applies f to the first file of dir whose name ends in suffix.
func damage(t *testing.T, dir, suffix string, f func([]byte) []byte) string {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n.Name(), suffix) {
			p := filepath.Join(dir, n.Name())
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, f(data), 0o600); err != nil {
				t.Fatal(err)
			}
			return n.Name()
		}
	}
	t.Fatalf("no %s file in %s", suffix, dir)
	return ""
}

// TestVerifyDamagedDirectory: verify reports corrupt sstable blocks
// (wherever they are: the records, the persisted projections, the index
// block, the footer), a truncated table, a lost WAL tail and a WAL Pebble
// refuses as problems (exit 1, --json one report with the file named),
// never as a panic, an empty output, an unusable source (exit 4) or a
// clean bill of health. Damage that stops the log from opening is exit 1
// for the other commands too.
func TestVerifyDamagedDirectory(t *testing.T) {
	for _, c := range []struct {
		name, suffix string
		damage       func([]byte) []byte
		prepare      func(t *testing.T, dir string)
		refused      bool // the log does not open
	}{
		{"flipped sstable block", ".sst", func(b []byte) []byte { b[60] ^= 0x10; return b }, nil, false},
		{"flipped sstable block, middle", ".sst", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }, nil, false},
		{"flipped sstable block, three quarters", ".sst", func(b []byte) []byte { b[len(b)*3/4] ^= 0x10; return b }, nil, false},
		{"flipped sstable index block", ".sst", func(b []byte) []byte { b[len(b)-200] ^= 0x10; return b }, nil, true},
		{"flipped sstable footer", ".sst", func(b []byte) []byte { b[len(b)-10] ^= 0x10; return b }, nil, true},
		{"truncated sstable", ".sst", func(b []byte) []byte { return b[:len(b)-30] }, nil, true},
		{"lost WAL tail", ".log", func(b []byte) []byte { return b[:len(b)/2] }, appendMore, false},
		// Pebble itself refuses this one: the log cannot even be opened.
		{"flipped early WAL byte", ".log", func(b []byte) []byte { b[len(b)/10] ^= 0x10; return b }, appendMore, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := importedDir(t)
			if c.prepare != nil {
				c.prepare(t, dir)
			}
			file := damage(t, dir, c.suffix, c.damage)
			r := runCLI(t, termOpts{}, "-d", dir, "verify", "--json")
			if r.code != exitFailed {
				t.Fatalf("exit %d, want %d\n%s\n%s", r.code, exitFailed, r.stdout, r.stderr)
			}
			var out struct {
				OK       bool `json:"ok"`
				Problems []struct {
					Kind   string `json:"kind"`
					Reason string `json:"reason"`
				} `json:"problems"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
				t.Fatalf("--json output does not parse: %v\n%s\n%s", err, r.stdout, r.stderr)
			}
			num := strings.TrimSuffix(file, c.suffix)
			if out.OK || len(out.Problems) == 0 || !strings.Contains(out.Problems[0].Reason, num) {
				t.Fatalf("verify --json on a damaged %s: %s", file, r.stdout)
			}
			t.Logf("%s: %s", file, out.Problems[0].Reason)
			// The human output says FAILED too.
			if r := runCLI(t, termOpts{}, "-d", dir, "verify"); r.code != exitFailed || !strings.Contains(r.stdout, "FAILED") {
				t.Fatalf("verify: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			if r := runCLI(t, termOpts{}, "-d", dir, "tasks"); c.refused && (r.code != exitFailed || !strings.Contains(r.stderr, num)) {
				t.Fatalf("tasks on a log that does not open: exit %d, want %d\n%s", r.code, exitFailed, r.stderr)
			}
		})
	}
}

// appendMore leaves events in the newest WAL (several 32 KiB blocks) after
// the flush of importedDir.
func appendMore(t *testing.T, dir string) {
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := l.Append(t.Context(), "extra", eventlog.Any, eventlog.Event{Type: "X", Body: make([]byte, 2000)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
