package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The damage tests break a cleanly stopped data directory the way a disk or
// an operator would (the fault-injection run of issue 10) and assert, for
// each kind of damage, one of two outcomes: Open refuses with an error that
// names the file (and the offset, where there is one), or the log opens
// with every acknowledged event intact. Never a panic, never a shorter log
// that says nothing.

// runs writes three daemon runs (open, append, close) to a MemFS: the first
// two end up in sstables at the next open, the third, larger one stays in
// the newest WAL, which spans several 32 KiB WAL blocks.
func runs(t *testing.T) (*vfs.MemFS, []Event) {
	t.Helper()
	mem := vfs.NewMem()
	var acked []Event
	body := bytes.Repeat([]byte("b"), 100)
	for run, n := range []int{150, 150, 700} {
		l := mustOpen(t, "db", testOptions(mem))
		for i := range n {
			res := mustAppend(t, l, fmt.Sprintf("r%d-%d", run, i%5), Any, Event{Type: "E", Body: body})
			acked = append(acked, res.Events...)
		}
		closeLog(t, l)
	}
	return mem, acked
}

// files lists the data directory's files matching pred, sorted.
func files(t *testing.T, fs vfs.FS, pred func(string) bool) []string {
	t.Helper()
	names, err := fs.List("db")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if pred(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("no matching file in %v", names)
	}
	return out
}

func suffix(s string) func(string) bool {
	return func(n string) bool { return strings.HasSuffix(n, s) }
}
func prefix(s string) func(string) bool {
	return func(n string) bool { return strings.HasPrefix(n, s) }
}

func last(names []string) string { return names[len(names)-1] }

// flipAt flips one bit of db/name at off (negative: from the end).
func flipAt(t *testing.T, fs vfs.FS, name string, off int64) {
	t.Helper()
	data, err := readAll(fs, "db/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(data))
	}
	data[off] ^= 0x10
	if err := writeFileSynced(fs, "db/"+name, data); err != nil {
		t.Fatal(err)
	}
}

func truncateTo(t *testing.T, fs vfs.FS, name string, frac float64) {
	t.Helper()
	data, err := readAll(fs, "db/"+name)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileSynced(fs, "db/"+name, data[:int(float64(len(data))*frac)]); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, fs vfs.FS, name string) int64 {
	t.Helper()
	st, err := fs.Stat("db/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// wantRefusal checks a precise refusal: a corruption error that names the
// damaged file and, for a WAL, the offset.
func wantRefusal(t *testing.T, err error, file string, withOffset bool) {
	t.Helper()
	if err == nil || !IsCorruption(err) {
		t.Fatalf("Open: %v, want a corruption error", err)
	}
	var ce *CorruptionError
	var dl *DataLossError
	var gotFile string
	var gotOff int64
	switch {
	case errors.As(err, &dl):
		gotFile, gotOff = dl.File, dl.Offset
	case errors.As(err, &ce):
		gotFile, gotOff = ce.File, ce.Offset
	default:
		t.Fatalf("Open: %T %v", err, err)
	}
	if !strings.HasPrefix(gotFile, file) || (withOffset && gotOff < 0) || !strings.Contains(err.Error(), gotFile) {
		t.Fatalf("Open: %v (file %q offset %d), want file %q with offset %v", err, gotFile, gotOff, file, withOffset)
	}
	t.Logf("refused: %v", err)
}

// wantIntact checks that the log holds exactly the acknowledged events.
func wantIntact(t *testing.T, l *Log, acked []Event) {
	t.Helper()
	got := collect(t, l.Scan(0, Forward))
	if len(got) != len(acked) {
		t.Fatalf("log holds %d events, %d were acknowledged", len(got), len(acked))
	}
	for i := range got {
		if got[i].ID != acked[i].ID {
			t.Fatalf("seq %d is %s, acknowledged %s", i+1, got[i].ID, acked[i].ID)
		}
	}
	mustVerify(t, l)
}

// wantAccepted checks a log opened with AcceptDataLoss: a prefix of the
// acknowledged events, then SEQ_LOST up to at least the acknowledged head
// (no sequence reused), then DATA_LOST; sound; and it reopens normally.
func wantAccepted(t *testing.T, fs vfs.FS, acked []Event) {
	t.Helper()
	o := testOptions(fs)
	o.AcceptDataLoss = true
	l := mustOpen(t, "db", o)
	loss := l.DataLoss()
	if loss == nil {
		t.Fatal("DataLoss() is nil after an accepted loss")
	}
	evs := collect(t, l.Scan(0, Forward))
	kept := 0
	for kept < len(evs) && kept < len(acked) && evs[kept].ID == acked[kept].ID {
		kept++
	}
	rest := evs[kept:]
	if len(rest) == 0 || rest[len(rest)-1].Type != TypeDataLost || rest[len(rest)-1].Stream != SystemStream {
		t.Fatalf("no DATA_LOST at the end (kept %d of %d, %d more)", kept, len(acked), len(rest))
	}
	for _, e := range rest[:len(rest)-1] {
		if e.Type != TypeSeqLost {
			t.Fatalf("seq %d after the kept prefix is %s, want %s", e.Seq, e.Type, TypeSeqLost)
		}
	}
	if uint64(len(evs)) <= uint64(len(acked)) {
		t.Fatalf("head %d does not pass the acknowledged head %d: sequences would be reused", len(evs), len(acked))
	}
	md := rest[len(rest)-1].Metadata
	t.Logf("accepted: kept %d of %d acknowledged, DATA_LOST %v", kept, len(acked), md)
	mustVerify(t, l)
	closeLog(t, l)

	// A normal restart after the accepted loss opens and continues.
	l = mustOpen(t, "db", testOptions(fs))
	defer closeLog(t, l)
	if l.DataLoss() != nil || l.Head() != uint64(len(evs)) {
		t.Fatalf("restart: head %d, loss %v", l.Head(), l.DataLoss())
	}
	if res := mustAppend(t, l, "s", Any, ev("NEXT", "")); res.FirstSeq != uint64(len(evs))+1 {
		t.Fatalf("next append at %d", res.FirstSeq)
	}
}

func TestDamagedDirectory(t *testing.T) {
	type outcome int
	const (
		refuse    outcome = iota // precise refusal; AcceptDataLoss recovers a prefix
		intact                   // opens with everything acknowledged
		eitherWay                // refuses naming the file, or opens intact
	)
	cases := []struct {
		name   string
		damage func(t *testing.T, fs vfs.FS)
		want   outcome
		file   string // the file a refusal names (prefix)
		offset bool
	}{
		{"flipped WAL byte early", func(t *testing.T, fs vfs.FS) {
			w := last(files(t, fs, suffix(".log")))
			flipAt(t, fs, w, fileSize(t, fs, w)/10)
		}, refuse, "0", true},
		{"flipped WAL byte middle", func(t *testing.T, fs vfs.FS) {
			w := last(files(t, fs, suffix(".log")))
			flipAt(t, fs, w, fileSize(t, fs, w)/2)
		}, refuse, "0", true},
		{"flipped WAL byte tail", func(t *testing.T, fs vfs.FS) {
			flipAt(t, fs, last(files(t, fs, suffix(".log"))), -20)
		}, refuse, "0", true},
		{"truncated WAL", func(t *testing.T, fs vfs.FS) {
			truncateTo(t, fs, last(files(t, fs, suffix(".log"))), 0.6)
		}, refuse, "0", true},
		{"deleted WAL", func(t *testing.T, fs vfs.FS) {
			if err := fs.Remove("db/" + last(files(t, fs, suffix(".log")))); err != nil {
				t.Fatal(err)
			}
		}, refuse, "0", false}, // the head marker names the newest WAL
		{"flipped MANIFEST byte", func(t *testing.T, fs vfs.FS) {
			m := last(files(t, fs, prefix("MANIFEST-")))
			flipAt(t, fs, m, fileSize(t, fs, m)/2)
		}, eitherWay, "MANIFEST", false},
		{"deleted MANIFEST", func(t *testing.T, fs vfs.FS) {
			for _, m := range files(t, fs, prefix("MANIFEST-")) {
				if err := fs.Remove("db/" + m); err != nil {
					t.Fatal(err)
				}
			}
		}, eitherWay, "MANIFEST", false},
		{"deleted MANIFEST marker", func(t *testing.T, fs vfs.FS) {
			if err := fs.Remove("db/" + last(files(t, fs, prefix("marker.manifest")))); err != nil {
				t.Fatal(err)
			}
		}, eitherWay, "marker.manifest", false},
		{"flipped sstable footer", func(t *testing.T, fs vfs.FS) {
			flipAt(t, fs, files(t, fs, suffix(".sst"))[0], -10)
		}, eitherWay, "0", false},
		{"truncated sstable", func(t *testing.T, fs vfs.FS) {
			truncateTo(t, fs, files(t, fs, suffix(".sst"))[0], 0.99)
		}, eitherWay, "0", false},
		{"deleted head marker", func(t *testing.T, fs vfs.FS) {
			if err := fs.Remove("db/" + MarkerFile); err != nil {
				t.Fatal(err)
			}
		}, refuse, MarkerFile, false},
		{"flipped head marker", func(t *testing.T, fs vfs.FS) {
			flipAt(t, fs, MarkerFile, 8)
		}, refuse, MarkerFile, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, acked := runs(t)
			c.damage(t, fs)
			l, err := Open("db", testOptions(fs))
			switch {
			case c.want == intact || (c.want == eitherWay && err == nil):
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				wantIntact(t, l, acked)
				closeLog(t, l)
				return
			case err == nil:
				closeLog(t, l)
				t.Fatalf("Open accepted a damaged log: head %d of %d acknowledged", l.Head(), len(acked))
			}
			wantRefusal(t, err, c.file, c.offset)
			if c.want == eitherWay {
				// The MANIFEST is the list of the database's files: no
				// prefix can be recovered from a log without one.
				return
			}
			// A read-only open (verify) reports the same damage.
			ro := testOptions(fs)
			ro.ReadOnly = true
			if rl, err := Open("db", ro); err != nil {
				wantRefusal(t, err, c.file, c.offset)
			} else {
				rep, verr := rl.Verify(context.Background())
				if !IsCorruption(verr) || rep.OK() || rep.Problems[0].Seq == 0 || rep.Problems[0].File == "" && c.file != "" {
					t.Fatalf("read-only Verify: %v %+v", verr, rep.Problems)
				}
				closeLog(t, rl)
			}
			wantAccepted(t, fs, acked)
		})
	}
}

// TestCorruptTable flips a byte in an sstable's data block: reads that hit
// it fail with the file named, Verify reports it as a problem, Health turns
// unhealthy, the log refuses appends from then on (ErrDamaged), and
// nothing panics (Pebble's default reaction is Fatalf).
func TestCorruptTable(t *testing.T) {
	fs, acked := runs(t)
	sst := files(t, fs, suffix(".sst"))[0]
	flipAt(t, fs, sst, 60)
	l := mustOpen(t, "db", testOptions(fs))
	defer closeLog(t, l)
	it := l.Scan(0, Forward)
	n := 0
	for it.Next() {
		n++
	}
	var ce *CorruptionError
	if err := it.Close(); !errors.As(err, &ce) || ce.File != sst || n >= len(acked) {
		t.Fatalf("scan over a corrupt table read %d events, err %v", n, err)
	}
	rep, err := l.Verify(context.Background())
	if !IsCorruption(err) || rep.OK() {
		t.Fatalf("Verify: %v %+v", err, rep)
	}
	p := rep.Problems[len(rep.Problems)-1]
	if p.File != sst || p.Offset < 0 {
		t.Fatalf("problem %+v, want file %s with a block offset", p, sst)
	}
	if h := l.Health(); !errors.Is(h, ErrDamaged) || !errors.As(h, &ce) || ce.File != sst {
		t.Fatalf("Health: %v", h)
	}
	head := l.Head()
	_, err = l.Append(context.Background(), "s", Any, ev("AFTER", ""))
	if !errors.Is(err, ErrDamaged) || !errors.As(err, &ce) || ce.File != sst {
		t.Fatalf("append after a corrupt table was found: %v, want ErrDamaged naming %s", err, sst)
	}
	if l.Head() != head {
		t.Fatalf("head moved from %d to %d", head, l.Head())
	}
}

// TestOldFormatDirectory opens a directory written the way the previous
// build wrote it (Pebble's oldest format, no head marker) and checks that
// it is ratcheted to the newest format, gets a marker, keeps every event,
// and that damage to it is detected from then on.
func TestOldFormatDirectory(t *testing.T) {
	mem := vfs.NewMem()
	db, err := pebble.Open("db", &pebble.Options{FS: mem, FormatMajorVersion: pebble.FormatMinSupported,
		Logger: pebbleLogger{l: (&Options{}).EnsureDefaults().Logger}})
	if err != nil {
		t.Fatal(err)
	}
	var acked []Event
	b := db.NewBatch()
	b.Set(FormatKey, []byte{0, 0, 0, 1}, nil)
	for i := range 50 {
		e := Event{ID: idFrom(uint64(i + 1)), Seq: uint64(i + 1), Stream: "s", Version: uint64(i + 1), Type: "E",
			Time: newTestClock().Now(), Body: []byte(fmt.Sprint(i))}
		e.Correlation = e.ID
		rec, err := appendRecord(nil, &e)
		if err != nil {
			t.Fatal(err)
		}
		b.Set(EventKey(e.Seq), rec, nil)
		b.Set(StreamIndexKey(e.Stream, e.Version), EncodeSeqValue(e.Seq), nil)
		b.Set(IDIndexKey(e.ID), EncodeSeqValue(e.Seq), nil)
		acked = append(acked, e)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	l := mustOpen(t, "db", testOptions(mem))
	if got := l.db.FormatMajorVersion(); got != pebble.FormatNewest {
		t.Fatalf("format %v after open, want %v", got, pebble.FormatNewest)
	}
	wantIntact(t, l, acked)
	res := mustAppend(t, l, "s", 50, ev("NEW", ""))
	acked = append(acked, res.Events...)
	closeLog(t, l)
	if _, found, err := readMarker(mem, "db"); !found || err != nil {
		t.Fatalf("marker after the upgrade: %v %v", found, err)
	}
	// From now on a lost tail is detected.
	truncateTo(t, mem, last(files(t, mem, suffix(".log"))), 0.5)
	_, err = Open("db", testOptions(mem))
	wantRefusal(t, err, "0", true)
}

// TestMarkerAfterCrash: an idle committer records the head in the marker,
// so a WAL lost after a crash (not a clean close) is still detected.
func TestMarkerAfterCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	l := mustOpen(t, "db", testOptions(fs))
	l.markEvery = 0 // refresh after every idle commit (markerInterval in production)
	var acked []Event
	for i := range 3 {
		acked = append(acked, mustAppend(t, l, "s", Any, ev("E", fmt.Sprint(i))).Events...)
	}
	// The refresh after the second commit is done: the committer ran it
	// before taking the third append.
	if m, _, err := readMarker(fs, "db"); err != nil || m.head < 2 || m.clean {
		t.Fatalf("marker %+v %v, want head >= 2 before any close", m, err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	closeLog(t, l)
	if err := crashed.Remove("db/" + last(files(t, crashed, suffix(".log")))); err != nil {
		t.Fatal(err)
	}
	_, err := Open("db", testOptions(crashed))
	var dl *DataLossError
	if !errors.As(err, &dl) || dl.Acknowledged < 2 {
		t.Fatalf("Open after a crash and a lost WAL: %v", err)
	}
}

// TestRestoreCheckpointKeepingMarker is the restore procedure of
// docs/operations.md: the checkpoint's files with the damaged directory's
// head marker. Open sees the events after the checkpoint as lost, and
// AcceptDataLoss continues after every sequence the original handed out.
func TestRestoreCheckpointKeepingMarker(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(fs))
	appendN(t, l, "s", "E", 10)
	if err := l.Checkpoint("ckpt"); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, "s", "LATER", 10)
	closeLog(t, l)
	orig, _, err := readMarker(fs, "db")
	if err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(fs, "ckpt", orig); err != nil {
		t.Fatal(err)
	}
	_, err = Open("ckpt", testOptions(fs))
	var dl *DataLossError
	if !errors.As(err, &dl) || dl.Head != 10 || dl.Acknowledged != 20 {
		t.Fatalf("Open of the restored copy: %v", err)
	}
	o := testOptions(fs)
	o.AcceptDataLoss = true
	l = mustOpen(t, "ckpt", o)
	defer closeLog(t, l)
	if l.Head() <= orig.reserved {
		t.Fatalf("head %d after the restore, the original reserved up to %d", l.Head(), orig.reserved)
	}
	mustVerify(t, l)
}

// dropRecords takes the records first..last out of the tables' metadata,
// the way a MANIFEST that lost a table does: no tombstone, no trace in the
// WAL, the keys are simply not in any table Pebble lists (Pebble's Excise
// edits the MANIFEST to that effect).
func dropRecords(t *testing.T, fs vfs.FS, first, last uint64) {
	t.Helper()
	l := mustOpen(t, "db", testOptions(fs))
	if err := l.db.Excise(context.Background(), pebble.KeyRange{Start: EventKey(first), End: EventKey(last + 1)}); err != nil {
		t.Fatal(err)
	}
	closeLog(t, l)
}

// TestHoleAtOpen: records missing below the head (a table dropped from
// the MANIFEST) are found at Open from the tables' bounds, without reading
// the log. The log opens, so that what is left can be read and verified,
// but it refuses appends with ErrDamaged and Health names the first
// missing record.
func TestHoleAtOpen(t *testing.T) {
	for _, c := range []struct {
		name        string
		first, last uint64
	}{
		{"middle", 101, 200},
		{"start", 1, 50},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, acked := runs(t)
			dropRecords(t, fs, c.first, c.last)
			l := mustOpen(t, "db", testOptions(fs))
			defer closeLog(t, l)
			if l.Head() != uint64(len(acked)) {
				t.Fatalf("head %d, want %d", l.Head(), len(acked))
			}
			h := l.Health()
			var ce *CorruptionError
			if !errors.Is(h, ErrDamaged) || !errors.As(h, &ce) || ce.Seq != c.first ||
				!strings.Contains(h.Error(), fmt.Sprintf("%d events", c.last-c.first+1)) {
				t.Fatalf("Health: %v, want ErrDamaged at seq %d", h, c.first)
			}
			if _, err := l.Append(context.Background(), "s", Any, ev("AFTER", "")); !errors.Is(err, ErrDamaged) || !IsCorruption(err) {
				t.Fatalf("append over a hole: %v, want ErrDamaged", err)
			}
			if l.Head() != uint64(len(acked)) {
				t.Fatalf("head moved to %d", l.Head())
			}
			// Reads up to the hole work; a read across it fails.
			if _, err := l.GetSeq(c.last + 1); err != nil {
				t.Fatalf("read above the hole: %v", err)
			}
			if _, err := l.GetSeq(c.first); !IsCorruption(err) && !errors.Is(err, ErrNotFound) {
				t.Fatalf("read in the hole: %v", err)
			}
			// A read-only open (verify) sees it too.
			closeLog(t, l)
			ro := testOptions(fs)
			ro.ReadOnly = true
			rl := mustOpen(t, "db", ro)
			defer closeLog(t, rl)
			if h := rl.Health(); !errors.As(h, &ce) || ce.Seq != c.first {
				t.Fatalf("read-only Health: %v", h)
			}
		})
	}
}

// TestNoHoleAtOpen: what looks like a hole from the tables' bounds but is
// not one is not reported: records still in the memtable (a read-only
// open replays the WAL without flushing it) and ranges removed by Retire
// (their hole keys say so).
func TestNoHoleAtOpen(t *testing.T) {
	fs, acked := runs(t)
	ro := testOptions(fs)
	ro.ReadOnly = true
	rl := mustOpen(t, "db", ro)
	if h := rl.Health(); h != nil || rl.Head() != uint64(len(acked)) {
		t.Fatalf("read-only open with records in the WAL: head %d, %v", rl.Head(), h)
	}
	closeLog(t, rl)
	l := mustOpen(t, "db", testOptions(fs))
	if h := l.Health(); h != nil {
		t.Fatalf("open: %v", h)
	}
	mustAppend(t, l, "s", Any, ev("AFTER", ""))
	closeLog(t, l)
}

// TestHoleBetweenWideTables: tables that hold index keys on both sides of
// the records (every flush of a daemon's memtable: the causation index
// below them, the id and stream indexes above) do not say by their bounds
// which records they hold. Here one such table holds 1..100, another
// 201..300 (added the way Pebble adds a table, as a MANIFEST that lost the
// one between would list them), no table holds 101..200, and Pebble
// compacts the two into one table whose range spans the hole: the count of
// records in its property says that some are missing.
func TestHoleBetweenWideTables(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(fs))
	cause := mustAppend(t, l, "s", Any, ev("E", "")).Events[0]
	for range 99 {
		mustAppend(t, l, "s", Any, Event{Type: "E", Causation: cause.ID})
	}
	if err := l.db.Flush(); err != nil {
		t.Fatal(err)
	}
	type kv struct{ k, v []byte }
	var kvs []kv
	for i := range uint64(100) {
		e := Event{ID: l.NewID(), Seq: 201 + i, Stream: "t", Version: 1 + i, Type: "E", Time: newTestClock().Now(),
			Causation: cause.ID, Correlation: cause.Correlation}
		rec, err := appendRecord(nil, &e)
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, kv{EventKey(e.Seq), rec}, kv{CausationIndexKey(e.Causation, e.Seq), nil},
			kv{IDIndexKey(e.ID), EncodeSeqValue(e.Seq)}, kv{StreamIndexKey(e.Stream, e.Version), EncodeSeqValue(e.Seq)})
	}
	slices.SortFunc(kvs, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	f, err := fs.Create("db/wide.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: l.db.TableFormat()})
	for _, p := range kvs {
		if err := w.Set(p.k, p.v); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.db.Ingest(ctx, []string{"db/wide.sst"}); err != nil {
		t.Fatal(err)
	}
	closeLog(t, l)

	l = mustOpen(t, "db", testOptions(fs))
	defer closeLog(t, l)
	var ce *CorruptionError
	if h := l.Health(); l.Head() != 300 || !errors.Is(h, ErrDamaged) || !errors.As(h, &ce) || ce.Seq != 101 ||
		!strings.Contains(h.Error(), "101 to 200 (100 events)") {
		t.Fatalf("head %d, Health: %v; want ErrDamaged for 101 to 200", l.Head(), h)
	}
}
