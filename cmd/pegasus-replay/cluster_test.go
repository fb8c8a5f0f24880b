package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestVerifyCluster: verify --cluster checks a node's copy of a clustered
// log against its stream: clean (and the copy behind the stream, after
// another node appended, is not a problem), then, after an event written
// into the copy directly, a failure with exit code 1.
func TestVerifyCluster(t *testing.T) {
	nc := natstest.Start(t, 1)
	ctx := context.Background()
	dir, other := t.TempDir(), t.TempDir()
	node := func(dir string) (*eventlog.Log, *cluster.ReplicatedLog) {
		l, err := eventlog.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		rl, err := cluster.OpenReplicated(ctx, l, cluster.LogOptions{URL: nc.URL()})
		if err != nil {
			t.Fatal(err)
		}
		return l, rl
	}
	l, rl := node(dir)
	for i := range 5 {
		if _, err := rl.Append(ctx, "$notes", eventlog.Exactly(uint64(i)), eventlog.Event{Type: "NOTE", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	rl.Close()
	l.Close()
	r := runCLI(t, termOpts{}, "-d", dir, "--cluster", nc.URL(), "verify")
	if r.code != 0 || !strings.Contains(r.stdout, "cluster: the copy is stream PEGASUS_LOG's messages to 5, in order, all of them") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	l2, rl2 := node(other)
	if _, err := rl2.Append(ctx, "$notes-2", eventlog.NoStream, eventlog.Event{Type: "NOTE"}); err != nil {
		t.Fatal(err)
	}
	rl2.Close()
	l2.Close()
	r = runCLI(t, termOpts{}, "verify", "-d", dir, "--cluster", nc.URL(), "--json")
	var j struct {
		OK      bool        `json:"ok"`
		Cluster clusterCopy `json:"cluster"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || r.code != 0 || !j.OK || j.Cluster.Covered != 5 || j.Cluster.Last != 6 {
		t.Fatalf("a copy behind the stream: exit %d, %+v (%v)\n%s", r.code, j, err, r.stderr)
	}

	l, err := eventlog.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "$notes", eventlog.Any, eventlog.Event{Type: "NOTE", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	r = runCLI(t, termOpts{}, "-d", dir, "--cluster", nc.URL(), "verify")
	if r.code != 1 || !strings.Contains(r.stdout, "cluster: FAILED") || !strings.Contains(r.stdout, "does not match the stream") {
		t.Fatalf("a copy written around the cluster: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, termOpts{}, "-d", dir, "--cluster", "nats://127.0.0.1:1", "verify"); r.code == 0 || !strings.Contains(r.stderr, "--cluster") {
		t.Fatalf("an unreachable cluster: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
