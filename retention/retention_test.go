package retention

import (
	"bytes"
	"context"
	"errors"
	"flag"
	mrand "math/rand"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

var (
	crashIters = flag.Int("retention.crash.iters", 6, "iterations of TestRunCrash")
	crashSeed  = flag.Int64("retention.crash.seed", 0, "seed of TestRunCrash (0: time-based)")
)

// start is where generated histories begin; "now" is a year later, so
// every finished task is older than the window.
var start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func testOpts(fs vfs.FS) *Options {
	return &Options{Window: 720 * time.Hour, ArchiveDir: "archive", FS: fs,
		Clock: func() time.Time { return start.AddDate(1, 0, 0) }}
}

// newLog writes a generated history of tasks, some left in flight or
// suspended, into a log on fs and persists its projections, as the daemon
// would have.
func newLog(t testing.TB, fs vfs.FS, seed uint64, tasks int) *eventlog.Log {
	t.Helper()
	ctx := context.Background()
	l, err := eventlog.Open("db", &eventlog.Options{FS: fs, Entropy: mrand.New(mrand.NewSource(int64(seed))), MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	evs := replaytest.Generate(seed, replaytest.Config{Tasks: tasks, Start: start})
	if err := replaytest.AppendAll(ctx, l, evs, 0); err != nil {
		t.Fatal(err)
	}
	persist(t, l)
	return l
}

func persist(t testing.TB, l *eventlog.Log) {
	t.Helper()
	v, _, err := replay.Open(context.Background(), l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Checkpoint(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// verifyAll runs the full audit of the log and of its archives.
func verifyAll(t testing.TB, l *eventlog.Log, fs vfs.FS) (*replay.Report, *replay.ArchiveReport) {
	t.Helper()
	ctx := context.Background()
	rep, err := replay.Verify(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify: %s\n%v", rep.Summary(), rep.Problems)
	}
	ar, err := replay.VerifyArchives(ctx, replay.FromLog(l), fs, "archive")
	if err != nil {
		t.Fatal(err)
	}
	if !ar.OK() {
		t.Fatalf("verify archives: %v", ar.Problems)
	}
	return rep, ar
}

// taskStates folds the log and returns every task's state.
func taskStates(t testing.TB, l *eventlog.Log) map[string]fsm.Task {
	t.Helper()
	v, err := replay.NewView(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replay.Fold(context.Background(), v, replay.FromLog(l), replay.FoldOptions{}); err != nil {
		t.Fatal(err)
	}
	out := map[string]fsm.Task{}
	states := append([]fsm.State{fsm.StateIdle, fsm.StateReasoning, fsm.StateActing, fsm.StateSuspended}, fsm.DispatchStates...)
	for _, tk := range v.InState(states...) {
		out[tk.ID] = tk
	}
	return out
}

func TestRun(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	l := newLog(t, fs, 7, 120)
	before := taskStates(t, l)
	head := l.Head()

	res, err := Run(ctx, l, testOpts(fs))
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if m == nil || m.Tasks == 0 || res.Seq != head+1 || l.Head() != head+1 {
		t.Fatalf("run: %+v, head %d (was %d)", res, l.Head(), head)
	}
	after := taskStates(t, l)
	removed := 0
	for id, tk := range before {
		_, kept := after[id]
		switch {
		case !tk.IsTerminal() && !kept:
			t.Errorf("task %s in %s was removed", id, tk.State)
		case tk.IsTerminal() && !kept:
			removed++
		}
	}
	if removed != m.Tasks {
		t.Fatalf("%d tasks gone, the manifest says %d", removed, m.Tasks)
	}
	// The queue order index names no removed task.
	it := l.ScanAux([]byte("proj/q/"))
	queued := 0
	for it.Next() {
		id := string(it.Key()[len("proj/q/")+projection.QueueKeyLen:])
		if _, kept := after[id]; !kept {
			t.Errorf("the queue index still names removed task %s", id)
		}
		queued++
	}
	if err := it.Close(); err != nil || queued != len(after) {
		t.Errorf("queue index: %d entries for %d tasks (%v)", queued, len(after), err)
	}
	rep, ar := verifyAll(t, l, fs)
	if rep.Log.Retired != uint64(m.Events) || ar.Events != m.Events || ar.Manifests != 1 {
		t.Fatalf("verify: %d retired, archive %d events, %d manifests; manifest %d events", rep.Log.Retired, ar.Events, ar.Manifests, m.Events)
	}

	// The archive reads like a log: its tasks fold, finished.
	f, err := fs.Open("archive/" + m.File)
	if err != nil {
		t.Fatal(err)
	}
	ml, h, err := replay.ReadExport(f)
	f.Close()
	if err != nil || h.Archive == nil || h.Archive.Hash != m.Hash || ml.Len() != m.Events {
		t.Fatalf("read archive: %v, header %+v, %d events", err, h, ml.Len())
	}
	arep, err := replay.VerifySource(ctx, replay.Once(mustEvents(t, ml)), &replay.VerifyOptions{AllowGaps: true})
	if err != nil || !arep.OK() || arep.Tasks != m.Tasks {
		t.Fatalf("verify the archive as a log: %v %+v", err, arep)
	}

	// Nothing more to do; a restart with the persisted projections is
	// consistent, and so is a rebuild from zero.
	if res, err := Run(ctx, l, testOpts(fs)); err != nil || res.Manifest != nil {
		t.Fatalf("second run: %+v, %v", res, err)
	}
	persist(t, l)
	verifyAll(t, l, fs)
	l.Close()
	l, err = eventlog.Open("db", &eventlog.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	verifyAll(t, l, fs)
	if head2 := l.Head(); head2 != head+1 {
		t.Fatalf("head after restart %d, want %d", head2, head+1)
	}
}

func mustEvents(t testing.TB, ml *replay.MemLog) replay.Iterator {
	return ml.Events(context.Background(), 1)
}

// TestRunKeepsWhatLiveTasksPointAt: a finished task that a task still in
// the log points at (its causation) stays, and so does one a live task
// reaches through a memory event.
func TestRunKeepsWhatLiveTasksPointAt(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	l := newLog(t, fs, 11, 40)
	defer l.Close()
	states := taskStates(t, l)
	var done, live []fsm.Task
	for _, tk := range states {
		if tk.IsTerminal() {
			done = append(done, tk)
		} else {
			live = append(live, tk)
		}
	}
	if len(done) < 2 || len(live) == 0 {
		t.Fatalf("generated %d finished and %d live tasks", len(done), len(live))
	}
	// A raw event in a live task's stream caused by done[0]'s last event
	// (the fold refuses nothing: retention reads causation, not bodies).
	direct := lastEvent(t, l, done[0].ID)
	mem, err := l.Append(ctx, "$memory", eventlog.Any, eventlog.Event{Type: "NOTE", Causation: lastEvent(t, l, done[1].ID)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []ulid.ULID{direct, mem.Events[0].ID} {
		if _, err := l.Append(ctx, "pin-"+c.String(), eventlog.Any, eventlog.Event{Type: "POINTER", Causation: c}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Run(ctx, l, testOpts(fs))
	if err != nil {
		t.Fatal(err)
	}
	if res.Pinned < 2 {
		t.Fatalf("pinned %d, want at least 2", res.Pinned)
	}
	for _, tk := range done[:2] {
		if v, err := l.StreamVersion(tk.ID); err != nil || v == 0 {
			t.Fatalf("pinned task %s removed (%d, %v)", tk.ID, v, err)
		}
	}
}

func lastEvent(t testing.TB, l *eventlog.Log, stream string) ulid.ULID {
	t.Helper()
	evs, err := readStream(l, stream)
	if err != nil || len(evs) == 0 {
		t.Fatalf("read %s: %v", stream, err)
	}
	return evs[len(evs)-1].ID
}

func TestRunBounded(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	l := newLog(t, fs, 3, 60)
	defer l.Close()
	o := testOpts(fs)
	o.MaxEvents = 50
	runs := 0
	for {
		res, err := Run(ctx, l, o)
		if err != nil {
			t.Fatal(err)
		}
		if res.Manifest == nil {
			break
		}
		runs++
		if res.Manifest.Events > 50 && res.Manifest.Tasks > 1 {
			t.Fatalf("run %d removed %d events of %d tasks, more than MaxEvents", runs, res.Manifest.Events, res.Manifest.Tasks)
		}
	}
	if runs < 2 {
		t.Fatalf("%d runs", runs)
	}
	_, ar := verifyAll(t, l, fs)
	if ar.Manifests != runs {
		t.Fatalf("%d manifests after %d runs", ar.Manifests, runs)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []*Options{{ArchiveDir: "a"}, {Window: time.Hour}} {
		if err := o.EnsureDefaults().Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// TestRunCrash simulates power loss after each step of a run (archive
// written, removal committed, ranges compacted) and at a random moment
// during it: the recovered directory is the old state (plus at most an
// orphan archive) or the new one, verify is clean, and the next run
// completes the work.
func TestRunCrash(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (reproduce with -retention.crash.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	iters := *crashIters
	if testing.Short() {
		iters = min(iters, 4)
	}
	ctx := context.Background()
	for iter := range iters {
		fs := vfs.NewCrashableMem()
		l := newLog(t, fs, rng.Uint64(), 30)
		head := l.Head()
		at := Step(iter%3 + 1)
		var clone *vfs.MemFS
		o := testOpts(fs)
		o.crashAt = func(s Step) {
			if s == at {
				clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rng})
			}
		}
		res, err := Run(ctx, l, o)
		if err != nil || res.Manifest == nil || clone == nil {
			t.Fatalf("iteration %d: run %+v, %v", iter, res, err)
		}
		l.Close()

		l, err = eventlog.Open("db", &eventlog.Options{FS: clone})
		if err != nil {
			t.Fatalf("iteration %d (crash after step %d): open: %v", iter, at, err)
		}
		_, ar := verifyAll(t, l, clone)
		retired := l.Head() > head
		switch {
		case at == StepArchived && (retired || len(ar.Orphans) != 1):
			t.Fatalf("iteration %d: crash before the removal: head %d (was %d), orphans %v", iter, l.Head(), head, ar.Orphans)
		case at > StepArchived && (!retired || ar.Manifests != 1 || len(ar.Orphans) != 0):
			t.Fatalf("iteration %d: crash after the removal: head %d (was %d), %+v", iter, l.Head(), head, ar)
		}
		// The daemon restarts (its projections recover) and runs again.
		persist(t, l)
		o2 := testOpts(clone)
		res2, err := Run(ctx, l, o2)
		if err != nil {
			t.Fatalf("iteration %d: run after the crash: %v", iter, err)
		}
		if at == StepArchived && (res2.Orphans != 1 || res2.Manifest == nil) {
			t.Fatalf("iteration %d: run after a crash before removal: %+v", iter, res2)
		}
		_, ar = verifyAll(t, l, clone)
		if len(ar.Orphans) != 0 || ar.Manifests != 1 {
			t.Fatalf("iteration %d: after the next run: %+v", iter, ar)
		}
		l.Close()
	}
}

// TestRunDispatchTasks: broker tasks follow the machine's rule: a
// completed or dead-lettered dispatch task is archived, one that timed out
// and may still be retried stays.
func TestRunDispatchTasks(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	l := newLog(t, fs, 13, 5)
	defer l.Close()
	at := start.Add(time.Hour)
	n := 0
	task := func(bodies ...fsm.Body) string {
		var id ulid.ULID
		var evs []eventlog.Event
		for _, b := range bodies {
			n++
			at = at.Add(10 * time.Minute) // past the deadline, for DISPATCH_TIMED_OUT
			data, err := fsm.Encode(b)
			if err != nil {
				t.Fatal(err)
			}
			ev := eventlog.Event{ID: ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()), Type: string(b.EventType()),
				Time: at, Schema: fsm.SchemaVersion, Body: data}
			if len(evs) == 0 {
				id = ev.ID
			} else {
				ev.Causation = evs[len(evs)-1].ID
			}
			evs = append(evs, ev)
		}
		if _, err := l.Append(ctx, id.String(), eventlog.NoStream, evs...); err != nil {
			t.Fatal(err)
		}
		return id.String()
	}
	created := &fsm.DispatchCreatedBody{AgentID: "op", Title: "t", Owner: "op", TimeoutSeconds: 300, MaxRetries: 3, RetryEligible: true}
	assigned := &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "w1"}
	report := func(k fsm.EventType) *fsm.DispatchReportBody {
		return &fsm.DispatchReportBody{Kind: k, AgentID: "w1", Result: "{}"}
	}
	done := task(created, assigned, report(fsm.DispatchStarted), report(fsm.DispatchCompleted))
	noRetry := *created
	noRetry.MaxRetries = 0
	dead := task(&noRetry, assigned, &fsm.DispatchTimedOutBody{AgentID: "$broker"},
		&fsm.DispatchDeadLetteredBody{AgentID: "$broker", Reason: fsm.DeadLetterExhausted})
	retry := task(created, assigned, &fsm.DispatchTimedOutBody{AgentID: "$broker"})
	persist(t, l)
	states := taskStates(t, l)
	if !states[done].IsTerminal() || !states[dead].IsTerminal() || states[retry].IsTerminal() {
		t.Fatalf("fixture: %s %s %s", states[done].State, states[dead].State, states[retry].State)
	}
	if _, err := Run(ctx, l, testOpts(fs)); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{done: false, dead: false, retry: true} {
		if v, _ := l.StreamVersion(id); (v > 0) != want {
			t.Errorf("dispatch task %s in %s: in the log %v, want %v", id, states[id].State, v > 0, want)
		}
	}
	verifyAll(t, l, fs)
}

// TestVerifyManifestMismatch: a removal whose manifest does not list the
// holes it made is a problem of the log, as is a hole without a manifest
// (eventlog/retire_test.go).
func TestVerifyManifestMismatch(t *testing.T) {
	ctx := context.Background()
	l := newLog(t, vfs.NewMem(), 17, 20)
	defer l.Close()
	p, err := plan(ctx, l, start.AddDate(1, 0, 0), 1000)
	if err != nil || len(p.events) == 0 {
		t.Fatalf("plan: %d events, %v", len(p.events), err)
	}
	m := &replay.ArchiveManifest{File: "x", Tasks: len(p.streams), Events: len(p.events),
		Ranges: []replay.SeqRange{{First: 1, Last: uint64(len(p.events))}}}
	ev, err := replay.ManifestEvent(m)
	if err != nil {
		t.Fatal(err)
	}
	rt := p.retirement(ev)
	res, err := l.Retire(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Verify(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ProblemCount != 1 || rep.FirstProblem.Kind != replay.ProblemLog || rep.FirstProblem.Seq != res.FirstSeq {
		t.Fatalf("verify of a manifest that lists other ranges: %s", rep.Summary())
	}
}

// TestRebuildAfterRetention: projections rebuilt from zero (another
// projection identity) fold the live log only and agree with verify.
func TestRebuildAfterRetention(t *testing.T) {
	ctx := context.Background()
	l := retainedLog(t, 19, 40)
	o := &replay.Options{Stats: projection.StatsOptions{Window: 61}}
	v, rec, err := replay.Open(ctx, l, o)
	if err != nil || !rec.Rebuilt {
		t.Fatalf("open with another identity: %+v %v", rec, err)
	}
	if err := v.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Verify(ctx, l, &replay.VerifyOptions{Options: o})
	if err != nil || !rep.OK() || rep.Checkpoint == 0 {
		t.Fatalf("verify after a rebuild: %v %s (%s)", err, rep.Summary(), rep.ProjectionsNote)
	}
}

// TestExportAfterRetention: an export of a log with holes says it is not
// complete, so that a fold of it accepts the holes.
func TestExportAfterRetention(t *testing.T) {
	ctx := context.Background()
	l := retainedLog(t, 23, 20)
	var buf bytes.Buffer
	n, err := replay.Export(ctx, replay.FromLog(l), &buf, replay.ExportFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ml, h, err := replay.ReadExport(&buf)
	if err != nil || h.Complete || ml.Len() != n || uint64(n) >= l.Head() {
		t.Fatalf("export: %d events, header %+v, %v", n, h, err)
	}
}

// retainedLog is a generated log retention ran on once; closed at the
// test's end.
func retainedLog(t *testing.T, seed uint64, tasks int) *eventlog.Log {
	t.Helper()
	fs := vfs.NewMem()
	l := newLog(t, fs, seed, tasks)
	t.Cleanup(func() { l.Close() })
	if res, err := Run(context.Background(), l, testOpts(fs)); err != nil || res.Manifest == nil {
		t.Fatalf("run: %+v %v", res, err)
	}
	return l
}
