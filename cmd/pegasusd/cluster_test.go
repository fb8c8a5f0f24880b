package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestClusterCrash runs pegasusd --cluster against an in-process cluster
// of three JetStream servers (the log's stream gets three replicas; the
// daemon holds the leases of all 16 partitions, and takes them back at
// once after a kill, under the same --cluster-node), under concurrent
// submissions, and kills it with SIGKILL three times at
// random points, with one NATS server stopped during the second run. A
// last run finishes every task and stops cleanly. Then: every
// acknowledged task is in the node's copy exactly once and terminal, the
// copy verifies and is the stream's events in order (cluster.VerifyCopy),
// and a node started from an empty data directory rebuilds the same copy
// from the stream alone.
func TestClusterCrash(t *testing.T) {
	seed, rng := crashRun(t)
	nats := natstest.Start(t, 3)
	js := nats.JetStream()
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	flags := []string{"--cluster", nats.URL(), "--cluster-node", "n1"}
	inputs := []string{"what time is it?", "hello", "remember the door code is 42"}

	ackedAll := map[string]bool{}
	for cycle := range 3 {
		p := startProc(t, bin, data, flags...)
		if cycle == 0 && !strings.Contains(p.output(), "replicas=3") {
			t.Fatalf("the stream was not created with 3 replicas:\n%s", p.output())
		}
		down := -1
		if cycle == 1 {
			down = rng.IntN(3)
			nats.Stop(down)
		}
		killUnderLoad(t, p, inputs, seed, cycle, 3, 1+rng.IntN(10), ackedAll)
		if down >= 0 {
			nats.Restart(down)
			nats.WaitReady(3)
			nats.WaitStreamCurrent(js, "PEGASUS_LOG")
		}
	}
	p := startProc(t, bin, data, flags...)
	finishAll(t, p, ackedAll)
	p.stop(t)
	checkLog(t, data, ackedAll)
	head := checkCopy(t, data, js)

	// A new node: its copy comes from the stream alone.
	fresh := filepath.Join(t.TempDir(), "fresh")
	p = startProc(t, bin, fresh, "--cluster", nats.URL())
	p.stop(t)
	checkLog(t, fresh, ackedAll)
	if got := checkCopy(t, fresh, js); got < head {
		t.Fatalf("the new node's copy ends at %d, the first node's at %d", got, head)
	}
	t.Logf("%d acknowledged tasks over 3 kills and a NATS server stop; %d events in the stream", len(ackedAll), head)
}

// checkCopy opens a stopped node's copy read-only and checks it against
// the log's stream: it holds the stream's events, in order, to the
// stream's end (cluster.VerifyCopy). It returns the copy's head.
func checkCopy(t *testing.T, data string, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	l, err := eventlog.Open(data, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := js.Stream(ctx, "PEGASUS_LOG")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	covered, err := cluster.VerifyCopy(ctx, l, st)
	if err != nil || covered != info.State.LastSeq {
		if m, gerr := st.GetMsg(ctx, info.State.LastSeq); gerr == nil {
			t.Logf("the stream's last message: %s %s", m.Subject, m.Data)
		}
		t.Fatalf("the copy %s holds the stream to %d of %d: %v", data, covered, info.State.LastSeq, err)
	}
	if info.Config.Replicas != 3 {
		t.Errorf("the stream has %d replicas", info.Config.Replicas)
	}
	return l.Head()
}

// TestClusterFlags checks that --cluster settings that cannot work stop
// pegasusd before it starts, from flags and from the environment.
func TestClusterFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-replicas", "9"}, "--cluster-replicas 9"},
		{[]string{"--cluster-stream", "a.b"}, `stream name "a.b"`},
		{[]string{"--retain-finished", "1h"}, "--retain-finished does not work with --cluster"},
		{[]string{"--accept-data-loss"}, "--accept-data-loss does not apply with --cluster"},
	} {
		var stderr bytes.Buffer
		args := append([]string{"pegasusd", "serve", "--data-dir", t.TempDir(), "--cluster", "nats://127.0.0.1:1"}, c.args...)
		if code := run(args, nil, io.Discard, &stderr); code != exitError || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d: %s", c.args, code, stderr.String())
		}
	}
	t.Setenv("PEGASUS_CLUSTER", "nats://127.0.0.1:1")
	t.Setenv("PEGASUS_CLUSTER_REPLICAS", "-1")
	var stderr bytes.Buffer
	if code := run([]string{"pegasusd", "serve", "--data-dir", t.TempDir()}, nil, io.Discard, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "--cluster-replicas -1") {
		t.Fatalf("PEGASUS_CLUSTER_REPLICAS: exit %d: %s", code, stderr.String())
	}
}
