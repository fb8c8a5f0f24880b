package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/syncbuf"
)

const testWait = 30 * time.Second

func TestSubject(t *testing.T) {
	for _, c := range []struct{ stream, typ, want string }{
		{"01JD3Q6V4M8ZK2X1YB7N5C9T0E", "TASK_CREATED", "pegasus.task.01JD3Q6V4M8ZK2X1YB7N5C9T0E.TASK_CREATED"},
		{"01JD3Q6V4M8ZK2X1YB7N5C9T0E", string(fsm.DispatchCreated), "swarm.task.01JD3Q6V4M8ZK2X1YB7N5C9T0E.created"},
		{"d", string(fsm.DispatchTimedOut), "swarm.task.d.timeout"},
		{"d", string(fsm.DispatchRetried), "swarm.task.d.retry"},
		{"d", string(fsm.DispatchDeadLettered), "swarm.task.d.dlq"},
		{"d", string(fsm.DispatchProgress), "swarm.task.d.progress"},
		{"$system", "SYSTEM_STARTED", "pegasus.system.system.SYSTEM_STARTED"},
		{"$", "X", "pegasus.task.$.X"},
		{"a.b c*>%", "T", "pegasus.task.a%2Eb%20c%2A%3E%25.T"},
	} {
		if got := Subject(c.stream, c.typ); got != c.want {
			t.Errorf("Subject(%q, %q) = %q, want %q", c.stream, c.typ, got, c.want)
		}
	}
	// Every dispatch event has a subject, and the seed's nine are there.
	seen := map[string]bool{}
	for _, name := range dispatchEvents {
		seen[name] = true
	}
	for _, want := range []string{"created", "assigned", "started", "progress", "completed", "failed", "timeout", "retry", "dlq"} {
		if !seen[want] {
			t.Errorf("no dispatch event on swarm.task.<id>.%s", want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []OutboxOptions{{}, {URL: "nats://x", Stream: "a.b"}, {URL: "nats://x", Replicas: 7}} {
		o.EnsureDefaults()
		if err := o.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", o, err)
		}
	}
}

// fixture is a log and a JetStream server (or cluster) for the outbox.
type fixture struct {
	t    *testing.T
	dir  string
	log  *eventlog.Log
	nats *natstest.Cluster
	js   jetstream.JetStream
	n    int
}

func newFixture(t *testing.T, servers int) *fixture {
	f := &fixture{t: t, dir: t.TempDir(), nats: natstest.Start(t, servers)}
	f.js = f.nats.JetStream()
	f.open()
	return f
}

func (f *fixture) open() {
	l, err := eventlog.Open(f.dir, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.log = l
	f.t.Cleanup(func() { l.Close() })
}

// append appends n events over a task stream, a dispatch stream and
// $system.
func (f *fixture) append(n int) {
	f.t.Helper()
	for range n {
		f.n++
		stream, typ := fmt.Sprintf("task-%d", f.n%3), "STEP_DONE"
		switch f.n % 4 {
		case 1:
			stream, typ = "dispatch-1", string(fsm.DispatchProgress)
		case 2:
			stream, typ = "$system", "SYSTEM_NOTE"
		}
		if _, err := f.log.Append(context.Background(), stream, eventlog.Any,
			eventlog.Event{Type: typ, Body: []byte(strconv.Itoa(f.n))}); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) start(o OutboxOptions) *Outbox {
	f.t.Helper()
	o.URL = f.nats.URL()
	o.CursorInterval = -1 // every acknowledgement: the tests read it
	if o.RetryInterval == 0 {
		o.RetryInterval = 10 * time.Millisecond
	}
	o.Logger = slog.New(slog.NewTextHandler(tWriter{f.t}, nil))
	ob, err := StartOutbox(f.log, o)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(ob.Stop)
	return ob
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// waitPublished waits until the stream's last message holds the log's
// head.
func (f *fixture) waitPublished(stream string) {
	f.t.Helper()
	natstest.WaitLastHeader(f.t, f.js, stream, HeaderSeq, f.log.Head())
}

// checkStream asserts that stream holds exactly the log's events, once
// each, in log order (VerifyFanout).
func (f *fixture) checkStream(stream string) {
	f.t.Helper()
	st, err := f.js.Stream(context.Background(), stream)
	if err != nil {
		f.t.Fatal(err)
	}
	r, err := VerifyFanout(context.Background(), f.log, st)
	if err != nil {
		f.t.Fatal(err)
	}
	if r.First != 1 || r.Last != f.log.Head() {
		f.t.Fatalf("the stream holds events %d to %d, the log 1 to %d", r.First, r.Last, f.log.Head())
	}
}

func (f *fixture) cursor(stream string) uint64 {
	f.t.Helper()
	raw, err := f.log.GetAux([]byte(cursorKeyPrefix + stream))
	if err != nil {
		f.t.Fatal(err)
	}
	c, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// TestOutboxExactlyOnce publishes a log's history and its live events,
// stops, restarts over a longer log and a reopened log, and checks that
// the stream holds every event exactly once, in order.
func TestOutboxExactlyOnce(t *testing.T) {
	f := newFixture(t, 1)
	f.append(50)
	ob := f.start(OutboxOptions{})
	f.append(50)
	f.waitPublished("PEGASUS")
	ob.Stop()
	if got := f.cursor("PEGASUS"); got != f.log.Head() {
		t.Fatalf("cursor %d after a clean stop, head %d", got, f.log.Head())
	}
	f.append(30)
	// Reopen the log as a restarted daemon would.
	if err := f.log.Close(); err != nil {
		t.Fatal(err)
	}
	f.open()
	f.start(OutboxOptions{})
	f.append(20)
	f.waitPublished("PEGASUS")
	f.checkStream("PEGASUS")
}

// TestOutboxResyncsAfterServerRestart restarts the JetStream server while
// the outbox publishes: publishes in flight fail, and the outbox resumes
// from the stream's last message without a gap or a duplicate.
func TestOutboxResyncsAfterServerRestart(t *testing.T) {
	f := newFixture(t, 1)
	f.start(OutboxOptions{MaxPending: 8})
	f.append(100)
	f.nats.Restart(0)
	f.append(100)
	f.waitPublished("PEGASUS")
	f.checkStream("PEGASUS")
}

// TestOutboxStaleCursor loses the cursor's last writes (as a crash between
// acknowledgement and cursor write does): the stream's last message, not
// the cursor, says where to resume, so nothing is published twice even
// outside the de-duplication window.
func TestOutboxStaleCursor(t *testing.T) {
	f := newFixture(t, 1)
	f.append(40)
	ob := f.start(OutboxOptions{Duplicates: time.Second})
	f.waitPublished("PEGASUS")
	ob.Stop()
	if err := f.log.WriteAux(context.Background(), func(b *eventlog.AuxBatch) error {
		b.Set([]byte(cursorKeyPrefix+"PEGASUS"), []byte("3"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.append(10)
	f.start(OutboxOptions{})
	f.waitPublished("PEGASUS")
	f.checkStream("PEGASUS")
}

// TestOutboxAfterPurge purges the stream: the outbox resumes after its
// cursor instead of publishing the history again.
func TestOutboxAfterPurge(t *testing.T) {
	f := newFixture(t, 1)
	f.append(20)
	ob := f.start(OutboxOptions{})
	f.waitPublished("PEGASUS")
	ob.Stop()
	st, err := f.js.Stream(context.Background(), "PEGASUS")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.append(5)
	f.start(OutboxOptions{})
	f.waitPublished("PEGASUS")
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 5 || info.State.FirstSeq != 21 {
		t.Fatalf("after a purge the stream holds %d messages from %d, want the 5 new ones from 21", info.State.Msgs, info.State.FirstSeq)
	}
}

// TestOutboxForeignStream refuses a stream whose last message is beyond
// the log's head, one another program publishes into, and one that does
// not capture the outbox's subjects.
func TestOutboxForeignStream(t *testing.T) {
	for _, hdr := range []string{"999", "", "narrow"} {
		f := newFixture(t, 1)
		f.append(3)
		ctx := context.Background()
		subjects := Subjects
		if hdr == "narrow" {
			subjects, hdr = []string{"pegasus.>"}, "1"
		}
		if _, err := f.js.CreateStream(ctx, jetstream.StreamConfig{Name: "PEGASUS", Subjects: subjects}); err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("pegasus.task.x.Y")
		if hdr != "" {
			m.Header.Set(HeaderSeq, hdr)
		}
		if _, err := f.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		ob := f.start(OutboxOptions{})
		select {
		case <-ob.Done():
		case <-time.After(testWait):
			t.Fatal("the outbox did not stop")
		}
		if err := ob.Err(); !errors.Is(err, ErrForeignStream) {
			t.Fatalf("header %q: %v, want ErrForeignStream", hdr, err)
		}
	}
}

// TestOutboxClusterR3 publishes into a stream with three replicas on a
// three-server cluster and stops one server, then another after the
// first is back: the stream keeps a quorum and every event is on it once.
func TestOutboxClusterR3(t *testing.T) {
	f := newFixture(t, 3)
	f.start(OutboxOptions{Replicas: 3, MaxPending: 16})
	f.append(60)
	f.nats.Stop(1)
	f.append(60)
	f.waitPublished("PEGASUS")
	f.nats.Restart(1)
	f.nats.WaitReady(3)
	f.nats.WaitStreamCurrent(f.js, "PEGASUS")
	f.nats.Stop(2)
	f.append(60)
	f.waitPublished("PEGASUS")
	f.checkStream("PEGASUS")
}

// TestVerifyFanoutCatchesDamage proves the check is not vacuous: a
// duplicate, a changed body and a wrong subject are each found.
func TestVerifyFanoutCatchesDamage(t *testing.T) {
	for _, damage := range []func(m *nats.Msg){
		func(m *nats.Msg) {}, // a second copy of the last event
		func(m *nats.Msg) { m.Header.Set(HeaderSeq, "6"); m.Data = []byte("{}") },
		func(m *nats.Msg) { m.Header.Set(HeaderSeq, "6"); m.Subject = "pegasus.task.x.Y" },
	} {
		f := newFixture(t, 1)
		f.append(5)
		ob := f.start(OutboxOptions{})
		f.waitPublished("PEGASUS")
		ob.Stop()
		f.append(1)
		ctx := context.Background()
		st, err := f.js.Stream(ctx, "PEGASUS")
		if err != nil {
			t.Fatal(err)
		}
		last, err := st.GetMsg(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(last.Subject)
		m.Header, m.Data = last.Header, last.Data
		m.Header.Del(jetstream.MsgIDHeader)
		m.Header.Del(jetstream.ExpectedLastSeqHeader)
		damage(m)
		if _, err := f.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyFanout(ctx, f.log, st); !errors.Is(err, ErrFanoutMismatch) {
			t.Errorf("%v, want ErrFanoutMismatch", err)
		}
	}
}

// TestOutboxStreamSubjects: the stream the outbox creates captures
// exactly Subjects, which leave pegasus.log.> to a clustered log's stream
// in the same account; a stream created before with pegasus.> and
// swarm.task.> (which cover them) is still used.
func TestOutboxStreamSubjects(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	if _, err := f.js.CreateStream(ctx, jetstream.StreamConfig{Name: "LOG", Subjects: []string{"pegasus.log.>"}}); err != nil {
		t.Fatal(err)
	}
	f.append(10)
	f.start(OutboxOptions{})
	f.waitPublished("PEGASUS")
	f.checkStream("PEGASUS")

	if _, err := f.js.CreateStream(ctx, jetstream.StreamConfig{Name: "OLD", Subjects: []string{"pegasus.>", "swarm.task.>"}}); err == nil {
		t.Fatal("a stream overlapping the log's was created")
	}
	g := newFixture(t, 1)
	if _, err := g.js.CreateStream(ctx, jetstream.StreamConfig{Name: "OLD", Subjects: []string{"pegasus.>", "swarm.task.>"}}); err != nil {
		t.Fatal(err)
	}
	g.append(10)
	g.start(OutboxOptions{Stream: "OLD"})
	g.waitPublished("OLD")
	g.checkStream("OLD")

	for _, c := range []struct {
		f, g string
		want bool
	}{
		{"pegasus.>", "pegasus.task.>", true}, {"pegasus.*.>", "pegasus.task.>", true}, {"pegasus.task.>", "pegasus.task.>", true},
		{"pegasus.task.*", "pegasus.task.>", false}, {"pegasus.log.>", "pegasus.task.>", false}, {"pegasus.task", "pegasus.task.>", false},
		{">", "swarm.task.>", true}, {"swarm.*", "swarm.task.>", false},
	} {
		if got := covers(c.f, c.g); got != c.want {
			t.Errorf("covers(%q, %q) = %v", c.f, c.g, got)
		}
	}
}

// TestOutboxRefusesAnotherLogsStream: a stream whose last message is
// another log's event at the same sequence is refused, not continued.
func TestOutboxRefusesAnotherLogsStream(t *testing.T) {
	f := newFixture(t, 1)
	f.append(5)
	f.start(OutboxOptions{})
	f.waitPublished("PEGASUS")
	other, err := eventlog.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for range 8 {
		if _, err := other.Append(context.Background(), "x", eventlog.Any, eventlog.Event{Type: "T"}); err != nil {
			t.Fatal(err)
		}
	}
	ob, err := StartOutbox(other, OutboxOptions{URL: f.nats.URL(), RetryInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Stop()
	select {
	case <-ob.Done():
	case <-time.After(testWait):
		t.Fatal("the outbox did not stop")
	}
	if err := ob.Err(); !errors.Is(err, ErrForeignStream) {
		t.Fatalf("%v, want ErrForeignStream", err)
	}
}

// TestOutboxTwoNodes: two nodes of a clustered log each run an outbox
// over their own copy into the same stream, at once, while both append
// (what a stale fan-out publisher and its successor do): every event is
// in the stream exactly once, in order, since every publish carries the
// stream's expected last sequence. The second node's copy may lag the
// first's publishing: the outbox catches it up (OutboxOptions.CatchUp)
// rather than taking the stream for a foreign one.
func TestOutboxTwoNodes(t *testing.T) {
	nc := natstest.Start(t, 1)
	a := openNode(t, nc, t.TempDir())
	b := openNode(t, nc, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	appendSome := func(n *node, k int) {
		for i := range k {
			if _, err := n.rl.Append(ctx, fmt.Sprintf("task-%d", i%5), eventlog.Any, eventlog.Event{Type: "STEP"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendSome(a, 40)
	start := func(n *node) *Outbox {
		ob, err := StartOutbox(n.local, OutboxOptions{URL: nc.URL(), MaxPending: 4, RetryInterval: time.Millisecond,
			CatchUp: n.rl.CatchUp, Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return ob
	}
	oa := start(a)
	natstest.WaitLastHeader(t, nc.JetStream(), "PEGASUS", HeaderSeq, 10)
	ob := start(b)
	done := make(chan struct{})
	go func() { defer close(done); appendSome(b, 40) }()
	appendSome(a, 40)
	<-done
	if err := a.rl.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	natstest.WaitLastHeader(t, nc.JetStream(), "PEGASUS", HeaderSeq, a.local.Head())
	oa.Stop()
	ob.Stop()
	if oa.Err() != nil || ob.Err() != nil {
		t.Fatalf("the outboxes stopped: %v, %v", oa.Err(), ob.Err())
	}
	sameCopies(t, a, b)
	st, err := nc.JetStream().Stream(ctx, "PEGASUS")
	if err != nil {
		t.Fatal(err)
	}
	r, err := VerifyFanout(ctx, b.local, st)
	if err != nil || r.First != 1 || r.Last != b.local.Head() {
		t.Fatalf("the stream holds %+v of %d: %v", r, b.local.Head(), err)
	}
}

// TestOutboxPassesOverArchivedEvents: events that retention removed before
// the outbox published them are not on the stream, the outbox says so
// with their sequences, and publishes everything else once, in order.
func TestOutboxPassesOverArchivedEvents(t *testing.T) {
	f := newFixture(t, 1)
	ctx := context.Background()
	for i := range 6 {
		stream := "kept"
		if i%2 == 0 {
			stream = "gone"
		}
		if _, err := f.log.Append(ctx, stream, eventlog.Any, eventlog.Event{Type: "STEP_DONE", Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	rt := eventlog.Retirement{Manifest: eventlog.Event{ID: f.log.NewID(), Type: eventlog.TypeEventsArchived, Body: []byte("manifest")}}
	it := f.log.ReadStream("gone", 1)
	for it.Next() {
		ev := it.Event()
		rt.Events = append(rt.Events, eventlog.RetiredEvent{Seq: ev.Seq, ID: ev.ID, Causation: ev.Causation})
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	rt.Streams = []eventlog.RetiredStream{{Stream: "gone", Version: uint64(len(rt.Events))}}
	if _, err := f.log.Retire(ctx, rt); err != nil {
		t.Fatal(err)
	}

	var logged syncbuf.Buffer
	o := OutboxOptions{URL: f.nats.URL(), CursorInterval: -1, RetryInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))}
	ob, err := StartOutbox(f.log, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ob.Stop)
	f.waitPublished("PEGASUS")
	st, err := f.js.Stream(ctx, "PEGASUS")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for s := uint64(1); ; s++ {
		m, err := st.GetMsg(ctx, s)
		if err != nil {
			break
		}
		got = append(got, m.Header.Get(HeaderSeq))
	}
	if want := []string{"2", "4", "6", "7"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the stream holds sequences %v, want %v (the kept events and the manifest)", got, want)
	}
	for _, w := range []string{"first_seq=1 last_seq=1", "first_seq=3 last_seq=3", "first_seq=5 last_seq=5"} {
		if !strings.Contains(logged.String(), w) {
			t.Errorf("no warning for the archived %s:\n%s", w, logged.String())
		}
	}
}
