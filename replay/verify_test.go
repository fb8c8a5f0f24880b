package replay

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// healthyLog returns a log with a finished history and its persisted
// projections (with snapshots), closed; and the history.
func healthyLog(t *testing.T) (vfs.FS, []eventlog.Event) {
	t.Helper()
	evs := replaytest.Generate(42, replaytest.Config{Tasks: 30, Concurrency: 5, Finish: true})
	l, fs := logWith(t, evs)
	if _, _, err := Open(context.Background(), l, &Options{SnapshotEvery: 3, CheckpointEvery: 50}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fs, evs
}

// rawEdit changes the Pebble database under a closed log directly, the way
// disk corruption or a buggy tool would.
func rawEdit(t *testing.T, fs vfs.FS, edit func(db *pebble.DB)) {
	t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	edit(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// verifyDir verifies the log twice: evicting each finished task after
// every event (reading it back for a late event) and, as the default does
// on a log this small, never; both must report the same. It returns the
// first.
func verifyDir(t *testing.T, fs vfs.FS) *Report {
	t.Helper()
	l := openLog(t, fs, "db", true)
	defer l.Close()
	var reps [3]*Report
	for i, vo := range []VerifyOptions{{evictEvery: 1}, {evictEvery: 1 << 30}, {evictEvery: 1, twoWalks: true}} {
		vo.Options = &Options{SnapshotEvery: 3}
		rep, err := Verify(context.Background(), l, &vo)
		if err != nil {
			t.Fatalf("verify could not run: %v", err)
		}
		rep.Duration, rep.EventsPerSecond = 0, 0
		reps[i] = rep
	}
	str := func(r *Report) string {
		c := *r
		c.Log, c.FirstProblem, c.evicted, c.reloads, c.walks = nil, nil, 0, 0, 0
		return fmt.Sprintf("%+v %+v %v", c, *r.Log, r.FirstProblem)
	}
	if a, b := str(reps[0]), str(reps[1]); a != b {
		t.Fatalf("verify evicting finished tasks reports\n%s\nand keeping them\n%s", a, b)
	}
	// One walk over the records proves what an audit then a fold of
	// the records in a second walk prove.
	if a, b := str(reps[0]), str(reps[2]); a != b {
		t.Fatalf("verify in one walk reports\n%s\nand in two walks\n%s", a, b)
	}
	if reps[2].walks != 2 || reps[0].walks != reps[1].walks {
		t.Fatalf("walks %d, %d, %d", reps[0].walks, reps[1].walks, reps[2].walks)
	}
	return reps[0]
}

// wantFirst checks that the report is bad and that its first problem is of
// kind at seq (0: any seq) and mentions text.
func wantFirst(t *testing.T, rep *Report, kind ProblemKind, seq uint64, text string) {
	t.Helper()
	if rep.OK() {
		t.Fatalf("verify passed a corrupted log")
	}
	f := rep.FirstProblem
	t.Log(rep.Summary())
	if f.Kind != kind || (seq != 0 && f.Seq != seq) || !strings.Contains(f.String(), text) {
		var all []string
		for _, p := range rep.Problems {
			all = append(all, p.String())
		}
		t.Fatalf("first problem %q; want kind %s at seq %d mentioning %q; all:\n%s", f, kind, seq, text, strings.Join(all, "\n"))
	}
}

func TestVerifyHealthyLog(t *testing.T) {
	fs, evs := healthyLog(t)
	rep := verifyDir(t, fs)
	if !rep.OK() {
		t.Fatalf("healthy log: %s", rep.Summary())
	}
	if rep.Events != len(evs) || rep.Checkpoint != uint64(len(evs)) || rep.Snapshots == 0 || rep.Tasks != 30 {
		t.Fatalf("verify did not check everything: events %d/%d, checkpoint %d, snapshots %d, tasks %d",
			rep.Events, len(evs), rep.Checkpoint, rep.Snapshots, rep.Tasks)
	}
}

// TestVerifyReadsTheRecordsOnce: on a sound log the fold reads the
// records from eventlog's audit as it checks them, one walk; on a log with
// a damaged record it folds them again in a second walk (verifyDir checks
// that both report the same as two walks).
func TestVerifyReadsTheRecordsOnce(t *testing.T) {
	fs, evs := healthyLog(t)
	rep := verifyDir(t, fs)
	if !rep.OK() || rep.walks != 1 || rep.Events != len(evs) {
		t.Fatalf("%s: %d walks over the records, %d events; want 1, %d", rep.Summary(), rep.walks, rep.Events, len(evs))
	}
	// Holes that retention recorded are no problem of the records: one walk.
	l := openLog(t, fs, "db", false)
	var streams []string
	for _, ev := range evs {
		if ev.Type == string(fsm.TaskCreated) && len(streams) < 2 {
			streams = append(streams, ev.Stream)
		}
	}
	if _, err := l.Retire(context.Background(), retirementOf(t, l, ulid.MustParse("01JDQ00000000000000000MANI"), streams...)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if rep := verifyDir(t, fs); rep.walks != 1 || rep.Log.Holes == 0 {
		t.Fatalf("%s: %d walks over the records, %d holes; want 1, some", rep.Summary(), rep.walks, rep.Log.Holes)
	}
	rawEdit(t, fs, func(db *pebble.DB) {
		if err := db.Delete(eventlog.EventKey(uint64(len(evs)/2)), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	})
	if rep := verifyDir(t, fs); rep.OK() || rep.walks != 2 {
		t.Fatalf("%s: %d walks over the records; want a problem and 2", rep.Summary(), rep.walks)
	}
}

func TestVerifyCatchesFlippedByte(t *testing.T) {
	fs, evs := healthyLog(t)
	seq := uint64(len(evs) / 2)
	rawEdit(t, fs, func(db *pebble.DB) {
		v, closer, err := db.Get(eventlog.EventKey(seq))
		if err != nil {
			t.Fatal(err)
		}
		rec := append([]byte(nil), v...)
		closer.Close()
		rec[len(rec)-3] ^= 0x20 // a byte of the body
		if err := db.Set(eventlog.EventKey(seq), rec, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	})
	rep := verifyDir(t, fs)
	wantFirst(t, rep, ProblemLog, seq, "checksum")
	// The fold stepped over the bad record and read the rest of the log.
	if rep.Events != len(evs)-1 {
		t.Fatalf("folded %d events, want all but the corrupt one (%d)", rep.Events, len(evs)-1)
	}
	// Reported: eventlog's checksum, the fold's unreadable record, and
	// once (not for every later event) the task that lost an event.
	kinds := map[ProblemKind]int{}
	for _, p := range rep.Problems {
		kinds[p.Kind]++
	}
	if rep.ProblemCount != 3 || kinds[ProblemLog] != 1 || kinds[ProblemRead] != 1 || kinds[ProblemSequence] != 1 {
		t.Fatalf("want one log, one read and one sequence problem, got %v", rep.Problems)
	}
}

func TestVerifyCatchesMissingIndexEntry(t *testing.T) {
	fs, evs := healthyLog(t)
	ev := evs[len(evs)/3]
	rawEdit(t, fs, func(db *pebble.DB) {
		if err := db.Delete(eventlog.StreamIndexKey(ev.Stream, ev.Version), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	})
	wantFirst(t, verifyDir(t, fs), ProblemLog, ev.Seq, "stream")
}

func TestVerifyCatchesIllegalTransition(t *testing.T) {
	fs, evs := healthyLog(t)
	l := openLog(t, fs, "db", false)
	// A task that completed: REASON_DONE is illegal there. Appended with
	// the log's own API, around the agent and the fold.
	v, _, err := Open(context.Background(), l, &Options{SnapshotEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	page, err := v.Tasks(context.Background(), Query{Filter: projection.Filter{States: []fsm.State{fsm.StateCompleted}}, Limit: 1})
	if err != nil || len(page.Tasks) == 0 {
		t.Fatalf("no completed task: %v", err)
	}
	id := page.Tasks[0].ID
	body, _ := fsm.Encode(&fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{ActionType: fsm.ActionRespond}}}})
	res, err := l.Append(context.Background(), id, eventlog.Any, eventlog.Event{Type: string(fsm.ReasonDone), Schema: fsm.SchemaVersion, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	// An unknown event type on a task stream, too: a verify error, not a crash.
	if _, err := l.Append(context.Background(), id, eventlog.Any, eventlog.Event{Type: "NOT_A_TYPE", Schema: 1}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	rep := verifyDir(t, fs)
	wantFirst(t, rep, ProblemTransition, res.FirstSeq, "completed -(REASON_DONE)->")
	if rep.ProblemCount != 2 || rep.Problems[1].Kind != ProblemDecode || rep.Problems[1].Seq != res.FirstSeq+1 {
		t.Fatalf("want the unknown type reported as a decode problem; got %v", rep.Problems)
	}
	// Recovery folds past both without failing and counts them.
	l = openLog(t, fs, "db", false)
	defer l.Close()
	_, rec, err := Open(context.Background(), l, &Options{SnapshotEvery: 3})
	if err != nil || rec.Refused != 2 {
		t.Fatalf("recovery over refused events: %v, refused %d", err, rec.Refused)
	}
	_ = evs
}

func TestVerifyCatchesProjectionDisagreement(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		kind ProblemKind
		text string
		edit func(t *testing.T, l *eventlog.Log, evs []eventlog.Event) []byte
	}{
		{"task record", ProblemProjection, "proj/t/", func(t *testing.T, l *eventlog.Log, evs []eventlog.Event) []byte {
			id := firstTask(evs) // the first TASK_CREATED
			raw, err := l.GetAux(taskKey(prefTask, id))
			if err != nil {
				t.Fatal(err)
			}
			task, ref, err := projection.DecodeStoredTask(raw)
			if err != nil {
				t.Fatal(err)
			}
			task.Context.FinalResult += "!"
			b, _ := projection.EncodeStoredTask(&task, ref.Seq)
			return b
		}},
		{"stats", ProblemProjection, "stats", func(t *testing.T, l *eventlog.Log, evs []eventlog.Event) []byte {
			st := projection.NewStats(projection.StatsOptions{})
			b, _ := st.Encode()
			return b
		}},
		{"snapshot", ProblemSnapshot, "snapshot", nil},
		{"memory fact", ProblemProjection, "memory", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, evs := healthyLog(t)
			l := openLog(t, fs, "db", false)
			var key, val []byte
			if tc.edit != nil {
				val = tc.edit(t, l, evs)
				key = taskKey(prefTask, firstTask(evs))
				if tc.name == "stats" {
					key = keyStats
				}
			} else if tc.name == "memory fact" {
				it := l.ScanAux([]byte(prefFact))
				if !it.Next() {
					t.Fatal("no memory fact persisted")
				}
				key = it.Key()
				f, _ := projection.DecodeFact(it.Value())
				it.Close()
				f.Content += " (edited)"
				val, _ = f.Encode()
			} else {
				it := l.ScanAux([]byte(prefSnap))
				if !it.Next() {
					t.Fatal("no snapshot persisted")
				}
				key = it.Key()
				task, ref, err := projection.DecodeStoredTask(it.Value())
				it.Close()
				if err != nil {
					t.Fatal(err)
				}
				task.Priority++
				val, _ = projection.EncodeStoredTask(&task, ref.Seq)
			}
			if err := l.WriteAux(ctx, func(b *eventlog.AuxBatch) error { b.Set(key, val); return nil }); err != nil {
				t.Fatal(err)
			}
			l.Close()
			rep := verifyDir(t, fs)
			if rep.OK() {
				t.Fatal("verify passed projections that disagree with the log")
			}
			found := false
			for _, p := range rep.Problems {
				found = found || (p.Kind == tc.kind && strings.Contains(p.String(), tc.text))
			}
			if !found || rep.ProblemCount != 1 {
				t.Fatalf("want exactly one %s problem mentioning %q, got %d: %v", tc.kind, tc.text, rep.ProblemCount, rep.Problems)
			}
		})
	}
}

// TestVerifyCatchesMissingQueueEntry: a task missing from the queue order
// index (it would not be listed in queue order) is reported, and a stale
// entry is not.
func TestVerifyCatchesMissingQueueEntry(t *testing.T) {
	ctx := context.Background()
	fs, evs := healthyLog(t)
	l := openLog(t, fs, "db", false)
	raw, err := l.GetAux(taskKey(prefSum, firstTask(evs)))
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := projection.DecodeSummary(raw)
	stale := sum
	stale.Priority += 3
	if err := l.WriteAux(ctx, func(b *eventlog.AuxBatch) error {
		b.Delete(append([]byte(prefQueue), sum.QueueKey()...))
		b.Set(append([]byte(prefQueue), stale.QueueKey()...), nil)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	rep := verifyDir(t, fs)
	if rep.ProblemCount != 1 || rep.Problems[0].Kind != ProblemProjection || !strings.Contains(rep.Problems[0].Reason, "queue order index") {
		t.Fatalf("want one problem for the missing queue entry, got %d: %v", rep.ProblemCount, rep.Problems)
	}
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// firstTask returns the id of the first task created in evs.
func firstTask(evs []eventlog.Event) string {
	for _, ev := range evs {
		if ev.Type == string(fsm.TaskCreated) {
			return ev.Stream
		}
	}
	return ""
}

// TestVerifyEvictsFinishedTasks: verify's fold lets each finished task go
// once checked (memory grows with the tasks in flight, not with the log),
// reads one back by folding its stream again when a late event comes,
// and reports exactly what a fold that keeps every task reports (verifyDir
// compares the two); progress goes through every phase.
func TestVerifyEvictsFinishedTasks(t *testing.T) {
	fs, evs := healthyLog(t)
	l := openLog(t, fs, "db", false)
	id := firstTask(evs)
	// A late fact for a finished task, after the checkpoint: refused.
	body, _ := fsm.Encode(&fsm.TaskFailedBody{Reason: "late"})
	res, err := l.Append(context.Background(), id, eventlog.Any, eventlog.Event{Type: string(fsm.TaskFailed), Schema: fsm.SchemaVersion, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	rep := verifyDir(t, fs)
	wantFirst(t, rep, ProblemTransition, res.FirstSeq, "TASK_FAILED")
	// Every task left; the one with the late event came back and, refused,
	// stays. (Some came back for a reflection, too.)
	if rep.Tasks != 30 || rep.evicted != 29 || rep.reloads == 0 {
		t.Fatalf("tasks %d, evicted %d, reloaded %d; want 30, 29, some", rep.Tasks, rep.evicted, rep.reloads)
	}

	ro := openLog(t, fs, "db", true)
	defer ro.Close()
	var phases []string
	_, err = Verify(context.Background(), ro, &VerifyOptions{Options: &Options{SnapshotEvery: 3}, OnProgress: func(p eventlog.VerifyProgress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := "[fold projections fold log: holes log: stream index log: id index log: causation index log: other keys]"
	if fmt.Sprint(phases) != want {
		t.Fatalf("phases %v, want %s", phases, want)
	}
}

// TestVerifyEvictsWithoutProjections: on a log without persisted
// projections (nothing to compare) and with tasks left in flight, the
// evicting fold reports what the keeping one does (verifyDir).
func TestVerifyEvictsWithoutProjections(t *testing.T) {
	evs := replaytest.Generate(5, replaytest.Config{Tasks: 40, Concurrency: 8})
	l, fs := logWith(t, evs)
	l.Close()
	rep := verifyDir(t, fs)
	if !rep.OK() || rep.Checkpoint != 0 || rep.evicted == 0 || rep.Events != len(evs) {
		t.Fatalf("%s: checkpoint %d, evicted %d", rep.Summary(), rep.Checkpoint, rep.evicted)
	}
}
