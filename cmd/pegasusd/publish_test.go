package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestPublishCrash runs pegasusd with --publish pointed at an in-process
// cluster of three JetStream servers (a stream with three replicas),
// under concurrent submissions of agent tasks and dispatch tasks, kills it
// with SIGKILL several times mid-flow, and stops one NATS server during
// each odd cycle (restarted before the next). After
// a clean stop and one more start (which publishes what the stop's drain
// committed), the stream must hold every event of the log exactly once,
// in log order, on its subject, in the one JSON form (cluster.VerifyFanout).
func TestPublishCrash(t *testing.T) {
	seed, rng := crashRun(t)
	nats := natstest.Start(t, 3)
	js := nats.JetStream()
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	flags := []string{"--publish", nats.URL(), "--publish-stream", "EVENTS", "--publish-replicas", "3"}
	inputs := []string{"what time is it?", "hello", "remember the door code is 42"}

	resumes := 0 // starts whose cursor lagged the stream (the kill came between an acknowledgement and the cursor's write)
	for cycle := range 4 {
		p := startProc(t, bin, data, flags...)
		td := &testDaemon{t: t, url: p.url}
		for i := range 3 { // dispatch tasks: swarm.task.<id>.created
			mustStatus(t, td.as("client", "POST", "/api/v1/tasks", fmt.Sprintf(`{"title":"job %d.%d"}`, cycle, i)), 201)
		}
		down := -1
		if cycle%2 == 1 {
			down = rng.IntN(3)
			nats.Stop(down)
		}
		killUnderLoad(t, p, inputs, seed, cycle, 3, 2+rng.IntN(8), map[string]bool{})
		resumes += strings.Count(p.output(), "fan-out resumes after the stream's last message")
		if down >= 0 {
			nats.Restart(down)
			nats.WaitReady(3)
			nats.WaitStreamCurrent(js, "EVENTS")
		}
	}
	r := checkFanout(t, bin, data, flags, js, "EVENTS")
	t.Logf("%d events published exactly once over 4 kills and 2 NATS server stops; %d starts resumed from the stream ahead of the cursor", r.Last, resumes)
}

// checkFanout starts the daemon once more and stops it cleanly, then
// starts it again (it publishes what the stop's drain committed after the
// outbox stopped), waits until the stream holds the log's head as it was
// and kills it. The stream must then hold the log's events from 1 on,
// once each, in order (cluster.VerifyFanout), and carry messages on each
// of subjects (by default agent, broker and system events').
func checkFanout(t *testing.T, bin, data string, flags []string, js jetstream.JetStream, stream string, subjects ...string) cluster.FanoutRange {
	t.Helper()
	p := startProc(t, bin, data, flags...)
	p.stop(t)
	head := logHead(t, data)
	p = startProc(t, bin, data, flags...)
	natstest.WaitLastHeader(t, js, stream, cluster.HeaderSeq, head)
	p.kill(t)
	if slices.ContainsFunc(flags, func(f string) bool { return f == "--cluster" || strings.HasPrefix(f, "--cluster=") }) {
		// With --cluster the local copy is written unsynced
		// (docs/cluster.md): the kill may take its last events, which the
		// fan-out published and JetStream holds. A start and a clean stop
		// bring them back from JetStream before the stream is checked
		// against the copy.
		p = startProc(t, bin, data, flags...)
		p.stop(t)
	}

	l, st, r := verifyFanout(t, data, js, stream)
	defer l.Close()
	if r.Last < head {
		t.Fatalf("the stream holds events %d to %d; the log had 1 to %d before the last start", r.First, r.Last, head)
	}
	// What the fan-out costs per event: the stream's bytes (message,
	// headers, subject) against the log's records (docs/cluster.md).
	var recBytes int
	it := l.Scan(1, eventlog.Forward)
	for it.Next() {
		rec, err := eventlog.EncodeRecord(it.Event())
		if err != nil {
			t.Fatal(err)
		}
		recBytes += len(rec)
	}
	it.Close()
	if info, err := st.Info(context.Background()); err == nil && r.Last > 0 {
		t.Logf("per event: %d bytes in the stream, %d in the log's record", info.State.Bytes/info.State.Msgs, recBytes/int(l.Head()))
	}
	if len(subjects) == 0 {
		subjects = []string{"swarm.task.*.created", "pegasus.task.*.TASK_CREATED", "pegasus.system.system.SYSTEM_STARTED"}
	}
	for _, subj := range subjects {
		info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		if len(info.State.Subjects) == 0 {
			t.Errorf("no message on %s", subj)
		}
	}
	return r
}

// verifyFanout opens a stopped daemon's log read-only (the caller closes
// it) and checks that the fan-out's stream holds its events from 1 on,
// once each, in order (cluster.VerifyFanout).
func verifyFanout(t *testing.T, data string, js jetstream.JetStream, stream string) (*eventlog.Log, jetstream.Stream, cluster.FanoutRange) {
	t.Helper()
	l, err := eventlog.Open(data, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), stream)
	if err == nil {
		var r cluster.FanoutRange
		if r, err = cluster.VerifyFanout(context.Background(), l, st); err == nil && r.First == 1 {
			return l, st, r
		}
		err = fmt.Errorf("it holds %+v: %v", r, err)
	}
	l.Close()
	t.Fatalf("the fan-out's stream %s against %s: %v", stream, data, err)
	return nil, nil, cluster.FanoutRange{}
}

// logHead opens a stopped daemon's log read-only and returns its head.
func logHead(t *testing.T, data string) uint64 {
	t.Helper()
	l, err := eventlog.Open(data, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Head()
}

// TestPublishFlags checks that bad --publish settings stop pegasusd before
// it starts, from flags and from the environment.
func TestPublishFlags(t *testing.T) {
	var stderr bytes.Buffer
	code := run([]string{"pegasusd", "serve", "--data-dir", t.TempDir(), "--publish", "nats://127.0.0.1:1", "--publish-replicas", "9"}, nil, io.Discard, &stderr)
	if code != exitError || !strings.Contains(stderr.String(), "--publish") || !strings.Contains(stderr.String(), "replicas 9") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	t.Setenv("PEGASUS_PUBLISH", "nats://127.0.0.1:1")
	t.Setenv("PEGASUS_PUBLISH_STREAM", "a.b")
	stderr.Reset()
	if code := run([]string{"pegasusd", "serve", "--data-dir", t.TempDir()}, nil, io.Discard, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), `stream name "a.b"`) {
		t.Fatalf("PEGASUS_PUBLISH_STREAM: exit %d: %s", code, stderr.String())
	}
}
