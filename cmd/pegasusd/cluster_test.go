package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/pegasus-engine/pegasus/api"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// TestClusterCrash runs pegasusd --cluster --publish against an in-process cluster
// of three JetStream servers (the log's stream gets three replicas; the
// daemon holds the leases of all 16 partitions, and takes them back at
// once after a kill, under the same --cluster-node), under concurrent
// submissions, and kills it with SIGKILL three times at
// random points, with one NATS server stopped during the second run. A
// last run finishes every task and stops cleanly. Then: every
// acknowledged task is in the node's copy exactly once and terminal, the
// copy verifies and is the stream's events in order (cluster.VerifyCopy),
// the fan-out's stream holds each of its events once, in order
// (checkFanout), and a node started from an empty data directory rebuilds the same copy
// from the stream alone.
func TestClusterCrash(t *testing.T) {
	seed, rng := crashRun(t)
	nats := natstest.Start(t, 3)
	js := nats.JetStream()
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	flags := []string{"--cluster", nats.URL(), "--cluster-node", "n1", "--publish", nats.URL(), "--publish-stream", "EVENTS", "--publish-replicas", "3"}
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
	head := checkCopy(t, data, js)
	fanned := checkFanout(t, bin, data, flags, js, "EVENTS", agentSubjects...) // before checkLog, which keeps the directory open
	checkLog(t, data, ackedAll)

	// A new node: its copy comes from the stream alone.
	fresh := filepath.Join(t.TempDir(), "fresh")
	p = startProc(t, bin, fresh, "--cluster", nats.URL())
	p.stop(t)
	checkLog(t, fresh, ackedAll)
	if got := checkCopy(t, fresh, js); got < head {
		t.Fatalf("the new node's copy ends at %d, the first node's at %d", got, head)
	}
	t.Logf("%d acknowledged tasks over 3 kills and a NATS server stop; %d events in the stream, %d on the fan-out's subjects exactly once",
		len(ackedAll), head, fanned.Last)
}

// lastLines returns the last n lines of a daemon's output that are not
// debug lines.
func lastLines(out string, n int) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, "level=DEBUG") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep[max(0, len(keep)-n):], "\n")
}

// agentSubjects are fan-out subjects the cluster tests' agent tasks and
// daemons publish on.
var agentSubjects = []string{"pegasus.task.*.TASK_CREATED", "pegasus.task.*.TASK_COMPLETED", "pegasus.system.system.SYSTEM_STARTED",
	"pegasus.system.partition-0.PARTITION_OWNED"}

// logStream returns the clustered log's stream and its state now.
func logStream(ctx context.Context, t *testing.T, js jetstream.JetStream) (jetstream.Stream, *jetstream.StreamInfo) {
	t.Helper()
	st, err := js.Stream(ctx, "PEGASUS_LOG")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st, info
}

// auditTimeout bounds an audit that walks the whole stream a message at
// a time (the partition test's streams hold tens of thousands).
const auditTimeout = 10 * time.Minute

// eachLogMessage calls fn with every message of the log's stream (info
// its state) and the events it holds (cluster.MessageEvents).
func eachLogMessage(ctx context.Context, t *testing.T, st jetstream.Stream, info *jetstream.StreamInfo, fn func(m *jetstream.RawStreamMsg, evs []eventlog.Event)) {
	t.Helper()
	for sseq := info.State.FirstSeq; sseq <= info.State.LastSeq; sseq++ {
		m, err := st.GetMsg(ctx, sseq)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := cluster.MessageEvents(m.Header, m.Data, sseq)
		if err != nil {
			t.Fatalf("stream message %d: %v", sseq, err)
		}
		fn(m, evs)
	}
}

// checkCopy opens a stopped node's copy read-only and checks it against
// the log's stream: it holds the stream's events, in order, to the
// stream's end (cluster.VerifyCopy). It returns the copy's head.
func checkCopy(t *testing.T, data string, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	l, err := eventlog.Open(data, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, info := logStream(ctx, t, js)
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
		{[]string{"--cluster-node", "a b"}, `--cluster-node: cluster: invalid options: node name "a b"`},
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

var failoverCycles = flag.Int("failover-cycles", 1, "owners killed in turn in TestClusterFailover")

// load submits tasks to running daemons from a few goroutines each and
// collects the acknowledged ids, until stopped.
type load struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked map[string]bool
	n     chan struct{} // one value per acknowledgement
}

func startLoad(seed uint64, cycle int, inputs []string, urls ...string) *load {
	ld := &load{stop: make(chan struct{}), acked: map[string]bool{}, n: make(chan struct{}, 1<<16)}
	for i, u := range urls {
		for j := range 2 {
			acked := make(chan string)
			ld.wg.Add(2)
			go func() {
				defer ld.wg.Done()
				defer close(acked)
				submitter(u, inputs, rand.New(rand.NewPCG(seed, uint64(cycle*100+i*10+j))), acked, ld.stop)
			}()
			go func() {
				defer ld.wg.Done()
				for id := range acked {
					ld.mu.Lock()
					ld.acked[id] = true
					ld.mu.Unlock()
					ld.n <- struct{}{}
				}
			}()
		}
	}
	return ld
}

// wait waits for n more acknowledgements.
func (ld *load) wait(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(testTimeout)
	for range n {
		select {
		case <-ld.n:
		case <-timeout:
			t.Fatalf("fewer than %d acknowledged submissions within %v", n, testTimeout)
		}
	}
}

// end stops the submitters and adds what they acknowledged to all.
func (ld *load) end(all map[string]bool) {
	close(ld.stop)
	ld.wg.Wait()
	for id := range ld.acked {
		all[id] = true
	}
}

// waitLeases waits until node holds every partition's lease, watching the
// lease bucket.
func waitLeases(t *testing.T, js jetstream.JetStream, node string, parts int) {
	t.Helper()
	waitOwners(t, js, map[string]int{node: parts})
}

// waitOwners waits until each node holds as many partitions' leases as
// want says. It polls the lease bucket (leaseOwners, each read bounded by
// 2 s) rather than watching it: a test may have just stopped the NATS
// server that led the bucket's stream, and a watch created then can wait
// out its request's timeout while the stream elects a leader.
func waitOwners(t *testing.T, js jetstream.JetStream, want map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var got map[string]int
	for {
		c, cancelC := context.WithTimeout(ctx, 2*time.Second)
		kv, err := js.KeyValue(c, "PEGASUS_LEASES")
		cancelC()
		if err == nil {
			if got = leaseOwners(ctx, kv); got != nil {
				done := true
				for node, k := range want {
					done = done && got[node] == k
				}
				if done {
					return
				}
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the partitions' owners never were %v within %v: last read %v", want, testTimeout, got)
		}
	}
}

// TestClusterFailover runs two pegasusd --cluster --publish daemons, A and
// B, on an in-process cluster of three JetStream servers, with
// submissions to both throughout (any daemon takes them; the one holding
// the task's partition runs it):
//   - A, started first, holds all 16 partitions and runs the fan-out; once
//     B is up, A gives 8 back and B takes them (balancing). A is paused
//     with SIGSTOP past its leases' TTL; B takes every partition over, and
//     the fan-out, and a NATS server is stopped. Resumed with SIGCONT, A
//     finds its leases taken, its appends to them refused (fenced), and
//     stops with an error.
//   - A starts again (the partitions are shared again, 8 and 8), a NATS
//     server stops under load and B is killed with SIGKILL while it is
//     down: A takes B's partitions after the TTL, then the server comes
//     back. With -failover-cycles N (default 1) this repeats N times, the
//     killed daemon restarting, the other one killed next and another
//     server stopped; the last owner finishes every task, from its own
//     copy.
//
// Afterwards every acknowledged task exists once and is terminal, nothing
// was completed twice, both copies match the stream, and the fan-out's
// stream holds every event of the log once, in order (checkFanout).
func TestClusterFailover(t *testing.T) {
	seed, rng := crashRun(t)
	nats := natstest.Start(t, 3)
	js := nats.JetStream()
	bin := buildDaemon(t)
	dataA, dataB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	flags := func(node string) []string {
		// 3 s: a renewal waits out the lease bucket's leader election
		// when a NATS server stops (2 s and a loaded machine: the survivor's
		// lease expired meanwhile, and the resumed paused daemon took it).
		return []string{"--cluster", nats.URL(), "--cluster-node", node, "--cluster-lease-ttl", "3s", "--log-level", "debug",
			"--publish", nats.URL(), "--publish-stream", "EVENTS", "--publish-replicas", "3"}
	}
	inputs := []string{"what time is it?", "hello", "remember the door code is 42"}
	all := map[string]bool{}

	a := startProc(t, bin, dataA, flags("a")...)
	procs := map[string]*proc{"a": a}
	t.Cleanup(func() {
		if t.Failed() {
			for name, p := range procs {
				t.Logf("daemon %s (its last run):\n%s", name, lastLines(p.output(), 40))
			}
		}
	})
	waitLeases(t, js, "a", 16)
	b := startProc(t, bin, dataB, flags("b")...)
	procs["b"] = b
	waitOwners(t, js, map[string]int{"a": 8, "b": 8})
	ld := startLoad(seed, 0, inputs, a.url, b.url)
	ld.wait(t, 4)
	if err := a.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, js, "b", 16)
	down := rng.IntN(3)
	nats.Stop(down)
	ld.wait(t, 2) // B takes submissions meanwhile
	if err := a.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	err := a.Cmd.Wait()
	<-a.Done()
	ld.end(all)
	if err == nil || !strings.Contains(a.output(), "lost the lease on a partition") {
		t.Fatalf("the paused owner, resumed: exit %v\n%s", err, a.output())
	}
	t.Logf("the resumed stale owner: %d appends fenced", strings.Count(a.output(), "cluster: another node took over this partition's lease"))
	nats.Restart(down)
	nats.WaitReady(3)
	nats.WaitStreamCurrent(js, "PEGASUS_LOG")

	data := map[string]string{"a": dataA, "b": dataB}
	owner, other := "b", "a"
	for cycle := range *failoverCycles {
		procs[other] = startProc(t, bin, data[other], flags(other)...)
		waitOwners(t, js, map[string]int{owner: 8, other: 8})
		ld = startLoad(seed, cycle+1, inputs, procs[owner].url, procs[other].url)
		ld.wait(t, 2+rng.IntN(6))
		// Both kinds in turn: a NATS server (another one each cycle) stops
		// under load, then the owner is killed while it is down.
		down := (down + 1 + cycle) % 3
		nats.Stop(down)
		ld.wait(t, 1)
		procs[owner].kill(t)
		ld.end(all)
		waitLeases(t, js, other, 16)
		nats.Restart(down)
		nats.WaitReady(3)
		nats.WaitStreamCurrent(js, "PEGASUS_LOG")
		owner, other = other, owner
	}
	finishAll(t, procs[owner], all)
	procs[owner].stop(t)
	checkCopy(t, data[owner], js)
	r := checkFanout(t, bin, data[owner], flags(owner), js, "EVENTS", agentSubjects...) // before checkLog, which keeps the directory open
	checkLog(t, data[owner], all)
	t.Logf("%d acknowledged tasks over a paused owner and %d killed owners, each with a NATS server stopped; %d events on the fan-out's subjects exactly once",
		len(all), *failoverCycles, r.Last)
}

// checkOwnersDecided reads the whole stream and requires every broker
// decision on a task (assignment, time-out, retry, dead letter) to have
// been appended by the node that owned the task's partition then (by
// the partition's last PARTITION_OWNED before it). It returns how many
// it checked, and requires decisions by both daemons.
func checkOwnersDecided(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	st, info := logStream(ctx, t, js)
	parts, err := strconv.Atoi(info.Config.Metadata[cluster.MetaPartitions])
	if err != nil || parts == 0 {
		t.Fatalf("the stream records %q partitions", info.Config.Metadata[cluster.MetaPartitions])
	}
	owner := map[int]string{}
	by := map[string]int{}
	n := 0
	eachLogMessage(ctx, t, st, info, func(m *jetstream.RawStreamMsg, evs []eventlog.Event) {
		for _, ev := range evs {
			p := cluster.PartitionOf(ev.Stream, parts)
			switch ev.Type {
			case cluster.PartitionOwned:
				var o cluster.Owner
				if err := json.Unmarshal(ev.Body, &o); err != nil {
					t.Fatal(err)
				}
				owner[p] = o.Node
			case string(fsm.DispatchAssigned), string(fsm.DispatchTimedOut), string(fsm.DispatchRetried), string(fsm.DispatchDeadLettered):
				node := m.Header.Get(cluster.HeaderNode)
				if node != owner[p] {
					t.Errorf("stream message %d: %s of task %s (partition %d) appended by %q, the partition's owner was %q",
						m.Sequence, ev.Type, ev.Stream, p, node, owner[p])
				}
				by[node]++
				n++
			}
		}
	})
	if len(by) < 2 {
		t.Errorf("broker decisions by %v: want both daemons deciding for their partitions", by)
	}
	return n
}

// TestClusterBroker runs the broker on two pegasusd --cluster daemons
// sharing the partitions (8 each). Dispatch tasks are created on A; an
// external worker registers with and polls B only, and the owners of
// every partition assign it their tasks (its requests reach A as
// sightings); silent tasks (1 s deadline, no retry) are timed out and
// dead-lettered by the owners of their partitions; tasks asking for
// "plan" run on the built-in worker of their partition's owner, as
// pegasus.task children. Every task ends once: one DISPATCH_COMPLETED or
// one DISPATCH_DEAD_LETTERED each, the copy matches the stream, and every
// broker decision was appended by its partition's owner.
func TestClusterBroker(t *testing.T) {
	nats := natstest.Start(t, 3)
	js := nats.JetStream()
	bin := buildDaemon(t)
	dataA, dataB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	flags := func(node string) []string {
		return []string{"--cluster", nats.URL(), "--cluster-node", node, "--cluster-lease-ttl", "2s"}
	}
	a := startProc(t, bin, dataA, flags("a")...)
	waitLeases(t, js, "a", 16)
	b := startProc(t, bin, dataB, flags("b")...)
	waitOwners(t, js, map[string]int{"a": 8, "b": 8})
	tdA, tdB := &testDaemon{t: t, url: a.url}, &testDaemon{t: t, url: b.url}

	kinds := map[string]string{} // task id -> "job", "silent" or "plan"
	for _, id := range checkKeysAcrossDaemons(t, tdA, tdB) {
		kinds[id] = "job"
	}
	for i := range 12 {
		kind, body := "job", `{"title":"job"}`
		switch i % 4 {
		case 1:
			kind, body = "silent", `{"title":"silent","priority":10,"timeout_seconds":1,"max_retries":0}`
		case 2:
			kind, body = "plan", `{"title":"plan a trip","required_capabilities":["plan"]}`
		}
		kinds[dtask(t, tdA.as("client", "POST", "/api/v1/tasks", body)).TaskID] = kind
	}
	mustStatus(t, tdB.as("w", "PUT", "/api/v1/agents/w", `{"max_tasks":4}`), 200)
	finished := func() bool {
		n := 0
		for _, j := range tdA.dispatchTasks("client", "limit=1000") {
			if j.Status == fsm.StateCompleted || j.DeadLettered {
				n++
			}
		}
		return n == len(kinds)
	}
	deadline := time.Now().Add(testTimeout)
	for !finished() && time.Now().Before(deadline) {
		reported := false
		for _, j := range tdB.poll("w") {
			if kinds[j.TaskID] == "job" {
				mustStatus(t, tdB.as("w", "POST", "/api/v1/tasks/"+j.TaskID+"/complete", `{"result":{"ok":true}}`), 200)
				reported = true
			}
		}
		if !reported {
			// Only silent tasks are assigned to w: their deadlines
			// fire on the owners' clocks (the long poll answers then).
			tdA.as("client", "GET", "/api/v1/tasks?status=timed_out&wait=1s", "")
		}
	}
	if !finished() {
		var st []string
		for _, j := range tdA.dispatchTasks("client", "limit=1000") {
			st = append(st, fmt.Sprintf("%s %s: %s to %q (dead letter %v)", kinds[j.TaskID], j.TaskID, j.Status, j.AssignedAgent, j.DeadLettered))
		}
		t.Fatalf("the dispatch tasks never all finished:\n%s\nA:\n%s\nB:\n%s", strings.Join(st, "\n"), lastLines(a.output(), 30), lastLines(b.output(), 30))
	}
	a.stop(t)
	b.stop(t)
	checkCopy(t, dataB, js) // B stopped last: its copy holds the whole stream
	if n := checkOwnersDecided(t, js); n < len(kinds) {
		t.Errorf("%d broker decisions in the stream, want at least one assignment per task (%d)", n, len(kinds))
	}
	l, err := eventlog.Open(dataB, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ends := map[string][]string{}
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		if ev := it.Event(); kinds[ev.Stream] != "" && (ev.Type == string(fsm.DispatchCompleted) || ev.Type == string(fsm.DispatchDeadLettered)) {
			ends[ev.Stream] = append(ends[ev.Stream], ev.Type)
		}
	}
	for id, kind := range kinds {
		want := string(fsm.DispatchCompleted)
		if kind == "silent" {
			want = string(fsm.DispatchDeadLettered)
		}
		if len(ends[id]) != 1 || ends[id][0] != want {
			t.Errorf("%s task %s ended with %v, want one %s", kind, id, ends[id], want)
		}
	}
}

// checkKeysAcrossDaemons: an Idempotency-Key is one binding for the whole
// cluster. A request retried on the other daemon, sequentially or racing
// the first, is answered with the first's task and creates nothing; the
// same key with another body is a 409 on either daemon. It returns the
// dispatch tasks it created.
func checkKeysAcrossDaemons(t *testing.T, a, b *testDaemon) []string {
	t.Helper()
	create := keyedCall{method: "POST", path: "/v1/tasks", body: `{"input":"hello"}`, key: "across-1", status: 201}
	id := a.keyedTask(create)
	again := create
	again.replayed = true
	if got := b.keyedTask(again); got != id {
		t.Fatalf("the retry on the other daemon created task %s, the first was %s", got, id)
	}
	other := create
	other.body, other.status, other.code = `{"input":"bye"}`, 409, api.CodeKeyReused
	b.keyed(other)
	a.keyed(other)

	job := `{"title":"job"}`
	r := b.do("POST", "/api/v1/tasks", job, "X-Agent-ID", "client", "Idempotency-Key", "across-job")
	mustStatus(t, r, 201)
	jobID := dtask(t, r).TaskID
	r = a.do("POST", "/api/v1/tasks", job, "X-Agent-ID", "client", "Idempotency-Key", "across-job")
	mustStatus(t, r, 201)
	if got := dtask(t, r).TaskID; got != jobID || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the broker create retried on the other daemon: task %s (replayed %q), the first was %s", got, r.header.Get("Idempotent-Replayed"), jobID)
	}

	// Keys sent to both daemons at once.
	const keys = 10
	ids := make([][2]string, keys)
	var wg sync.WaitGroup
	for k := range keys {
		for i, td := range []*testDaemon{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, id := postKeyed(context.Background(), td.url+"/v1/tasks", fmt.Sprintf(`{"input":"race %d"}`, k), fmt.Sprintf("race-%d", k))
				if status != 201 {
					t.Errorf("key race-%d on daemon %d: status %d", k, i, status)
				}
				ids[k][i] = id
			}()
		}
	}
	wg.Wait()
	for k, pair := range ids {
		if pair[0] == "" || pair[0] != pair[1] {
			t.Fatalf("key race-%d made tasks %q on a and %q on b", k, pair[0], pair[1])
		}
	}
	return []string{jobID}
}
