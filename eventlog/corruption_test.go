package eventlog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// corruptLog builds a 20-event log on a MemFS, closes it, applies damage with
// raw Pebble (as an outside tool or a disk would), and reopens it.
func corruptLog(t *testing.T, damage func(db *pebble.DB, evs []Event)) (*Log, []Event) {
	t.Helper()
	mem := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(mem))
	var evs []Event
	for i := range 20 {
		var cause Event
		if i > 0 {
			cause = evs[i-1]
		}
		res := mustAppend(t, l, fmt.Sprintf("s%d", i%3), Any, Event{Type: "E", Body: []byte(fmt.Sprint(i)), Causation: cause.ID})
		evs = append(evs, res.Events...)
	}
	closeLog(t, l)
	db, err := pebble.Open("db", &pebble.Options{FS: mem, Logger: pebbleLogger{l: (&Options{}).EnsureDefaults().Logger}})
	if err != nil {
		t.Fatal(err)
	}
	damage(db, evs)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, "db", testOptions(mem))
	t.Cleanup(func() { closeLog(t, l) })
	return l, evs
}

func set(t *testing.T, db *pebble.DB, key, val []byte) {
	if err := db.Set(key, val, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func del(t *testing.T, db *pebble.DB, key []byte) {
	if err := db.Delete(key, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func wantProblem(t *testing.T, l *Log, seq uint64, reason string) Report {
	t.Helper()
	rep, err := l.Verify(context.Background())
	var ce *CorruptionError
	if !IsCorruption(err) || !errors.As(err, &ce) {
		t.Fatalf("Verify: %v (report %+v)", err, rep)
	}
	if rep.OK() || ce.Seq != seq || !strings.Contains(ce.Reason, reason) {
		t.Fatalf("first problem %v, want seq %d %q; all: %v", ce, seq, reason, rep.Problems)
	}
	// An audit in steps, its records read as it walks them, finds the same.
	a, nerr := l.NewAudit(context.Background(), nil)
	if nerr != nil {
		t.Fatal(nerr)
	}
	for a.Next() {
	}
	arep, aerr := a.Finish()
	if fmt.Sprintf("%+v %v", arep, aerr) != fmt.Sprintf("%+v %v", rep, err) {
		t.Fatalf("audit in steps: %+v %v\nVerify: %+v %v", arep, aerr, rep, err)
	}
	return rep
}

func TestVerifyDetectsCorruption(t *testing.T) {
	t.Run("flipped byte in a record", func(t *testing.T) {
		l, evs := corruptLog(t, func(db *pebble.DB, evs []Event) {
			v, closer, err := db.Get(EventKey(7))
			if err != nil {
				t.Fatal(err)
			}
			rec := append([]byte(nil), v...)
			closer.Close()
			rec[len(rec)-1] ^= 0x01
			set(t, db, EventKey(7), rec)
		})
		wantProblem(t, l, 7, "checksum")
		// Point reads check the checksum and report it with its position.
		if _, err := l.Get(evs[6].ID); !IsCorruption(err) {
			t.Fatalf("Get: %v", err)
		}
		var ce *CorruptionError
		if _, err := l.GetSeq(7); !errors.As(err, &ce) || ce.Seq != 7 {
			t.Fatalf("GetSeq: %v", err)
		}
		it := l.ReadStream(evs[6].Stream, 0)
		for it.Next() {
		}
		if err := it.Close(); !errors.As(err, &ce) || ce.Seq != 7 {
			t.Fatalf("ReadStream: %v", err)
		}
		// Bulk scans do not: Pebble checksummed the block the record came
		// from, and this damage was written through Pebble (format.md,
		// "Which reads check the checksum").
		if got := collect(t, l.Scan(1, Forward)); len(got) != 20 || string(got[6].Body) == "6" {
			t.Fatalf("scan read %d events, the 7th %+v", len(got), got[6])
		}
		// An audit's scan does.
		for _, borrowed := range []bool{false, true} {
			it := l.ScanChecked(1, borrowed)
			n := 0
			for it.Next() {
				n++
			}
			if err := it.Close(); !errors.As(err, &ce) || ce.Seq != 7 || n != 6 {
				t.Fatalf("checked scan (borrowed %v) read %d events then %v", borrowed, n, err)
			}
		}
	})
	t.Run("damaged record structure", func(t *testing.T) {
		l, _ := corruptLog(t, func(db *pebble.DB, evs []Event) {
			v, closer, err := db.Get(EventKey(7))
			if err != nil {
				t.Fatal(err)
			}
			rec := append([]byte(nil), v...)
			closer.Close()
			set(t, db, EventKey(7), append(rec, 0)) // a byte after the body
		})
		wantProblem(t, l, 7, "checksum")
		// Scans report what their other checks find, with its position,
		// instead of skipping it.
		it := l.Scan(1, Forward)
		n := 0
		for it.Next() {
			n++
		}
		var ce *CorruptionError
		if err := it.Close(); !errors.As(err, &ce) || ce.Seq != 7 || n != 6 || !strings.Contains(ce.Reason, "trailing bytes") {
			t.Fatalf("scan read %d events then %v", n, err)
		}
		sub := l.Subscribe(context.Background(), 7)
		if _, err := sub.Next(context.Background()); !IsCorruption(err) {
			t.Fatalf("subscription: %v", err)
		}
	})
	t.Run("missing stream index entry", func(t *testing.T) {
		l, evs := corruptLog(t, func(db *pebble.DB, evs []Event) {
			del(t, db, StreamIndexKey(evs[4].Stream, evs[4].Version))
		})
		wantProblem(t, l, 5, "stream index entry")
		it := l.ReadStream(evs[4].Stream, 0)
		for it.Next() {
		}
		if err := it.Close(); !IsCorruption(err) {
			t.Fatalf("ReadStream over the hole: %v", err)
		}
	})
	t.Run("missing id index entry", func(t *testing.T) {
		l, _ := corruptLog(t, func(db *pebble.DB, evs []Event) { del(t, db, IDIndexKey(evs[11].ID)) })
		wantProblem(t, l, 12, "id index entry")
	})
	t.Run("missing causation index entry", func(t *testing.T) {
		l, _ := corruptLog(t, func(db *pebble.DB, evs []Event) {
			del(t, db, CausationIndexKey(evs[2].Causation, 3))
		})
		wantProblem(t, l, 3, "causation index entry")
	})
	t.Run("missing record", func(t *testing.T) {
		l, _ := corruptLog(t, func(db *pebble.DB, evs []Event) { del(t, db, EventKey(10)) })
		rep := wantProblem(t, l, 10, "missing")
		if rep.ProblemCount < 4 { // the gap, and three index entries pointing into it
			t.Fatalf("problems %v", rep.Problems)
		}
		it := l.Scan(1, Forward)
		for it.Next() {
		}
		var ce *CorruptionError
		if err := it.Close(); !errors.As(err, &ce) || ce.Seq != 10 {
			t.Fatalf("scan over the hole: %v", err)
		}
	})
	t.Run("index entry pointing elsewhere", func(t *testing.T) {
		l, _ := corruptLog(t, func(db *pebble.DB, evs []Event) {
			set(t, db, StreamIndexKey("s0", 3), EncodeSeqValue(8))
		})
		wantProblem(t, l, 7, "stream index entry")
	})
	t.Run("extra index entry", func(t *testing.T) {
		l, _ := corruptLog(t, func(db *pebble.DB, evs []Event) {
			set(t, db, IDIndexKey(idFrom(5)), EncodeSeqValue(5))
		})
		rep := wantProblem(t, l, 5, "id index says")
		if rep.ProblemCount != 1 {
			t.Fatalf("problems %v", rep.Problems)
		}
	})
	t.Run("stray key", func(t *testing.T) {
		l, _ := corruptLog(t, func(db *pebble.DB, evs []Event) { set(t, db, []byte("zzz"), nil) })
		rep, err := l.Verify(context.Background())
		if !IsCorruption(err) || rep.ProblemCount != 1 || !strings.Contains(rep.Problems[0].Reason, "outside every namespace") {
			t.Fatalf("%v %v", err, rep.Problems)
		}
	})
}

// TestVerifyDigests: a sound log is audited by sequential walks only (the
// digests agree, no lookups), with progress through every phase; damage
// that leaves every index the right size and well formed (an entry that
// points to another record, two entries swapped) makes the digests
// disagree, and the second run with lookups names it.
func TestVerifyDigests(t *testing.T) {
	t.Run("sound", func(t *testing.T) {
		l, evs := corruptLog(t, func(*pebble.DB, []Event) {})
		var phases []string
		last := map[string]VerifyProgress{}
		rep, err := l.VerifyWith(context.Background(), &VerifyOptions{OnProgress: func(p VerifyProgress) {
			if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
				phases = append(phases, p.Phase)
			}
			last[p.Phase] = p
		}})
		if err != nil || rep.Lookups || rep.Events != uint64(len(evs)) {
			t.Fatalf("%v %+v", err, rep)
		}
		want := []string{"records", "holes", "stream index", "id index", "causation index", "other keys"}
		if fmt.Sprint(phases) != fmt.Sprint(want) {
			t.Fatalf("phases %q, want %q", phases, want)
		}
		// Totals are what the records call for: one stream and one id
		// entry per event, a causation entry for all but the first.
		if p := last["records"]; p.Total != 20 {
			t.Fatalf("records progress %+v", p)
		}
		if p := last["id index"]; p.Total != 20 {
			t.Fatalf("id index progress %+v", p)
		}
		if p := last["causation index"]; p.Total != 19 {
			t.Fatalf("causation index progress %+v", p)
		}
	})
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, db *pebble.DB, evs []Event)
		seq    uint64
		reason string
	}{
		{"id entry pointing to another record", func(t *testing.T, db *pebble.DB, evs []Event) {
			set(t, db, IDIndexKey(evs[3].ID), EncodeSeqValue(9))
		}, 4, "id index entry"},
		{"two stream entries swapped", func(t *testing.T, db *pebble.DB, evs []Event) {
			// s1 versions 1 and 2 are seqs 2 and 5.
			set(t, db, StreamIndexKey("s1", 1), EncodeSeqValue(5))
			set(t, db, StreamIndexKey("s1", 2), EncodeSeqValue(2))
		}, 2, "stream index entry"},
		{"causation entry under another cause", func(t *testing.T, db *pebble.DB, evs []Event) {
			del(t, db, CausationIndexKey(evs[6].Causation, 7))
			set(t, db, CausationIndexKey(evs[0].ID, 7), nil)
		}, 7, "causation index entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := corruptLog(t, func(db *pebble.DB, evs []Event) { tc.damage(t, db, evs) })
			rep := wantProblem(t, l, tc.seq, tc.reason)
			if !rep.Lookups {
				t.Fatalf("the digests agreed: %+v", rep)
			}
		})
	}
}
