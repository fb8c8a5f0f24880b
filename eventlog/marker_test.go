package eventlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/oklog/ulid/v2"
)

// The tests in this file are about the newest WAL that the head marker
// names (marker.wal, recorded by walCreated): a WAL deleted after a crash is
// refused even when it was created after the marker's head was last
// refreshed, and none of the ways Pebble legitimately removes WALs
// (flushes, recycling, the flush of a writable open) is ever taken for one.

// markerV1 is a clean version 1 marker, as the previous build wrote it.
func markerV1(head, reserved uint64) []byte {
	b := []byte("PGHD\x01\x01")
	b = binary.BigEndian.AppendUint64(b, head)
	b = binary.BigEndian.AppendUint64(b, reserved)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func TestMarkerEncoding(t *testing.T) {
	m := marker{head: 7, reserved: 1031, wal: 12, clean: true}
	b := m.encode()
	if len(b) != markerLen || b[4] != 2 {
		t.Fatalf("encoded %d bytes, version %d", len(b), b[4])
	}
	if got, err := decodeMarker(b); err != nil || got != m {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", m, got, err)
	}
	// Version 1, as the previous build wrote it: no WAL, which is never
	// taken for a missing one.
	if got, err := decodeMarker(markerV1(7, 1031)); err != nil || got != (marker{head: 7, reserved: 1031, clean: true}) {
		t.Fatalf("decode(v1) = %+v, %v", got, err)
	}
	bad := bytes.Clone(b)
	bad[4] = 1 // a version 1 header on a version 2 body
	binary.BigEndian.PutUint32(bad[markerLen-4:], crc32.Checksum(bad[:markerLen-4], castagnoli))
	if _, err := decodeMarker(bad); err == nil {
		t.Fatal("decoded a version 1 marker of version 2's length")
	}
	bad[4] = 3
	binary.BigEndian.PutUint32(bad[markerLen-4:], crc32.Checksum(bad[:markerLen-4], castagnoli))
	if _, err := decodeMarker(bad); err == nil || !strings.Contains(err.Error(), "unknown version 3") {
		t.Fatalf("decode(version 3): %v", err)
	}
}

// TestMarkerVersion1Directory opens a directory whose marker the previous
// build wrote (version 1): it opens, and from then on the marker names the
// newest WAL.
func TestMarkerVersion1Directory(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(fs))
	appendN(t, l, "s", "E", 5)
	closeLog(t, l)
	if err := writeFileSynced(fs, "db/"+MarkerFile, markerV1(5, 5+reserveStep)); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, "db", testOptions(fs))
	if l.Head() != 5 {
		t.Fatalf("head %d", l.Head())
	}
	closeLog(t, l)
	m, _, err := readMarker(fs, "db")
	if err != nil || m.wal == 0 || m.head != 5 || m.reserved != 5+reserveStep {
		t.Fatalf("marker after opening a version 1 directory: %+v %v", m, err)
	}
	if newestWAL(fs, "db") != fmt.Sprintf("%06d.log", m.wal) {
		t.Fatalf("marker names WAL %d, newest is %s", m.wal, newestWAL(fs, "db"))
	}
}

// walCounter records the WALs a log creates.
type walCounter struct {
	mu               sync.Mutex
	created, recycle int
	last             uint64
}

func (c *walCounter) hook(info pebble.WALCreateInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.created++
	if info.RecycledFileNum != 0 {
		c.recycle++
	}
	c.last = uint64(info.FileNum)
}

// TestDeletedNewWALAfterCrash is the case the head marker's head alone
// cannot see: a WAL created after the marker's head was last refreshed
// (here by a flush), filled with acknowledged events, then power lost, then
// the WAL deleted. The recovered head equals the marker's head, which the
// previous build took for a clean history; now Open refuses naming the WAL,
// verify reports it, and AcceptDataLoss recovers without reusing a
// sequence.
func TestDeletedNewWALAfterCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	l := mustOpen(t, "db", testOptions(fs))
	l.markEvery = time.Hour // no refresh: only the rotation records the head
	var walc walCounter
	l.testHookWAL = walc.hook
	var acked []Event
	for i := range 10 {
		acked = append(acked, mustAppend(t, l, "s", Any, ev("OLD", fmt.Sprint(i))).Events...)
	}
	if err := l.db.Flush(); err != nil { // rotates the WAL
		t.Fatal(err)
	}
	for i := range 5 {
		acked = append(acked, mustAppend(t, l, "s", Any, ev("NEW", fmt.Sprint(i))).Events...)
	}
	walc.mu.Lock()
	newWAL := fmt.Sprintf("%06d.log", walc.last)
	walc.mu.Unlock()
	m, _ := l.marked()
	if m.head != 10 || m.wal == 0 || fmt.Sprintf("%06d.log", m.wal) != newWAL {
		t.Fatalf("marker %+v after the rotation, want head 10 and WAL %s", m, newWAL)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	closeLog(t, l)

	// Intact, the crash image opens with every acknowledged event.
	intact := crashed.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	il := mustOpen(t, "db", testOptions(intact))
	wantIntact(t, il, acked)
	closeLog(t, il)

	if err := crashed.Remove("db/" + newWAL); err != nil {
		t.Fatal(err)
	}
	_, err := Open("db", testOptions(crashed))
	var dl *DataLossError
	if !errors.As(err, &dl) || !errors.Is(err, ErrDataLoss) || dl.File != newWAL || dl.Head != 10 ||
		!strings.Contains(err.Error(), newWAL) {
		t.Fatalf("Open after a crash and a deleted new WAL: %v", err)
	}
	t.Logf("refused: %v", err)
	wantRefusal(t, err, newWAL, false)

	// verify (read-only) reports the same.
	ro := testOptions(crashed)
	ro.ReadOnly = true
	rl := mustOpen(t, "db", ro)
	rep, verr := rl.Verify(context.Background())
	if !IsCorruption(verr) || rep.OK() || rep.Problems[0].File != newWAL || rep.Problems[0].Seq != 11 {
		t.Fatalf("read-only Verify: %v %+v", verr, rep.Problems)
	}
	closeLog(t, rl)

	// Nothing was modified by the refusals: still refused.
	if _, err := Open("db", testOptions(crashed)); !errors.Is(err, ErrDataLoss) {
		t.Fatalf("second Open: %v", err)
	}
	wantAccepted(t, crashed, acked)
}

// TestMarkerWALNeverFalseAlarm runs the legitimate ways WALs come and go
// (rotations of small memtables, WAL recycling, explicit flushes, clean
// reopens, crashes) and takes a power-loss image at every WAL creation and
// after every append: each image opens without a refusal and holds every
// event acknowledged when it was taken.
func TestMarkerWALNeverFalseAlarm(t *testing.T) {
	rng, _, gens := crashParams(t, 7, 3, 2)
	fs := vfs.NewCrashableMem()
	var walc walCounter
	var mu sync.Mutex
	var acked []Event // across generations
	type image struct {
		fs    *vfs.MemFS
		acked int
		what  string
	}
	var images []image
	snapshot := func(what string, pct int) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		images = append(images, image{fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(rng.Uint64(), 0))}), n, what})
	}
	body := bytes.Repeat([]byte("w"), 24<<10)
	for gen := range gens {
		o := testOptions(fs)
		o.MemTableSize = 1 << 20
		l := mustOpen(t, "db", o)
		l.markEvery = time.Hour
		l.testHookWAL = func(info pebble.WALCreateInfo) {
			walc.hook(info)
			snapshot(fmt.Sprintf("gen %d at WAL %s", gen, info.FileNum), rng.IntN(101))
		}
		for i := range 100 {
			res := mustAppend(t, l, fmt.Sprintf("s%d", i%7), Any, Event{Type: "E", Body: body[:rng.IntN(len(body))]})
			mu.Lock()
			acked = append(acked, res.Events...)
			mu.Unlock()
			if i%50 == 49 {
				if err := l.db.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			if i%40 == 0 {
				snapshot(fmt.Sprintf("gen %d after append %d", gen, i), 0)
			}
		}
		if gen%2 == 0 {
			closeLog(t, l)
		} else {
			// A crash instead of a clean close: the next generation
			// recovers from the crash image.
			img := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			closeLog(t, l)
			fs = img
		}
	}
	walc.mu.Lock()
	created, recycled := walc.created, walc.recycle
	walc.mu.Unlock()
	if created < 2*gens || recycled == 0 {
		t.Fatalf("%d WALs created, %d recycled: the test did not exercise rotation and recycling", created, recycled)
	}
	for _, img := range images {
		o := testOptions(img.fs)
		o.MemTableSize = 1 << 20
		l, err := Open("db", o)
		if err != nil {
			t.Fatalf("%s: %v", img.what, err)
		}
		for _, e := range acked[:img.acked] {
			if got, err := l.Get(e.ID); err != nil || got.Seq != e.Seq {
				t.Fatalf("%s: acknowledged seq %d: %v", img.what, e.Seq, err)
			}
		}
		closeLog(t, l)
		// And again: the recovered log reopens.
		l = mustOpen(t, "db", o)
		closeLog(t, l)
	}
	t.Logf("%d WALs created (%d recycled), %d power-loss images, none refused", created, recycled, len(images))
}

// hookFS calls fn after every successful Remove and Create of a WAL.
type hookFS struct {
	vfs.FS
	fn func(op, name string)
}

func (fs hookFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err == nil && strings.HasSuffix(name, ".log") {
		fs.fn("create", name)
	}
	return f, err
}

func (fs hookFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	if err == nil {
		fs.fn("reuse", newname)
	}
	return f, err
}

func (fs hookFS) Remove(name string) error {
	err := fs.FS.Remove(name)
	if err == nil && strings.HasSuffix(name, ".log") {
		fs.fn("remove", name)
	}
	return err
}

func (fs hookFS) Unwrap() vfs.FS { return fs.FS }

// TestMarkerWALCrashDuringOpen kills the process (and cuts the power) at
// every WAL creation and removal while a log with events in its WAL
// reopens: pebble.Open flushes the replayed WAL and deletes it, possibly
// before it creates the next one. No image is taken for a deleted WAL.
func TestMarkerWALCrashDuringOpen(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var acked []Event
	for round := range 3 {
		l := mustOpen(t, "db", testOptions(mem))
		for i := range 20 {
			acked = append(acked, mustAppend(t, l, "s", Any, ev("E", fmt.Sprint(round, i))).Events...)
		}
		closeLog(t, l)
		var mu sync.Mutex // Pebble removes WALs in a background goroutine
		var images []*vfs.MemFS
		var ops []string
		fs := hookFS{FS: mem, fn: func(op, name string) {
			mu.Lock()
			defer mu.Unlock()
			// A kill -9 keeps everything; a power loss only what was synced.
			killed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
			ops = append(ops, op+" "+name, op+" "+name)
			images = append(images, killed, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}))
			if op == "create" {
				// Pebble creates the new WAL once the replayed ones are
				// flushed, and deletes them in the background: the
				// deletion may come first. Kill the process in between,
				// deterministically: the same image without any WAL.
				between := killed.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
				for _, n := range files(t, between, suffix(".log")) {
					if err := between.Remove("db/" + n); err != nil {
						t.Error(err)
					}
				}
				ops = append(ops, "before "+op+" "+name+", after the old WALs' removal")
				images = append(images, between)
			}
		}}
		l = mustOpen(t, "db", testOptions(fs))
		closeLog(t, l) // waits for Pebble's deletions
		if len(images) == 0 {
			t.Fatal("the reopen neither created nor removed a WAL")
		}
		t.Logf("round %d: WAL operations during open: %v", round, ops)
		for i, img := range images {
			il, err := Open("db", testOptions(img))
			if err != nil {
				t.Fatalf("round %d, image %d (after %q): %v", round, i, ops[i], err)
			}
			wantIntact(t, il, acked)
			closeLog(t, il)
		}
	}
}

// TestMarkerWALWriteFails fails the marker write that records a new WAL:
// the log is poisoned rather than going on with a WAL whose loss would go
// unnoticed, the append whose commit rotated the WAL is not acknowledged,
// and after a restart every acknowledged event is there.
func TestMarkerWALWriteFails(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	efs, inject := switchedFS(mem, errorfs.ErrInjected, func(op errorfs.Op) bool {
		return strings.Contains(op.Path, MarkerFile) && (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpFileWrite)
	})
	o := testOptions(efs)
	o.MemTableSize = 1 << 20
	l := mustOpen(t, "db", o)
	l.markEvery = time.Hour // only the WAL's record writes the marker
	var walc walCounter
	l.testHookWAL = walc.hook
	mustAppend(t, l, "s", Any, ev("FIRST", "")) // reserves the next reserveStep sequences
	inject(true)
	var acked []Event
	body := bytes.Repeat([]byte("x"), 128<<10)
	var failed error
	for range 64 { // 8 MiB: the 1 MiB memtable rotates
		res, err := l.Append(ctx, "s", Any, Event{Type: "BIG", Body: body})
		if err != nil {
			failed = err
			break
		}
		acked = append(acked, res.Events...)
	}
	walc.mu.Lock()
	created := walc.created
	walc.mu.Unlock()
	if !errors.Is(failed, ErrFailed) || !errors.Is(failed, errorfs.ErrInjected) || !strings.Contains(failed.Error(), "new WAL") || created == 0 {
		t.Fatalf("append after the failed WAL record: %v (%d WALs created)", failed, created)
	}
	if h := l.Health(); !errors.Is(h, ErrFailed) {
		t.Fatalf("Health: %v", h)
	}
	if l.Head() != uint64(len(acked))+1 {
		t.Fatalf("head %d, %d acknowledged", l.Head(), len(acked)+1)
	}
	l.Close() // may report the failure
	inject(false)

	l = mustOpen(t, "db", testOptions(mem))
	defer closeLog(t, l)
	got := collect(t, l.Scan(2, Forward)) // after FIRST
	if len(got) < len(acked) || len(got) > len(acked)+1 {
		t.Fatalf("%d events after a restart, %d acknowledged and one unknown", len(got), len(acked))
	}
	for i, e := range acked {
		if got[i].ID != e.ID {
			t.Fatalf("seq %d is %s after a restart, acknowledged %s", e.Seq, got[i].ID, e.ID)
		}
	}
	mustVerify(t, l)
}

// rotationChildEnv makes the test binary the child process of
// TestWALRotationIOErrorEndsProcess.
const rotationChildEnv = "PEGASUS_TEST_ROTATION_CHILD"

// TestWALRotationIOErrorEndsProcess documents what docs/operations.md says
// about an I/O error at the moment Pebble switches to a new WAL: Pebble
// panics in rotateWAL with its mutex released, the Go runtime ends the
// process with a fatal error (no recover can catch it), and the directory
// is then what a kill -9 leaves: every acknowledged event is there. The
// child appends 64 KiB events to a log with 1 MiB memtables on the real
// disk, printing each acknowledgement, until creating the next WAL fails.
// If a Pebble upgrade turns this into an error, this test says so.
func TestWALRotationIOErrorEndsProcess(t *testing.T) {
	if dir := os.Getenv(rotationChildEnv); dir != "" {
		rotationChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWALRotationIOErrorEndsProcess$")
	cmd.Env = append(os.Environ(), rotationChildEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "fatal error") {
		t.Fatalf("child: %v, want the Go runtime's fatal error (exit status 2); docs/operations.md says so\nstdout:\n%s\nstderr (head):\n%.2000s",
			err, out, stderr.String())
	}
	var acked []Event
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var seq uint64
		var id string
		if n, _ := fmt.Sscanf(line, "ACK %d %s", &seq, &id); n == 2 {
			acked = append(acked, Event{Seq: seq, ID: ulid.MustParse(id)})
		}
	}
	if len(acked) < 4 {
		t.Fatalf("child acknowledged %d appends:\n%s", len(acked), out)
	}
	l := mustOpen(t, dir, nil)
	defer closeLog(t, l)
	for _, e := range acked {
		got, err := l.Get(e.ID)
		if err != nil || got.Seq != e.Seq {
			t.Fatalf("acknowledged seq %d after the process died: %v", e.Seq, err)
		}
	}
	mustVerify(t, l)
	t.Logf("the child died at a WAL rotation after %d acknowledged appends; all there (head %d)", len(acked), l.Head())
}

func rotationChild(dir string) {
	var fail atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail.Load() && strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite) {
			return errorfs.ErrInjected
		}
		return nil
	}))
	l, err := Open(dir, &Options{FS: fs, MemTableSize: 1 << 20})
	if err != nil {
		fmt.Println("OPEN", err)
		os.Exit(3)
	}
	body := bytes.Repeat([]byte("r"), 64<<10)
	for i := range 64 { // 4 MiB: several rotations
		if i == 4 {
			fail.Store(true)
		}
		res, err := l.Append(context.Background(), "s", Any, Event{Type: "BIG", Body: body})
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(3)
		}
		fmt.Println("ACK", res.Events[0].Seq, res.Events[0].ID)
	}
	fmt.Println("SURVIVED")
	os.Exit(4)
}

// TestAcceptedLossNotForgotten stops the process (a power-loss image) at
// every WAL write while AcceptDataLoss opens a shorter log and records the
// loss: each image either still refuses with the loss, or holds the
// DATA_LOST record with every sequence up to the marker's reserved filled.
// A loss is never forgotten halfway, which would let sequences that were
// handed out be handed out again.
func TestAcceptedLossNotForgotten(t *testing.T) {
	mem := vfs.NewCrashableMem()
	l := mustOpen(t, "db", testOptions(mem))
	appendN(t, l, "s", "OLD", 5)
	closeLog(t, l)
	l = mustOpen(t, "db", testOptions(mem)) // the 5 events go to a table
	appendN(t, l, "s", "LOST", 10)
	closeLog(t, l)
	m, _, err := readMarker(mem, "db")
	if err != nil || m.head != 15 {
		t.Fatalf("marker %+v %v", m, err)
	}
	if err := mem.Remove("db/" + last(files(t, mem, suffix(".log")))); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var images []*vfs.MemFS
	watch := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSync) {
			mu.Lock()
			images = append(images, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}))
			mu.Unlock()
		}
		return nil
	}))
	o := testOptions(watch)
	o.AcceptDataLoss = true
	l = mustOpen(t, "db", o)
	closeLog(t, l)
	if len(images) < 3 {
		t.Fatalf("%d images", len(images))
	}
	refused, recorded := 0, 0
	for i, img := range images {
		il, err := Open("db", testOptions(img))
		var dl *DataLossError
		switch {
		case errors.As(err, &dl) && dl.Acknowledged >= 15:
			// The marker may have recorded the fill's own SEQ_LOST
			// events as its head (a WAL created during the fill
			// records the head): still a refusal until DATA_LOST.
			refused++
			// Accepting it (again) completes the record.
			ao := testOptions(img)
			ao.AcceptDataLoss = true
			al := mustOpen(t, "db", ao)
			evs := collect(t, al.Scan(0, Forward))
			closeLog(t, al)
			if n := len(evs); n <= int(m.reserved) || evs[n-1].Type != TypeDataLost {
				t.Fatalf("image %d accepted: head %d, last %s (reserved %d)", i, n, evs[n-1].Type, m.reserved)
			}
			continue
		case err != nil:
			t.Fatalf("image %d: %v", i, err)
		}
		evs := collect(t, il.Scan(0, Forward))
		closeLog(t, il)
		if n := len(evs); n <= int(m.reserved) || evs[n-1].Type != TypeDataLost {
			t.Fatalf("image %d opens at head %d without the loss recorded (reserved %d)", i, n, m.reserved)
		}
		recorded++
	}
	t.Logf("%d images: %d still refuse, %d hold DATA_LOST", len(images), refused, recorded)
	if refused == 0 || recorded == 0 {
		t.Fatalf("images cover only one side: %d refuse, %d recorded", refused, recorded)
	}
}

// TestPowerLossDuringCreation takes a power-loss image at every write and
// sync while Open creates a new log (Pebble writes its MANIFEST, then the
// pointer to it, then the first WAL; the head marker follows): every image
// opens as a new, empty log that takes appends, and none is refused as a
// database whose MANIFEST pointer went missing, since nothing was ever
// written to it. An image taken after the creation finished keeps what it
// holds: the same check after one acknowledged append finds it.
func TestPowerLossDuringCreation(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var mu sync.Mutex
	var images []*vfs.MemFS
	watch := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpCreate, errorfs.OpFileWrite, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpRename, errorfs.OpLink:
			mu.Lock()
			// Unsynced writes all lost, and all kept (a file whose
			// directory entry was not synced yet may survive).
			images = append(images, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}),
				mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))}))
			mu.Unlock()
		}
		return nil
	}))
	l := mustOpen(t, "db", testOptions(watch))
	mu.Lock()
	created := len(images)
	mu.Unlock()
	mustAppend(t, l, "s", Any, ev("E", "one"))
	closeLog(t, l)
	if created < 3 {
		t.Fatalf("%d images during the creation", created)
	}
	for i, img := range images {
		il, err := Open("db", testOptions(img))
		if err != nil {
			t.Fatalf("image %d of %d (%d during the creation): %v", i, len(images), created, err)
		}
		n := len(collect(t, il.Scan(0, Forward)))
		if i < created && n != 0 {
			t.Fatalf("image %d, taken during the creation, holds %d events", i, n)
		}
		if _, err := il.Append(context.Background(), "s", Any, ev("E", "after")); err != nil {
			t.Fatalf("image %d: append: %v", i, err)
		}
		closeLog(t, il)
	}
	t.Logf("%d images, %d of them during the creation", len(images), created)
}

// TestReservationWrittenAhead: in a steady stream of appends the marker's
// reservation is extended in the background before the groups reach it.
// While that write is held up, the groups it covers are still acknowledged
// (they do not wait for it), each only once the marker on disk reserves
// its sequences; the write then extends the reservation by a step, and
// Close waits for it before it writes the clean marker.
func TestReservationWrittenAhead(t *testing.T) {
	mem := vfs.NewMem()
	gate := make(chan struct{})
	held := make(chan struct{}, 1)
	l := mustOpen(t, "db", testOptions(mem))
	l.markEvery = time.Hour // no refresh: reservations and WAL creations write the marker
	l.testHookReserve = func() {
		held <- struct{}{}
		<-gate
	}
	onDisk := func() marker {
		t.Helper()
		m, found, err := readMarker(mem, "db")
		if err != nil || !found {
			t.Fatalf("reading the marker: found %v, %v", found, err)
		}
		return m
	}
	// appendCovered appends n events and fails if that waits for the
	// held marker write, or if the marker on disk does not reserve them.
	appendCovered := func(n int) uint64 {
		t.Helper()
		evs := make([]Event, n)
		for i := range evs {
			evs[i] = ev("E", "")
		}
		type result struct {
			res AppendResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := l.Append(context.Background(), "s", Any, evs...)
			done <- result{res, err}
		}()
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatalf("append: %v", r.err)
			}
			last := r.res.Events[n-1].Seq
			if m := onDisk(); m.reserved < last {
				t.Fatalf("sequence %d acknowledged while the marker on disk reserves up to %d", last, m.reserved)
			}
			return last
		case <-time.After(30 * time.Second):
			t.Fatal("an append the reservation covers waited for the marker write")
			return 0
		}
	}
	mustAppend(t, l, "s", Any, ev("FIRST", "")) // reserves 1 + reserveStep
	reserved := onDisk().reserved
	if reserved != 1+reserveStep {
		t.Fatalf("reserved %d after the first append, want %d", reserved, 1+reserveStep)
	}
	// Within half a step of the reservation: the background write starts
	// and is held; the group is acknowledged all the same.
	start := appendCovered(int(reserved - reserveStep/2))
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no reservation was written ahead of need")
	}
	// Up to the reservation's last sequence, still while it is held.
	if last := appendCovered(int(reserved - start)); last != reserved {
		t.Fatalf("last sequence %d, want %d", last, reserved)
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	close(gate) // the background write, then Close's
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	m := onDisk()
	if !m.clean || m.head != reserved || m.reserved != reserved+reserveStep {
		t.Fatalf("marker after Close: %+v, want clean, head %d, reserved %d", m, reserved, reserved+reserveStep)
	}
}
