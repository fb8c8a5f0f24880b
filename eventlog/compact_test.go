package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/oklog/ulid/v2"
)

func TestCompactRecordRoundTrip(t *testing.T) {
	evs := sampleEvents()
	// A correlation equal to the causation, one stored, a zero one.
	evs = append(evs,
		Event{ID: idFrom(4), Seq: 4, Stream: "s", Version: 2, Type: "T", Causation: idFrom(1), Correlation: idFrom(1)},
		Event{ID: idFrom(5), Seq: 5, Stream: "s", Version: 3, Type: "T", Causation: idFrom(4), Correlation: idFrom(1)},
		Event{ID: idFrom(6), Seq: 6, Stream: "s", Version: 4, Type: "T"},
		Event{ID: idFrom(7), Seq: 7, Stream: "s", Version: 5, Type: "T", Correlation: idFrom(9)},
	)
	for i := range evs {
		evs[i].Time = evs[i].Time.UTC()
		if evs[i].Time.IsZero() {
			evs[i].Time = sampleEvents()[0].Time
		}
	}
	wantFlags := []byte{0, flagCausation, flagCorrelation, flagCausation, flagCausation | flagCorrelation, flagCorrelation, flagCorrelation}
	for i, e := range evs {
		rec, err := EncodeCompactRecord(e)
		if err != nil {
			t.Fatal(err)
		}
		full, _ := EncodeRecord(e)
		if rec[4] != RecordFormatCompact || rec[5] != wantFlags[i] {
			t.Errorf("event %d: format %d flags %d, want 2 and %d", i, rec[4], rec[5], wantFlags[i])
		}
		saved := 0
		if wantFlags[i]&flagCausation == 0 {
			saved += 16
		}
		if wantFlags[i]&flagCorrelation == 0 {
			saved += 16
		}
		if len(full)-len(rec) != saved-1 {
			t.Errorf("event %d: compact %d bytes, full %d, want %d fewer", i, len(rec), len(full), saved-1)
		}
		got, err := DecodeRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, e)
		}
	}
}

func TestCompactRecordRejects(t *testing.T) {
	root, _ := EncodeCompactRecord(sampleEvents()[0]) // flags 0
	// header builds a compact record by hand up to the schema.
	header := func(flags byte, extra ...byte) []byte {
		b := []byte{0, 0, 0, 0, RecordFormatCompact, flags}
		b = append(b, idFrom(1).Bytes()...)
		b = append(b, 1, 1, 's', 1, 1, 'T')
		b = append(b, make([]byte, 8)...)
		b = append(b, extra...)
		return append(b, 0, 0, 0, 0) // schema, no metadata, empty body
	}
	zero := make([]byte, 16)
	id1 := idFrom(1).Bytes()
	cases := map[string]struct {
		rec    []byte
		reason string
	}{
		"unknown flag":             {reseal(append([]byte(nil), root...)), ""},
		"flag bit 2":               {reseal(header(4)), "unknown record flags 4"},
		"zero causation stored":    {reseal(header(flagCausation, zero...)), "zero causation stored"},
		"correlation equal to id":  {reseal(header(flagCorrelation, id1...)), "implied correlation stored"},
		"correlation = causation":  {reseal(header(flagCausation|flagCorrelation, append(idFrom(2).Bytes(), idFrom(2).Bytes()...)...)), "implied correlation stored"},
		"causation flag, no bytes": {reseal(header(flagCausation)), "truncated causation"},
		"short":                    {root[:compactFixedLen-1], "too short"},
		"full record too short":    {reseal(append([]byte{0, 0, 0, 0, RecordFormat}, make([]byte, compactFixedLen)...)), "too short"},
	}
	for name, c := range cases {
		if c.reason == "" {
			continue
		}
		_, err := DecodeRecord(c.rec)
		if !IsCorruption(err) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want %q", name, err, c.reason)
		}
	}
	if _, err := DecodeRecord(reseal(header(flagCausation|flagCorrelation, append(idFrom(2).Bytes(), idFrom(3).Bytes()...)...))); err != nil {
		t.Errorf("a stored causation and correlation: %v", err)
	}
}

// TestCompactDocExample pins the worked example of a compact record in
// docs/format.md.
func TestCompactDocExample(t *testing.T) {
	var id [16]byte
	id[0] = 1
	rec, err := EncodeCompactRecord(Event{ID: id, Seq: 1, Stream: "s", Version: 1, Type: "T", Correlation: id, Time: sampleEvents()[0].Time})
	if err != nil {
		t.Fatal(err)
	}
	want := "02" + "00" + "01000000000000000000000000000000" + "01" + "0173" + "01" + "0154" +
		"0000000000000000" + "0000" + "00" + "00"
	if got := hex.EncodeToString(rec[4:]); got != want || len(rec) != 40 {
		t.Fatalf("record %d bytes\n got %s\nwant %s", len(rec), got, want)
	}
	if got := hex.EncodeToString(rec[:4]); got != "3d469e5d" {
		t.Fatalf("checksum %s; update docs/format.md", got)
	}
	if compactFixedLen != 38 {
		t.Fatalf("compactFixedLen %d; update docs/format.md", compactFixedLen)
	}
}

// copyDir copies a testdata directory to a new temporary one.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func formatOf(t *testing.T, dir string) uint32 {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: pebbleLogger{l: (&Options{}).EnsureDefaults().Logger}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get(FormatKey)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return binary.BigEndian.Uint32(v)
}

func recordFormats(t *testing.T, dir string) []byte {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: pebbleLogger{l: (&Options{}).EnsureDefaults().Logger}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, _ := db.NewIter(&pebble.IterOptions{LowerBound: []byte{PrefixEvent}, UpperBound: []byte{PrefixEvent + 1}})
	defer it.Close()
	var f []byte
	for ok := it.First(); ok; ok = it.Next() {
		f = append(f, it.Value()[4])
	}
	return f
}

// TestFormat1Upgrade opens testdata/format1, a log written by the build
// before compact records (format version 1, five events in two streams:
// a root, one with metadata, a caused one, one with its own id and
// correlation, and its child): read-only it is read as it is; a writable
// open records format 3 once, keeps every old record as written, and new
// appends are compact; the log verifies throughout.
func TestFormat1Upgrade(t *testing.T) {
	ctx := context.Background()
	dir := copyDir(t, filepath.Join("testdata", "format1"))
	if got := formatOf(t, dir); got != FormatVersion1 {
		t.Fatalf("testdata at format %d, want 1", got)
	}
	ext := ulid.MustParse("01JDQ0000000000000000000AA")
	corr := ulid.MustParse("01JDQ0000000000000000000CC")
	check := func(l *Log) []Event {
		t.Helper()
		var evs []Event
		it := l.Scan(0, Forward)
		for it.Next() {
			evs = append(evs, it.Event())
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if len(evs) < 5 {
			t.Fatalf("%d events, want at least 5", len(evs))
		}
		root := evs[0]
		want := []struct {
			stream, typ     string
			causation, corr ulid.ULID
		}{
			{"task-1", "TASK_INPUT", ulid.ULID{}, root.ID},
			{"task-1", "TASK_CREATED", ulid.ULID{}, evs[1].ID},
			{"task-1", "STEP", root.ID, root.ID},
			{"task-2", "EXT", evs[1].ID, corr},
			{"task-2", "EXT2", ext, corr},
		}
		for i, w := range want {
			e := evs[i]
			if e.Seq != uint64(i+1) || e.Stream != w.stream || e.Type != w.typ || e.Causation != w.causation || e.Correlation != w.corr {
				t.Errorf("event %d: %+v, want %+v", i+1, e, w)
			}
		}
		if evs[3].ID != ext || string(evs[3].Body) != "yy" || evs[1].Metadata["k"] != "v" || len(evs[1].Metadata) != 2 {
			t.Errorf("events 2 and 4: %+v %+v", evs[1], evs[3])
		}
		if ev, err := l.Get(ext); err != nil || ev.Seq != 4 {
			t.Errorf("Get(ext): %+v %v", ev, err)
		}
		n, kids := 0, 0
		for _, e := range evs {
			if e.Causation == root.ID {
				kids++
			}
		}
		ch := l.Children(root.ID)
		for ch.Next() {
			n++
		}
		if err := ch.Close(); err != nil || n != kids {
			t.Errorf("children of the root: %d, %v", n, err)
		}
		if rep, err := l.Verify(ctx); err != nil {
			t.Fatalf("verify: %v %+v", err, rep.Problems)
		}
		return evs
	}

	ro, err := Open(dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	before := check(ro)
	closeLog(t, ro)
	if got := formatOf(t, dir); got != FormatVersion1 {
		t.Fatalf("a read-only open changed the format to %d", got)
	}

	l := mustOpen(t, dir, nil)
	if got := check(l); !reflect.DeepEqual(got, before) {
		t.Fatalf("after the upgrade\n got %+v\nwant %+v", got, before)
	}
	res := mustAppend(t, l, "task-1", Exactly(3), Event{Type: "NEW", Causation: before[0].ID})
	mustAppend(t, l, "task-3", NoStream, Event{Type: "NEW_ROOT"})
	if res.Events[0].Correlation != before[0].ID {
		t.Errorf("new event's correlation %s, want the root %s", res.Events[0].Correlation, before[0].ID)
	}
	after := check(l)
	if !reflect.DeepEqual(after[:5], before) || len(after) != 7 {
		t.Fatalf("after appends: %d events", len(after))
	}
	closeLog(t, l)
	if got := formatOf(t, dir); got != FormatVersion {
		t.Fatalf("format %d after a writable open, want %d", got, FormatVersion)
	}
	if got := recordFormats(t, dir); !bytes.Equal(got, []byte{1, 1, 1, 1, 1, 2, 2}) {
		t.Fatalf("record formats %v, want the old five full and the new two compact", got)
	}
	l = mustOpen(t, dir, nil)
	if got := check(l); !reflect.DeepEqual(got, after) {
		t.Fatalf("reopened\n got %+v\nwant %+v", got, after)
	}
	closeLog(t, l)
}

// TestFormat1ArchivedUpgrade: a format 1 log with holes (format 2) is
// upgraded to format 4, which still allows holes.
func TestFormat1ArchivedUpgrade(t *testing.T) {
	dir := copyDir(t, filepath.Join("testdata", "format1"))
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{l: (&Options{}).EnsureDefaults().Logger}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(FormatKey, binary.BigEndian.AppendUint32(nil, FormatVersion1Archived), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	closeLog(t, mustOpen(t, dir, nil))
	if got := formatOf(t, dir); got != FormatVersionArchived {
		t.Fatalf("format %d, want %d", got, FormatVersionArchived)
	}
}
