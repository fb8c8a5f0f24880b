package eventlog

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestIdempotencyAcrossRestart(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	l := mustOpen(t, "db", testOptions(mem))
	a := Event{ID: l.NewID(), Type: "A", Body: []byte("1")}
	b := Event{ID: l.NewID(), Type: "B", Body: []byte("2")}
	first := mustAppend(t, l, "s", NoStream, a, b)
	mustAppend(t, l, "s", Any, ev("C", ""))
	closeLog(t, l)

	l = mustOpen(t, "db", testOptions(mem))
	defer closeLog(t, l)
	again, err := l.Append(ctx, "s", NoStream, a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, first) {
		t.Fatalf("replay after restart %+v\nfirst %+v", again, first)
	}
	if _, err := l.Append(ctx, "s", Any, Event{ID: a.ID, Type: "A", Body: []byte("other")}); !errors.Is(err, ErrIDReused) {
		t.Fatalf("reuse after restart: %v", err)
	}
	if l.Head() != 3 {
		t.Fatalf("head %d", l.Head())
	}
	// The version cache is rebuilt from the index.
	if res := mustAppend(t, l, "s", Exactly(3), ev("D", "")); res.FirstSeq != 4 || res.Version != 4 {
		t.Fatalf("append after restart: %+v", res)
	}
}

// dirState fingerprints every file under dir: name, size, mode, mtime and
// content hash.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var sum [32]byte
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum = sha256.Sum256(b)
		}
		out[p] = fmt.Sprintf("%d %v %v %x", info.Size(), info.Mode(), info.ModTime().UnixNano(), sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")
	l := mustOpen(t, dir, nil)
	res := mustAppend(t, l, "s", Any, ev("A", "1"), ev("B", "2"))

	t.Run("locked by a writer in this process", func(t *testing.T) {
		if _, err := Open(dir, &Options{ReadOnly: true}); !errors.Is(err, ErrLocked) {
			t.Fatalf("read-only open of a live directory: %v", err)
		}
		if _, err := Open(dir, nil); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "checkpoint") {
			t.Fatalf("second writer: %v", err)
		}
	})
	closeLog(t, l)

	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("data directory mode %v, %v", info.Mode(), err)
	}
	before := dirState(t, dir)
	ro := mustOpen(t, dir, &Options{ReadOnly: true})
	ro2 := mustOpen(t, dir, &Options{ReadOnly: true}) // readers share
	if _, err := Open(dir, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("writer while readers are open: %v", err)
	}
	if got, err := ro.Get(res.Events[1].ID); err != nil || got.Type != "B" {
		t.Fatalf("Get: %+v %v", got, err)
	}
	if ro.Head() != 2 || len(collect(t, ro2.Scan(0, Forward))) != 2 {
		t.Fatal("read-only log does not show the events")
	}
	if _, err := ro.Append(ctx, "s", Any, ev("C", "")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Append: %v", err)
	}
	if err := ro.WriteAux(ctx, func(*AuxBatch) error { return nil }); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WriteAux: %v", err)
	}
	mustVerify(t, ro)
	closeLog(t, ro)
	closeLog(t, ro2)
	if after := dirState(t, dir); !reflect.DeepEqual(before, after) {
		t.Fatalf("read-only open modified the directory:\nbefore %v\nafter  %v", before, after)
	}

	if _, err := Open(filepath.Join(t.TempDir(), "missing"), &Options{ReadOnly: true}); err == nil {
		t.Fatal("read-only open of a missing directory succeeded")
	}
	l = mustOpen(t, dir, nil) // the writer can come back
	closeLog(t, l)
}

// TestLockedByAnotherProcess runs this test binary as a child that holds the
// log open, and checks the parent gets ErrLocked with its hint.
func TestLockedByAnotherProcess(t *testing.T) {
	if dir := os.Getenv("EVENTLOG_HOLD_DIR"); dir != "" {
		l, err := Open(dir, nil)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		bufio.NewReader(os.Stdin).ReadString('\n') // hold until the parent says so
		l.Close()
		os.Exit(0)
	}
	dir := filepath.Join(t.TempDir(), "db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockedByAnotherProcess$")
	cmd.Env = append(os.Environ(), "EVENTLOG_HOLD_DIR="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("child: %q", line)
	}
	for _, ro := range []bool{false, true} {
		_, err := Open(dir, &Options{ReadOnly: ro})
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "--server") {
			t.Errorf("open (read-only %v) of a directory held by another process: %v", ro, err)
		}
	}
}

func TestCheckpointWhileAppending(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	l := mustOpen(t, filepath.Join(root, "db"), nil)
	defer closeLog(t, l)

	var mu sync.Mutex
	var acked []Event
	stop := make(chan struct{})
	progress := make(chan struct{}, 1000)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				res, err := l.Append(ctx, fmt.Sprintf("w%d", w), Any, ev("E", fmt.Sprint(i)))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, res.Events...)
				mu.Unlock()
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
	}
	for range 50 {
		<-progress
	}
	mu.Lock()
	before := append([]Event(nil), acked...)
	mu.Unlock()
	cp := filepath.Join(root, "checkpoint")
	if err := l.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if err := l.Checkpoint(cp); err == nil {
		t.Fatal("checkpoint over an existing directory succeeded")
	}
	if info, err := os.Stat(cp); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("checkpoint mode %v %v", info.Mode(), err)
	}

	c := mustOpen(t, cp, &Options{ReadOnly: true})
	defer closeLog(t, c)
	rep := mustVerify(t, c)
	for _, e := range before {
		got, err := c.Get(e.ID)
		if err != nil || got.Seq != e.Seq {
			t.Fatalf("acknowledged event %d missing from the checkpoint: %v", e.Seq, err)
		}
	}
	t.Logf("checkpoint holds %d events; %d acknowledged before it", rep.Events, len(before))
}

func TestFormatVersion(t *testing.T) {
	raw := func(t *testing.T, fs vfs.FS, set func(b *pebble.Batch)) {
		db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: pebbleLogger{l: (&Options{}).EnsureDefaults().Logger}})
		if err != nil {
			t.Fatal(err)
		}
		b := db.NewBatch()
		set(b)
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	t.Run("newer", func(t *testing.T) {
		mem := vfs.NewMem()
		raw(t, mem, func(b *pebble.Batch) {
			b.Set(FormatKey, binary.BigEndian.AppendUint32(nil, FormatVersionArchived+1), nil)
		})
		_, err := Open("db", testOptions(mem))
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "newer than this build supports") {
			t.Fatalf("newer format: %v", err)
		}
	})
	t.Run("not a pegasus log", func(t *testing.T) {
		mem := vfs.NewMem()
		raw(t, mem, func(b *pebble.Batch) { b.Set([]byte("foo"), []byte("bar"), nil) })
		_, err := Open("db", testOptions(mem))
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "not a Pegasus log") {
			t.Fatalf("foreign DB: %v", err)
		}
	})
	t.Run("read-only empty", func(t *testing.T) {
		mem := vfs.NewMem()
		raw(t, mem, func(b *pebble.Batch) { b.Set([]byte("x"), nil, nil); b.Delete([]byte("x"), nil) })
		o := testOptions(mem)
		o.ReadOnly = true
		if _, err := Open("db", o); !errors.Is(err, ErrFormat) {
			t.Fatalf("read-only open of an empty DB: %v", err)
		}
	})
	t.Run("current", func(t *testing.T) {
		mem := vfs.NewMem()
		closeLog(t, mustOpen(t, "db", testOptions(mem)))
		o := testOptions(mem)
		o.ReadOnly = true
		closeLog(t, mustOpen(t, "db", o))
	})
}

func TestOptions(t *testing.T) {
	o := (*Options)(nil).EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.FS != vfs.Default || o.MaxGroupEvents != 4096 || o.SubscriberBuffer != 256 {
		t.Fatalf("defaults %+v", o)
	}
	bad := *o
	bad.MaxGroupEvents = -1
	if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := Open("db", &bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open with bad options: %v", err)
	}
}

// TestSubscriptionHandoff runs subscriptions that start before, during and
// after concurrent appends, with a tiny buffer so that they also fall back
// to the log, and checks each sees every event once, in order.
func TestSubscriptionHandoff(t *testing.T) {
	ctx := context.Background()
	o := testOptions(vfs.NewMem())
	o.SubscriberBuffer = 3
	l := mustOpen(t, "db", o)
	defer closeLog(t, l)

	const writers, perWriter = 4, 300
	const total = writers * perWriter
	type result struct {
		from uint64
		err  error
	}
	results := make(chan result, 8)
	subscribe := func(from uint64) {
		sub := l.Subscribe(ctx, from)
		defer sub.Close()
		want := max(from, 1)
		for want <= total {
			e, err := sub.Next(ctx)
			if err != nil {
				results <- result{from, err}
				return
			}
			if e.Seq != want {
				results <- result{from, fmt.Errorf("got seq %d, want %d", e.Seq, want)}
				return
			}
			if want%2 == 0 {
				got, err := l.GetSeq(e.Seq)
				if err != nil || !reflect.DeepEqual(got, e) {
					results <- result{from, fmt.Errorf("seq %d: delivered %+v, stored %+v (%v)", e.Seq, e, got, err)}
					return
				}
			}
			want++
		}
		results <- result{from, nil}
	}
	go subscribe(0)
	halfway := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; {
				n := min(1+i%3, perWriter-i)
				evs := make([]Event, n)
				for j := range evs {
					evs[j] = ev("E", fmt.Sprint(w, i+j))
				}
				if _, err := l.Append(ctx, fmt.Sprintf("w%d", w), Any, evs...); err != nil {
					t.Error(err)
					return
				}
				i += n
				if w == 0 && i > perWriter/2 {
					once.Do(func() { close(halfway) })
				}
			}
		}()
	}
	<-halfway
	go subscribe(1)
	go subscribe(l.Head())
	wg.Wait()
	// Resuming beyond the head is the caller's error, not a wait: the
	// events before it would be skipped silently. (Asked once the writers
	// are done: while they write, the head may pass the position first.)
	if _, err := l.Subscribe(ctx, l.Head()+5).Next(ctx); !errors.Is(err, ErrBeyondHead) {
		t.Errorf("subscription beyond the head: %v, want ErrBeyondHead", err)
	}
	go subscribe(total - 10)
	for range 4 {
		if r := <-results; r.err != nil {
			t.Errorf("subscription from %d: %v", r.from, r.err)
		}
	}
}

// boundedLog is a log whose subscriptions buffer 4 live events, holding
// one event; live receives each subscription's switch to live (room for
// n before the switch waits).
func boundedLog(t *testing.T, n int) (l *Log, o *Options, live chan struct{}) {
	o = testOptions(vfs.NewMem())
	o.SubscriberBuffer = 4
	l = mustOpen(t, "db", o)
	t.Cleanup(func() { closeLog(t, l) })
	mustAppend(t, l, "s", Any, ev("A", ""))
	live = make(chan struct{}, n)
	l.testHookLive = func(*Subscription) { live <- struct{}{} }
	return l, o, live
}

// liveSubscription returns a subscription of a boundedLog that has read
// seq 1 from the log and seq 2 live.
func liveSubscription(t *testing.T, l *Log, live chan struct{}) *Subscription {
	t.Helper()
	ctx := context.Background()
	sub := l.Subscribe(ctx, 1)
	t.Cleanup(func() { sub.Close() })
	if e, err := sub.Next(ctx); err != nil || e.Seq != 1 {
		t.Fatalf("first event: %+v %v", e, err)
	}
	got := make(chan Event, 1)
	go func() {
		e, _ := sub.Next(ctx)
		got <- e
	}()
	<-live // registered as live
	mustAppend(t, l, "s", Any, ev("B", ""))
	if e := <-got; e.Seq != 2 {
		t.Fatalf("live event %d", e.Seq)
	}
	return sub
}

func TestSlowSubscriberIsBounded(t *testing.T) {
	ctx := context.Background()
	l, o, live := boundedLog(t, 1)
	sub := liveSubscription(t, l, live)

	// The subscriber now stops reading while 5000 events are appended.
	const n = 5000
	for i := 0; i < n; i += 100 {
		evs := make([]Event, 100)
		for j := range evs {
			evs[j] = ev("E", strings.Repeat("x", 100))
		}
		mustAppend(t, l, "s", Any, evs...)
	}
	l.subMu.Lock()
	_, registered := l.subs[sub]
	buffered := sub.buffered()
	l.subMu.Unlock()
	if registered || buffered > o.SubscriberBuffer {
		t.Fatalf("slow subscriber: registered %v, %d events buffered (limit %d)", registered, buffered, o.SubscriberBuffer)
	}
	// It catches up from the log without a gap or a duplicate.
	for want := uint64(3); want <= n+2; want++ {
		e, err := sub.Next(ctx)
		if err != nil || e.Seq != want {
			t.Fatalf("after falling behind: got %d (%v), want %d", e.Seq, err, want)
		}
	}
}

func TestManyWritersWithConflicts(t *testing.T) {
	ctx := context.Background()
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	const writers, perWriter, streams = 16, 40, 4
	var conflicts, successes [streams]int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := 0; i < perWriter; {
				s := rng.Intn(streams)
				stream := fmt.Sprintf("s%d", s)
				v, err := l.StreamVersion(stream)
				if err != nil {
					t.Error(err)
					return
				}
				_, err = l.Append(ctx, stream, Exactly(v), ev("E", fmt.Sprint(w, i)))
				var ce *ConflictError
				switch {
				case err == nil:
					mu.Lock()
					successes[s]++
					mu.Unlock()
					i++
				case errors.As(err, &ce):
					if ce.Current <= v {
						t.Errorf("conflict says current %d, but we read %d", ce.Current, v)
					}
					mu.Lock()
					conflicts[s]++
					mu.Unlock()
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for s := range streams {
		v, _ := l.StreamVersion(fmt.Sprintf("s%d", s))
		if int64(v) != successes[s] {
			t.Errorf("stream s%d: version %d, %d successful appends", s, v, successes[s])
		}
		total += successes[s]
	}
	if l.Head() != uint64(total) || total != writers*perWriter {
		t.Fatalf("head %d, %d successes", l.Head(), total)
	}
	mustVerify(t, l)
	t.Logf("conflicts per stream: %v", conflicts)
}

func TestStreamVersionCacheEviction(t *testing.T) {
	o := testOptions(vfs.NewMem())
	o.StreamCacheSize = 2
	l := mustOpen(t, "db", o)
	defer closeLog(t, l)
	for round := range 3 {
		for s := range 5 {
			res := mustAppend(t, l, fmt.Sprintf("s%d", s), Exactly(uint64(round)), ev("E", ""))
			if res.Version != uint64(round+1) {
				t.Fatalf("stream s%d round %d: version %d", s, round, res.Version)
			}
		}
	}
	if len(l.versions) > 2 {
		t.Fatalf("cache holds %d streams, limit 2", len(l.versions))
	}
	st := l.Stats()
	if st.Commits != 15 || st.Appends != 15 || st.Events != 15 {
		t.Fatalf("stats %+v", st)
	}
}
