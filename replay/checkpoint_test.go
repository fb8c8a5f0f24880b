package replay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// holdFS holds every write that carries a marker, once armed, until
// released: it stands for a disk slow to take a checkpoint's data.
type holdFS struct {
	vfs.FS
	marker  []byte
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed at the first write held
	heldOne sync.Once
	release chan struct{}
}

func (fs *holdFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &holdFile{File: f, fs: fs}, nil
}

func (fs *holdFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs *holdFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (fs *holdFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, opts...))
}

// holdFile checks each write, with the end of the previous one, for the
// marker.
type holdFile struct {
	vfs.File
	fs   *holdFS
	tail []byte
}

func (f *holdFile) check(p []byte) {
	seen := append(f.tail, p...)
	f.tail = append(f.tail[:0], seen[max(0, len(seen)-len(f.fs.marker)):]...)
	f.fs.mu.Lock()
	hold := f.fs.armed && bytes.Contains(seen, f.fs.marker)
	f.fs.mu.Unlock()
	if hold {
		f.fs.heldOne.Do(func() { close(f.fs.held) })
		<-f.fs.release
	}
}

func (f *holdFile) Write(p []byte) (int, error) {
	f.check(p)
	return f.File.Write(p)
}

func (f *holdFile) WriteAt(p []byte, off int64) (int, error) {
	f.check(p)
	return f.File.WriteAt(p, off)
}

// literalMarker returns 32 random characters of Unicode's private use
// area (U+E000 to U+F8FF, 3 bytes each in UTF-8) in which no 4 bytes
// repeat. The sstable's block compression (snappy) writes a run of 4
// bytes or more that occurred earlier in the block as a copy of it, so a
// marker of hex digits, which the block's other records or the marker
// itself could hold, was at times not written whole and never seen (one
// run in thirty); nothing else the checkpoint writes holds these bytes.
func literalMarker(t *testing.T) []byte {
	rnd := make([]byte, 64)
	for {
		if _, err := rand.Read(rnd); err != nil {
			t.Fatal(err)
		}
		var m []byte
		for i := 0; i < len(rnd); i += 2 {
			m = utf8.AppendRune(m, 0xe000+rune(binary.BigEndian.Uint16(rnd[i:]))%0x1900)
		}
		seen := map[string]bool{}
		repeats := false
		for i := 0; i+4 <= len(m) && !repeats; i++ {
			repeats = seen[string(m[i:i+4])]
			seen[string(m[i:i+4])] = true
		}
		if !repeats {
			return m
		}
	}
}

// TestAppendWhileCheckpointWriteHeld checks that a large checkpoint does
// not hold up appends: while the disk holds the write that carries the
// checkpoint's data (a task's 128 KiB input metadata, which its record
// copies; a large input text it would not, see
// TestCheckpointLeavesTheInputInTheLog), a new event is appended, synced
// and folded. When a checkpoint was one batch in
// the write-ahead log the append waited behind it. The checkpoint then
// completes, and a reopen loads it.
func TestAppendWhileCheckpointWriteHeld(t *testing.T) {
	ctx := context.Background()
	fs := &holdFS{FS: vfs.NewMem(), marker: literalMarker(t),
		held: make(chan struct{}), release: make(chan struct{})}
	released := sync.OnceFunc(func() { close(fs.release) })
	l := openLog(t, fs, "db", false)
	defer l.Close()
	v, _, err := Open(ctx, l, &Options{CheckpointEvery: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- v.Follow(fctx, l, nil) }()
	defer func() {
		stopFollow()
		<-followed
	}()
	defer released() // first: a failed test releases what it holds
	submit := func(text string, meta map[string]string) uint64 {
		t.Helper()
		body, err := fsm.Encode(&fsm.Input{Kind: fsm.MessageReceived, Text: text, Source: "test", TaskType: "general", Metadata: meta})
		if err != nil {
			t.Fatal(err)
		}
		id := l.NewID()
		res, err := l.Append(ctx, id.String(), eventlog.NoStream, eventlog.Event{
			ID: id, Type: string(fsm.MessageReceived), Correlation: id, Schema: fsm.SchemaVersion, Body: body,
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.LastSeq
	}
	large := string(fs.marker) + strings.Repeat(" a large value", (128<<10)/14)
	seq := submit("a task with large metadata", map[string]string{"blob": large})
	if err := v.WaitFor(ctx, seq); err != nil {
		t.Fatal(err)
	}

	fs.mu.Lock()
	fs.armed = true // from here on the task's metadata is written only by the checkpoint
	fs.mu.Unlock()
	checkpointed := make(chan error, 1)
	go func() { checkpointed <- v.Checkpoint(ctx) }()
	select {
	case <-fs.held:
	case err := <-checkpointed:
		t.Fatalf("the checkpoint ended (%v) without writing the task", err)
	}
	appended := make(chan uint64, 1)
	go func() {
		s := submit("what time is it?", nil)
		if err := v.WaitFor(ctx, s); err != nil {
			t.Error(err)
		}
		appended <- s
	}()
	var next uint64
	select {
	case next = <-appended:
	case <-time.After(30 * time.Second): // a bound for the failure only
		t.Fatal("an append waited for the checkpoint's held write")
	}
	released()
	if err := <-checkpointed; err != nil {
		t.Fatal(err)
	}
	if err := v.WaitFor(ctx, next); err != nil {
		t.Fatal(err)
	}
	stopFollow()
	<-followed
	followed <- nil // for the deferred stop
	_, rec, err := Open(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Checkpoint < seq || rec.Rebuilt {
		t.Fatalf("reopened from checkpoint %d (rebuilt %v), want at least seq %d", rec.Checkpoint, rec.Rebuilt, seq)
	}
}

// TestCheckpointLeavesTheInputInTheLog: a task's large input is persisted
// in the event that created it only; the task record refers to that event
// (projection.EncodeStoredTask), the summary keeps its first bytes, and
// the progress, whose description is the input, leaves it out. Reading the
// task back from the store, or reopening from the checkpoint, gives the
// task the fold has, input included.
func TestCheckpointLeavesTheInputInTheLog(t *testing.T) {
	ctx := context.Background()
	input := "marker-7f3a " + strings.Repeat("a large input ", (128<<10)/14)
	l, v, id, seq := checkpointedInput(t, input)
	var copies []string // of the whole input; the summary holds its first bytes
	size := 0
	it := l.ScanAux(keyPrefix)
	for it.Next() {
		size += len(it.Key()) + len(it.Value())
		if n := bytes.Count(it.Value(), []byte(input[len(input)-1000:])); n > 0 {
			copies = append(copies, fmt.Sprintf("%s x%d", it.Key(), n))
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	it.Close()
	if len(copies) != 0 || size > 4<<10 {
		t.Fatalf("the checkpoint holds %d bytes, the input in %v; want it in the log only", size, copies)
	}
	st := &store{log: l}
	got, err := st.loadStored(id, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.task.Context.InputText != input || got.inputSeq != seq {
		t.Fatalf("task read back with %d bytes of input from seq %d, want %d from %d", len(got.task.Context.InputText), got.inputSeq, len(input), seq)
	}
	if got.progress == nil || got.progress.Description != input {
		t.Fatal("progress read back without its description")
	}
	want, _ := v.Task(id)
	if a, b := mustEncodeTask(t, want), mustEncodeTask(t, got.task); !bytes.Equal(a, b) {
		t.Fatal("the task read back differs from the task in memory")
	}
	// A view that loads the task from the store serves the same.
	v2, rec, err := Open(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Rebuilt {
		t.Fatal("reopened by a rebuild, not from the checkpoint")
	}
	p, err := v2.Progress(id)
	if err != nil || p.Description != input {
		t.Fatalf("reopened view's progress: %d bytes of description, %v", len(p.Description), err)
	}
	sameState(t, "reopened", dump(t, v), dump(t, v2))
}

// TestStoredTaskWithoutItsInputEvent: a task record whose input event the
// log no longer holds (here its stream retired without forgetting the
// record, which retention never does) is an error that says so, never a
// task with an empty input; at open, the projections are rebuilt.
func TestStoredTaskWithoutItsInputEvent(t *testing.T) {
	ctx := context.Background()
	l, _, id, seq := checkpointedInput(t, strings.Repeat("a large input ", 200))
	evID, _ := ulid.Parse(id)
	if _, err := l.Retire(ctx, eventlog.Retirement{
		Streams:  []eventlog.RetiredStream{{Stream: id, Version: 1}},
		Events:   []eventlog.RetiredEvent{{Seq: seq, ID: evID}},
		Manifest: eventlog.Event{ID: l.NewID(), Type: eventlog.TypeEventsArchived, Body: []byte{0x80}},
	}); err != nil {
		t.Fatal(err)
	}
	st := &store{log: l}
	if _, _, err := st.loadTask(id, false); !errors.Is(err, ErrInputGone) {
		t.Fatalf("loading the task: %v, want ErrInputGone", err)
	}
	_, rec, err := Open(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Rebuilt || !strings.Contains(rec.Reason, "input") {
		t.Fatalf("open: %+v, want a rebuild for the missing input", rec)
	}
}

// checkpointedInput opens a log (closed when the test ends) and a View
// on it, appends a MESSAGE_RECEIVED that creates a task with text as its
// input, folds it and checkpoints. It returns the task id and the event's
// sequence.
func checkpointedInput(t *testing.T, text string) (*eventlog.Log, *View, string, uint64) {
	t.Helper()
	ctx := context.Background()
	l := openLog(t, vfs.NewMem(), "db", false)
	t.Cleanup(func() { l.Close() })
	v, _, err := Open(ctx, l, &Options{CheckpointEvery: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	id, seq := appendInput(t, l, text)
	if _, err := Fold(ctx, v, FromLog(l), FoldOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := v.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	return l, v, id, seq
}

// appendInput appends a MESSAGE_RECEIVED that creates a task with text as
// its input, and returns the task id and the event's sequence.
func appendInput(t *testing.T, l *eventlog.Log, text string) (string, uint64) {
	t.Helper()
	body, err := fsm.Encode(&fsm.Input{Kind: fsm.MessageReceived, Text: text, Source: "test", TaskType: "general"})
	if err != nil {
		t.Fatal(err)
	}
	id := l.NewID()
	res, err := l.Append(context.Background(), id.String(), eventlog.NoStream, eventlog.Event{
		ID: id, Type: string(fsm.MessageReceived), Correlation: id, Schema: fsm.SchemaVersion, Body: body,
	})
	if err != nil {
		t.Fatal(err)
	}
	return id.String(), res.LastSeq
}

func mustEncodeTask(t *testing.T, task fsm.Task) []byte {
	t.Helper()
	b, err := fsm.EncodeTask(task)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckpointWritesInKeyOrder: inKeyOrder puts a checkpoint's writes,
// as store.write makes them (task by task, the key ranges interleaved,
// the queue index and the rest in no order), in the order a full sort
// gives.
func TestCheckpointWritesInKeyOrder(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(3, 4))
	for round := range 50 {
		n := rng.IntN(300)
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("01K%020d", rng.Int64N(1e18))
		}
		slices.Sort(ids)
		var keys [][]byte
		for _, id := range ids {
			keys = append(keys, taskKey(prefTask, id), taskKey(prefSum, id),
				append([]byte(prefQueue), byte(rng.IntN(256)), byte(rng.IntN(256))), taskKey(prefActive, id))
			if rng.IntN(2) == 0 {
				keys = append(keys, taskKey(prefProg, id))
			}
		}
		for range rng.IntN(5) {
			keys = append(keys, snapKey(fmt.Sprintf("01KSNAP%d", rng.IntN(9)), rng.Uint64()), episodeKey(rng.Uint64()), taskKey(prefFact, fmt.Sprint(rng.IntN(1e6))))
		}
		keys = append(keys, keyStats, keyMeta, []byte("p"), []byte("proj"))
		got := inKeyOrder(nil, slices.Clone(keys), func(k []byte) []byte { return k })
		want := slices.Clone(keys)
		slices.SortFunc(want, bytes.Compare)
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("round %d: %d keys not in key order:\n%q\nwant\n%q", round, len(keys), got, want)
		}
	}
}

// TestCheckpointStoresEachRecordsEncoding: a checkpoint written as a
// batch or ingested stores, for each changed task, exactly the bytes of
// its encoders (record, summary, progress), its queue key, its active
// marker while it is not finished and none once it is, and nothing else;
// also when its store encodes into the buffers of an earlier checkpoint.
func TestCheckpointStoresEachRecordsEncoding(t *testing.T) {
	seed := testSeed(t)
	pending := func(seed uint64) projection.Pending {
		return pendingOf(t, replaytest.Generate(seed, replaytest.Config{Tasks: 300, Concurrency: 40, InputSize: 700}))
	}
	p, earlier := pending(seed), pending(seed+1)
	for _, ingest := range []int{1, 1 << 30} {
		// The earlier checkpoint in a log of its own: its buffers only
		// are left for the one checked.
		l0, _ := logWith(t, nil)
		st := &store{log: l0, ingest: ingest}
		if err := st.write(context.Background(), &earlier, "test"); err != nil {
			t.Fatal(err)
		}
		l0.Close()
		if len(st.spare.chunks) == 0 || cap(st.spare.ops) == 0 || cap(st.spare.out) == 0 {
			t.Fatalf("ingest %d: the store kept %d chunks, ops for %d and %d writes", ingest, len(st.spare.chunks), cap(st.spare.ops), cap(st.spare.out))
		}
		l, _ := logWith(t, nil)
		st.log = l
		if err := st.write(context.Background(), &p, "test"); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{string(keyMeta): "", string(keyStats): string(p.Stats)}
		terminal := 0
		for i := range p.Tasks {
			r := &p.Tasks[i]
			id := r.Task.ID
			tb, _ := projection.EncodeStoredTask(&r.Task, r.InputSeq)
			sb, _ := r.Summary.Encode()
			want[string(taskKey(prefTask, id))] = string(tb)
			want[string(taskKey(prefSum, id))] = string(sb)
			want[prefQueue+string(r.Summary.QueueKey())] = ""
			if r.Progress != nil {
				pb, _ := r.Progress.EncodeStored(&r.Task)
				want[string(taskKey(prefProg, id))] = string(pb)
			}
			if r.Task.IsTerminal() {
				terminal++
			} else {
				want[string(taskKey(prefActive, id))] = ""
			}
		}
		for i := range p.Facts {
			want[string(taskKey(prefFact, p.Facts[i].Path))] = "?"
		}
		for i := range p.Episodes {
			want[string(episodeKey(p.Episodes[i].Seq))] = "?"
		}
		if terminal == 0 || terminal == len(p.Tasks) {
			t.Fatalf("%d tasks, %d finished: the test needs both kinds", len(p.Tasks), terminal)
		}
		it := l.ScanAux(keyPrefix)
		n := 0
		for it.Next() {
			k, v := string(it.Key()), string(it.Value())
			w, ok := want[k]
			switch {
			case !ok:
				t.Fatalf("ingest %d: unexpected key %q", ingest, k)
			case k != string(keyMeta) && w != "?" && v != w:
				t.Fatalf("ingest %d: %q holds %x, want %x", ingest, k, v, w)
			}
			n++
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		it.Close()
		if n != len(want) {
			t.Fatalf("ingest %d: %d keys stored, want %d", ingest, n, len(want))
		}
		l.Close()
	}
}

// pendingOf folds evs into a Set and returns what a checkpoint of it
// would write.
func pendingOf(tb testing.TB, evs []eventlog.Event) projection.Pending {
	tb.Helper()
	set := projection.NewSet(projection.Options{})
	for _, raw := range evs {
		ev, err := Decode(raw)
		if err != nil {
			tb.Fatal(err)
		}
		set.Apply(ev)
	}
	p, err := set.Pending()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// TestDefaultIntervalBoundsTheRefold checks what Options.CheckpointEvery
// documents at the defaults: a live View folding the agent's kind of
// history (tasks of ten events or so, 128 at a time) has started a
// checkpoint before it is more than the interval ahead of the last one,
// so a restart refolds at most that tail.
func TestDefaultIntervalBoundsTheRefold(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("folds about 45,000 events (25 s with the race detector)")
	}
	o := (&Options{}).EnsureDefaults()
	evs := replaytest.Generate(1, replaytest.Config{Tasks: 4500, Concurrency: 128, Finish: true})
	if len(evs) <= o.CheckpointEvery {
		t.Fatalf("%d events generated; the test needs more than %d", len(evs), o.CheckpointEvery)
	}
	ctx := context.Background()
	l, err := eventlog.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	v, _, err := Open(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- v.Follow(fctx, l, nil) }()
	if err := replaytest.AppendAll(ctx, l, evs, 1000); err != nil {
		t.Fatal(err)
	}
	if err := v.WaitFor(ctx, l.Head()); err != nil {
		t.Fatal(err)
	}
	stopFollow()
	if err := <-followed; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// Wait for the checkpoint the fold started, if one is running.
	v.ckSem <- struct{}{}
	<-v.ckSem
	v.mu.RLock()
	persisted, since, head := v.persisted, v.since, v.set.Seq()
	v.mu.RUnlock()
	if persisted == 0 {
		t.Fatalf("no checkpoint in %d events", len(evs))
	}
	if tail := head - persisted; tail > uint64(o.CheckpointEvery) || since > o.CheckpointEvery {
		t.Fatalf("a restart would refold %d events (%d since the last checkpoint began); the interval is %d", tail, since, o.CheckpointEvery)
	}
}

// TestCheckpointBuffersKeptUpToTheBudget checks that a store keeps what
// a checkpoint encoded into for the next one up to store.keep (a
// sixteenth of the View's budget), not only the 2 MiB of keepChunks: a
// checkpoint of the default interval is larger than that, and its
// chunks were allocated anew each time.
func TestCheckpointBuffersKeptUpToTheBudget(t *testing.T) {
	evs := replaytest.Generate(1, replaytest.Config{Tasks: 1200, Concurrency: 64, Finish: true, InputSize: 512})
	p := pendingOf(t, evs)
	ctx := context.Background()
	for _, c := range []struct {
		keep     int64
		min, max int
	}{
		{0, keepChunks, keepChunks},
		{DefaultMemoryBudget / 16, keepChunks + 1, int(DefaultMemoryBudget / 16 / arenaChunk)},
		{MinMemoryBudget / 16, keepChunks, keepChunks},
	} {
		l, err := eventlog.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		st := &store{log: l, keep: c.keep}
		if err := st.write(ctx, &p, "test"); err != nil {
			t.Fatal(err)
		}
		kept := len(st.spare.chunks)
		for _, ch := range st.spare.chunks {
			if cap(ch) != arenaChunk {
				t.Errorf("keep %d: a chunk of %d bytes kept", c.keep, cap(ch))
			}
		}
		if kept < c.min || kept > c.max {
			t.Errorf("keep %d: %d chunks kept after a checkpoint of %d bytes, want %d to %d",
				c.keep, kept, st.written.Load(), c.min, c.max)
		}
		l.Close()
	}
}
