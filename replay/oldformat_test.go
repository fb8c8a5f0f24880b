package replay

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// The directory eventlog/testdata/format3 is a log written at format
// version 3, whose stream index has one entry per event, by the build
// before one entry per append and stream. It holds the history below,
// appended in atomic batches of format3Batch events (so several events of
// a stream share an append). Regenerate it only with the build that wrote
// format 3: PEGASUS_WRITE_FORMAT3=1 go test ./replay -run TestWriteFormat3Fixture
const (
	format3Dir   = "../eventlog/testdata/format3"
	format3Seed  = 26
	format3Batch = 7
)

var format3Config = replaytest.Config{Tasks: 12, Concurrency: 3, Finish: true}

func TestWriteFormat3Fixture(t *testing.T) {
	if os.Getenv("PEGASUS_WRITE_FORMAT3") == "" {
		t.Skip("writes the fixture; set PEGASUS_WRITE_FORMAT3=1 with the build that writes format 3")
	}
	if err := os.RemoveAll(format3Dir); err != nil {
		t.Fatal(err)
	}
	l, err := eventlog.Open(format3Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := replaytest.Generate(format3Seed, format3Config)
	if err := replaytest.AppendAll(context.Background(), l, evs, format3Batch); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOldFormatStreamIndex opens the format 3 fixture (one stream index
// entry per event) and a log the current build writes from the same
// history, and checks that both give the same answers: the scan, every
// stream read from every version, stream versions, Get, Children, Verify
// and a rebuild of the read models; read-only (the directory as it is),
// after a writable open (upgraded), after a retention run that removes
// streams written in the old form, and after appends that put new entries
// beside old ones in one stream.
func TestOldFormatStreamIndex(t *testing.T) {
	ctx := context.Background()
	evs := replaytest.Generate(format3Seed, format3Config)
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(format3Dir)); err != nil {
		t.Fatal(err)
	}

	ref, _ := func() (*eventlog.Log, vfs.FS) {
		fs := vfs.NewMem()
		l := openLog(t, fs, "db", false)
		if err := replaytest.AppendAll(ctx, l, evs, format3Batch); err != nil {
			t.Fatal(err)
		}
		return l, fs
	}()
	defer ref.Close()
	want := transcript(t, ref)

	ro, err := eventlog.Open(dir, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	same(t, "read-only", want, transcript(t, ro))
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	old, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { old.Close() }()
	same(t, "upgraded", want, transcript(t, old))

	// Retention removes the first two tasks' streams from both.
	var streams []string
	for _, ev := range evs {
		if ev.Stream[0] != '$' && !slices.Contains(streams, ev.Stream) {
			streams = append(streams, ev.Stream)
		}
	}
	if len(streams) < 3 {
		t.Fatalf("history has %d task streams", len(streams))
	}
	manifestID := ulid.MustParse("01JDQ00000000000000000MANI")
	for _, l := range []*eventlog.Log{ref, old} {
		if _, err := l.Retire(ctx, retirementOf(t, l, manifestID, streams[:2]...)); err != nil {
			t.Fatal(err)
		}
	}
	want = transcript(t, ref)
	same(t, "after retention", want, transcript(t, old))

	// New appends to an old stream and to a new one, several events each.
	for _, l := range []*eventlog.Log{ref, old} {
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var apps []eventlog.StreamAppend
		for i, s := range []string{streams[2], "$memory-new"} {
			var add []eventlog.Event
			for j := range 3 {
				id := ulid.MustNew(ulid.Timestamp(at), strings.NewReader(fmt.Sprintf("%010d", i*10+j)))
				add = append(add, eventlog.Event{ID: id, Time: at, Type: "NOTE", Body: []byte{byte(j)}})
			}
			apps = append(apps, eventlog.StreamAppend{Stream: s, Expected: eventlog.Any, Events: add})
		}
		if _, err := l.AppendMulti(ctx, apps...); err != nil {
			t.Fatal(err)
		}
	}
	want = transcript(t, ref)
	same(t, "after new appends", want, transcript(t, old))
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	old, err = eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "reopened", want, transcript(t, old))
}

func same(t *testing.T, what string, want, got []string) {
	t.Helper()
	if slices.Equal(want, got) {
		return
	}
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Fatalf("%s: line %d differs:\n got %s\nwant %s", what, i, got[i], want[i])
		}
	}
	t.Fatalf("%s: %d lines, want %d", what, len(got), len(want))
}

// retirementOf removes streams whole, with a manifest that replay accepts.
func retirementOf(t *testing.T, l *eventlog.Log, id ulid.ULID, streams ...string) eventlog.Retirement {
	t.Helper()
	var r eventlog.Retirement
	var all []eventlog.Event
	for _, s := range streams {
		got := readAll(t, l.ReadStream(s, 1))
		r.Streams = append(r.Streams, eventlog.RetiredStream{Stream: s, Version: uint64(len(got))})
		all = append(all, got...)
	}
	slices.SortFunc(all, func(a, b eventlog.Event) int { return int(a.Seq) - int(b.Seq) })
	h := NewArchiveHasher()
	var seqs []uint64
	for _, e := range all {
		r.Events = append(r.Events, eventlog.RetiredEvent{Seq: e.Seq, ID: e.ID, Causation: e.Causation})
		seqs = append(seqs, e.Seq)
		if err := h.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	m, err := ManifestEvent(&ArchiveManifest{File: "a.ndjson.gz", Ranges: RangesOf(seqs), Tasks: len(streams),
		Events: len(all), Hash: h.Sum(), FinishedBefore: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	m.ID, m.Time = id, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.Manifest = m
	return r
}

func readAll(t *testing.T, it *eventlog.Iterator) []eventlog.Event {
	t.Helper()
	var out []eventlog.Event
	for it.Next() {
		out = append(out, it.Event())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// transcript is what a reader of l can observe, one line per answer.
func transcript(t *testing.T, l *eventlog.Log) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	line := func(ev eventlog.Event) string {
		return fmt.Sprintf("%d %s %s/%d %s c=%s r=%s %d %x %v %x", ev.Seq, ev.ID, ev.Stream, ev.Version, ev.Type,
			ev.Causation, ev.Correlation, ev.Time.UnixNano(), sha256.Sum256(ev.Body), ev.Metadata, ev.Schema)
	}
	all := readAll(t, l.Scan(1, eventlog.Forward))
	var streams []string
	for _, ev := range all {
		out = append(out, "scan "+line(ev))
		if !slices.Contains(streams, ev.Stream) {
			streams = append(streams, ev.Stream)
		}
		got, err := l.Get(ev.ID)
		if err != nil || got.Seq != ev.Seq {
			out = append(out, fmt.Sprintf("get %s: %d %v", ev.ID, got.Seq, err))
		}
		var kids []uint64
		for _, k := range readAll(t, l.Children(ev.ID)) {
			kids = append(kids, k.Seq)
		}
		out = append(out, fmt.Sprintf("children of %d: %v", ev.Seq, kids))
	}
	back := readAll(t, l.Scan(l.Head(), eventlog.Backward))
	out = append(out, fmt.Sprintf("backward %d events", len(back)))
	slices.Sort(streams)
	for _, s := range streams {
		ver, err := l.StreamVersion(s)
		out = append(out, fmt.Sprintf("stream %s version %d %v", s, ver, err))
		for from := uint64(1); from <= ver+1; from++ {
			var seqs []uint64
			for _, ev := range readAll(t, l.ReadStream(s, from)) {
				seqs = append(seqs, ev.Seq)
			}
			out = append(out, fmt.Sprintf("stream %s from %d: %v", s, from, seqs))
		}
	}
	rep, err := l.Verify(ctx)
	out = append(out, fmt.Sprintf("verify head %d events %d streams %d ids %d causations %d holes %d retired %d problems %d %v",
		rep.Head, rep.Events, rep.Streams, rep.IDEntries, rep.CausationEntries, rep.Holes, rep.Retired, rep.ProblemCount, err))
	if err != nil {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
	out = append(out, string(dump(t, foldMem(t, FromLog(l))).Bytes()))
	return out
}
