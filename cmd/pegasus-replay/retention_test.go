package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
	"github.com/pegasus-engine/pegasus/retention"
)

// TestRetentionArchives: verify on a data directory retention ran on is
// clean and, with --archive, re-checks the archives (a changed archive
// fails it); --file reads an archive like a log.
func TestRetentionArchives(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data, archive := filepath.Join(dir, "data"), filepath.Join(dir, "data", "archive")
	l, err := eventlog.Open(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := replaytest.AppendAll(ctx, l, replaytest.Generate(5, replaytest.Config{Tasks: 30, Start: start}), 0); err != nil {
		t.Fatal(err)
	}
	v, _, err := replay.Open(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := retention.Run(ctx, l, &retention.Options{Window: time.Hour, ArchiveDir: archive,
		Checkpoint: v.Checkpoint, Clock: func() time.Time { return start.AddDate(0, 1, 0) }})
	if err != nil || res.Manifest == nil {
		t.Fatalf("retention: %+v, %v", res, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	m := res.Manifest

	r := runCLI(t, termOpts{}, "-d", data, "verify", "--archive", archive)
	if r.code != 0 || !strings.Contains(r.stdout, "1 archive(s)") || !strings.Contains(r.stdout, "archived in") {
		t.Fatalf("verify --archive: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	file := filepath.Join(archive, m.File)
	r = runCLI(t, termOpts{}, "--json", "-f", file, "tasks")
	var page replay.Page
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil || len(page.Tasks) != min(m.Tasks, 50) {
		t.Fatalf("--file ARCHIVE tasks: exit %d, %d tasks (manifest %d)\n%s", r.code, len(page.Tasks), m.Tasks, r.stderr)
	}
	if r := runCLI(t, termOpts{}, "-f", file, "verify"); r.code != 0 {
		t.Fatalf("--file ARCHIVE verify: exit %d\n%s", r.code, r.stdout)
	}

	// An archive that is not the one the manifest hashed: verify fails.
	ml, h, err := replay.ReadExport(mustOpen(t, file))
	if err != nil {
		t.Fatal(err)
	}
	evs := ml.All()
	evs[0].Body = append([]byte{0x80}, evs[0].Body[1:]...)
	evs[0].Body = append(evs[0].Body, 0xc0)
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := replay.NewExporter(f, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		ex.Write(ev)
	}
	ex.Close()
	f.Close()
	r = runCLI(t, termOpts{}, "-d", data, "verify", "--archive", archive)
	if r.code != exitFailed || !strings.Contains(r.stdout, "hash") {
		t.Fatalf("verify --archive of a changed archive: exit %d\n%s", r.code, r.stdout)
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
