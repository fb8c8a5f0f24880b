package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
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

	for cycle := range 4 {
		p := startProc(t, bin, data, flags...)
		td := &testDaemon{t: t, url: p.url}
		for i := range 3 { // dispatch tasks: swarm.task.<id>.created
			mustStatus(t, td.as("client", "POST", "/api/v1/tasks", fmt.Sprintf(`{"title":"job %d.%d"}`, cycle, i)), 201)
		}
		acked := make(chan string)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(1)
			sub := rand.New(rand.NewPCG(seed, uint64(cycle*10+i)))
			go func() { defer wg.Done(); submitter(p.url, inputs, sub, acked, stop) }()
		}
		down := -1
		if cycle%2 == 1 {
			down = rng.IntN(3)
			nats.Stop(down)
		}
		for range 2 + rng.IntN(8) {
			<-acked
		}
		p.kill(t)
		close(stop)
		go func() { wg.Wait(); close(acked) }()
		for range acked {
		}
		if down >= 0 {
			nats.Restart(down)
			nats.WaitReady(3)
			nats.WaitStreamCurrent(js, "EVENTS")
		}
	}
	p := startProc(t, bin, data, flags...)
	p.stop(t)
	head := logHead(t, data)

	// The drain of the clean stop committed events after the outbox
	// stopped: the next start publishes them.
	p = startProc(t, bin, data, flags...)
	waitStreamHolds(t, js, "EVENTS", head)
	p.kill(t)

	l, err := eventlog.Open(data, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := js.Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	r, err := cluster.VerifyFanout(context.Background(), l, st)
	if err != nil {
		t.Fatal(err)
	}
	if r.First != 1 || r.Last < head {
		t.Fatalf("the stream holds events %d to %d; the log had 1 to %d before the last start", r.First, r.Last, head)
	}
	// Both families of subjects are there.
	for _, subj := range []string{"swarm.task.*.created", "pegasus.task.*.TASK_CREATED", "pegasus.system.system.SYSTEM_STARTED"} {
		info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		if len(info.State.Subjects) == 0 {
			t.Errorf("no message on %s", subj)
		}
	}
	t.Logf("%d events published exactly once over 4 kills and 2 NATS server stops", r.Last)
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

// waitStreamHolds reads the stream from its last message on until a
// message holds log sequence seq or later.
func waitStreamHolds(t *testing.T, js jetstream.JetStream, stream string, seq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverLastPolicy})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(testTimeout))
		if err != nil {
			t.Fatalf("waiting for event %d on %s: %v", seq, stream, err)
		}
		if s, _ := strconv.ParseUint(m.Headers().Get(cluster.HeaderSeq), 10, 64); s >= seq {
			return
		}
	}
}
