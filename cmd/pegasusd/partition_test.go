package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/daemontest"
	"github.com/pegasus-engine/pegasus/server"
)

var partitionCycles = flag.Int("partition-cycles", -1,
	"network partition cycles in TestClusterPartitions (-1: a short run of 3 when root with ip and nft, else skipped; 0: skipped)")

// partitionToken is the daemons' --token: they listen beyond loopback.
const partitionToken = "partition-test-token"

// partitionTTL is the daemons' lease TTL in TestClusterPartitions: faults
// last from half of it to three times it.
const partitionTTL = 3 * time.Second

// TestClusterPartitions is a network-partition test (in the manner of
// Jepsen): three nats-server processes (one cluster, JetStream,
// sync_interval always, the log's stream with 3 replicas) and two
// pegasusd --cluster --publish daemons, each in its own network namespace
// on a private bridge (netLab), under keyed submissions from clients that
// retry the same Idempotency-Key on a timeout, a 5xx or a broken
// connection (half the time against the other daemon), readers, a broker
// client creating dispatch tasks with keys and two workers polling and
// completing them. Each cycle applies one fault (partitionFaults), holds
// it, heals it, restarts a daemon that stopped (a daemon that lost a
// lease exits, as a supervisor would restart it) and waits until the
// daemons share the partitions again and a submission is acknowledged.
// Then everything is healed, every task finishes, the daemons stop, and
// the audit runs (partitionRun.audit). -partition-cycles N sets the
// cycles, -crash-seed the seed.
func TestClusterPartitions(t *testing.T) {
	cycles := *partitionCycles
	if cycles == 0 {
		t.Skip("-partition-cycles 0")
	}
	if why := netLabMissing(); why != "" {
		t.Skipf("needs network namespaces and nftables: %s", why)
	}
	if cycles < 0 {
		cycles = 3
	}
	seed, rng := crashRun(t)
	r := newPartitionRun(t, seed)
	r.startWorkload()
	for cycle := range cycles {
		f := partitionFaults[rng.IntN(len(partitionFaults))]
		hold := partitionTTL/2 + time.Duration(rng.Int64N(int64(partitionTTL*5/2)))
		began := time.Now()
		f.apply(r, rng, hold)
		r.lab.heal()
		r.rejoin()
		r.waitProgress()
		t.Logf("cycle %d: %s, %v; %d submissions acknowledged, %d daemon restarts so far (%v)",
			cycle+1, r.lastFault, hold.Round(100*time.Millisecond), r.acks.Load(), r.restarts, time.Since(began).Round(100*time.Millisecond))
	}
	r.finish()
	res := r.audit()
	t.Logf("%d cycles: %s", cycles, res)
}

// partitionRun is one TestClusterPartitions run: the lab, the servers,
// the daemons, the workload and its history.
type partitionRun struct {
	t            *testing.T
	seed         uint64
	lab          *netLab
	bin          string
	natsURL      string
	js           jetstream.JetStream
	daemons      []*labDaemon
	lastFault    string
	restarts     int
	failedStarts int // restarts that exited before listening
	lostLease    int

	stop  chan struct{}
	wg    sync.WaitGroup
	acks  atomic.Int64
	ackCh chan struct{}
	hist  *history
	start time.Time

	mu           sync.Mutex
	acked        map[string]string // task id -> key
	dispatch     map[string]string // dispatch task id -> key
	completions  atomic.Int64
	retries      atomic.Int64 // keyed posts sent again after no answer
	crossRetries atomic.Int64 // of which to the other daemon
}

// labDaemon is a pegasusd --cluster in a namespace of the lab, on a fixed
// address, so that its clients reach it again after a restart.
type labDaemon struct {
	name, host, data, url string
	p                     *proc
}

func newPartitionRun(t *testing.T, seed uint64) *partitionRun {
	r := &partitionRun{t: t, seed: seed, stop: make(chan struct{}), ackCh: make(chan struct{}, 1<<16),
		acked: map[string]string{}, dispatch: map[string]string{}, start: time.Now()}
	r.hist = &history{start: r.start}
	r.lab = newNetLab(t, "n1", "n2", "n3", "d1", "d2")
	natsBin := buildNATSServer(t)
	r.bin = buildDaemon(t)
	var urls, routes []string
	for _, n := range []string{"n1", "n2", "n3"} {
		urls = append(urls, "nats://"+r.lab.hosts[n].ip+":4222")
		routes = append(routes, "nats://"+r.lab.hosts[n].ip+":6222")
	}
	r.natsURL = strings.Join(urls, ",")
	for _, n := range []string{"n1", "n2", "n3"} {
		r.startNATS(natsBin, n, routes)
	}
	r.js = r.connect()
	for i, name := range []string{"d1", "d2"} {
		d := &labDaemon{name: name, host: name, data: filepath.Join(t.TempDir(), name),
			url: "http://" + r.lab.hosts[name].ip + ":7070"}
		r.daemons = append(r.daemons, d)
		r.startDaemon(d)
		if i == 0 {
			waitLeases(t, r.js, "d1", 16)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, d := range r.daemons {
				if d.p != nil {
					t.Logf("daemon %s (its last run):\n%s", d.name, lastLines(d.p.output(), 40))
				}
			}
		}
	})
	waitOwners(t, r.js, map[string]int{"d1": 8, "d2": 8})
	return r
}

// buildNATSServer builds nats-server from the module this repository
// requires (as docs/cluster.md does).
func buildNATSServer(t *testing.T) string {
	t.Helper()
	return goBuild(t, "nats-server", "github.com/nats-io/nats-server/v2")
}

// startNATS runs nats-server in host's namespace: JetStream with an fsync
// per write, routed to the others. It is killed when the test ends.
func (r *partitionRun) startNATS(bin, host string, routes []string) {
	t := r.t
	dir := t.TempDir()
	conf := fmt.Sprintf(`server_name: %s
listen: "%s:4222"
jetstream { store_dir: "%s", sync_interval: always, max_memory_store: 256MB, max_file_store: 1GB }
cluster {
  name: pegasus
  listen: "%s:6222"
  routes: [%s]
}
`, host, r.lab.hosts[host].ip, filepath.Join(dir, "js"), r.lab.hosts[host].ip, strings.Join(routes, ", "))
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	argv := append(r.lab.wrap(host), bin, "-c", path)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("nats-server %s:\n%s", host, lastLines(string(b), 20))
			}
		}
	})
}

// connect connects the test's JetStream client (from the root namespace,
// over the bridge) and waits until JetStream answers.
func (r *partitionRun) connect() jetstream.JetStream {
	t := r.t
	nc, err := nats.Connect(r.natsURL, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return js
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream did not answer within a minute: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition with a deadline
	}
}

func (r *partitionRun) daemonFlags(d *labDaemon) []string {
	return []string{"--addr", r.lab.hosts[d.host].ip + ":7070", "--cluster", r.natsURL, "--cluster-node", d.name,
		"--cluster-lease-ttl", partitionTTL.String(), "--token", partitionToken, "--publish", r.natsURL, "--publish-stream", "EVENTS", "--publish-replicas", "3"}
}

func (r *partitionRun) startDaemon(d *labDaemon) {
	d.p = startProcIn(r.t, r.lab.wrap(d.host), r.bin, d.data, r.daemonFlags(d)...)
	d.p.token = partitionToken
}

// restartDaemon starts d again as a supervisor would: a start that fails
// (the daemon exits before listening, for example when JetStream is not
// available yet after a partition) is counted and tried again a second
// later, for up to two minutes.
func (r *partitionRun) restartDaemon(d *labDaemon) {
	t := r.t
	t.Helper()
	r.restarts++
	for deadline := time.Now().Add(2 * time.Minute); ; {
		p, err := launchProc(t, r.lab.wrap(d.host), r.bin, d.data, r.daemonFlags(d)...)
		if err == nil {
			d.p, p.token = p, partitionToken
			return
		}
		r.failedStarts++
		t.Logf("daemon %s did not start; starting it again in a second: %s", d.name, lastLines(err.Error(), 1))
		if !errors.Is(err, daemontest.ErrNotListening) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		<-time.After(time.Second) // a supervisor's restart delay
	}
}

// exited reports whether d's process ended (and reaps it).
func (d *labDaemon) exited() bool {
	select {
	case <-d.p.Done():
		_ = d.p.Cmd.Wait()
		return true
	default:
		return false
	}
}

// rejoin restarts the daemons that stopped (a daemon that lost a lease
// exits with an error) and waits until they share the partitions, 8 and
// 8, and have for a TTL and a second with none of them exiting (a
// renewal that failed during the fault is decided by then: renewed, or
// the lease lost), polling the lease bucket.
func (r *partitionRun) rejoin() {
	t := r.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv, err := r.js.KeyValue(ctx, "PEGASUS_LEASES")
	if err != nil {
		t.Fatal(err)
	}
	var owners map[string]int
	var balanced time.Time
	for ctx.Err() == nil {
		for _, d := range r.daemons {
			if d.exited() {
				balanced = time.Time{}
				out := d.p.output()
				if strings.Contains(out, "lost the lease on a partition") {
					r.lostLease++
				}
				t.Logf("daemon %s exited (%v); restarting it: %s", d.name, d.p.Cmd.ProcessState, strings.TrimSpace(lastLines(out, 2)))
				r.restartDaemon(d)
			}
		}
		owners = leaseOwners(ctx, kv)
		switch {
		case owners["d1"] != 8 || owners["d2"] != 8:
			balanced = time.Time{}
		case balanced.IsZero():
			balanced = time.Now()
		case time.Since(balanced) > partitionTTL+time.Second:
			return
		}
		time.Sleep(200 * time.Millisecond) // polling a condition with a deadline
	}
	t.Fatalf("the daemons did not share the partitions again within 2 minutes: %v", owners)
}

// leaseOwners counts the partitions each node holds, nil if the bucket
// does not answer.
func leaseOwners(ctx context.Context, kv jetstream.KeyValue) map[string]int {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	keys, err := kv.ListKeys(c)
	if err != nil {
		return nil
	}
	n := map[string]int{}
	for k := range keys.Keys() {
		if !strings.HasPrefix(k, "partition.") {
			continue
		}
		if e, err := kv.Get(c, k); err == nil {
			n[string(e.Value())]++
		}
	}
	return n
}

// waitProgress waits until a submission is acknowledged after the heal.
func (r *partitionRun) waitProgress() {
	r.t.Helper()
	for len(r.ackCh) > 0 {
		<-r.ackCh
	}
	select {
	case <-r.ackCh:
	case <-time.After(time.Minute):
		r.t.Fatalf("no submission acknowledged within a minute of healing")
	}
}

// A partitionFault is one cycle's fault: apply holds it for hold (the
// caller heals it).
type partitionFault struct {
	name  string
	apply func(r *partitionRun, rng *rand.Rand, hold time.Duration)
}

var natsHosts = []string{"n1", "n2", "n3"}

// twoOf returns two of the three NATS servers, and the third.
func twoOf(rng *rand.Rand) ([]string, string) {
	i := rng.IntN(3)
	var two []string
	for j, n := range natsHosts {
		if j != i {
			two = append(two, n)
		}
	}
	return two, natsHosts[i]
}

// holdFor waits out a fault's duration: the fault's schedule, not a wait
// for a condition.
func holdFor(d time.Duration) { <-time.After(d) }

// cut is a fault of rules held for the hold: pick chooses the hosts
// (drawing from rng) and says what it did; from's packets to to are
// lost, and to's packets to from too unless oneWay.
func cut(name string, pick func(r *partitionRun, rng *rand.Rand) (what string, from, to []string, oneWay bool)) partitionFault {
	return partitionFault{name, func(r *partitionRun, rng *rand.Rand, hold time.Duration) {
		what, from, to, oneWay := pick(r, rng)
		r.lastFault = what
		if oneWay {
			r.lab.drop(from, to)
		} else {
			r.lab.partition(from, to)
		}
		holdFor(hold)
	}}
}

var partitionFaults = []partitionFault{
	cut("a daemon cut from the NATS majority", func(r *partitionRun, rng *rand.Rand) (string, []string, []string, bool) {
		d := r.daemons[rng.IntN(2)].name
		two, _ := twoOf(rng)
		return fmt.Sprintf("%s cut from %v", d, two), []string{d}, two, false
	}),
	cut("a daemon cut from every NATS server", func(r *partitionRun, rng *rand.Rand) (string, []string, []string, bool) {
		d := r.daemons[rng.IntN(2)].name
		return fmt.Sprintf("%s cut from every NATS server", d), []string{d}, natsHosts, false
	}),
	cut("a NATS server cut from its peers", func(r *partitionRun, rng *rand.Rand) (string, []string, []string, bool) {
		two, one := twoOf(rng)
		return fmt.Sprintf("%s cut from its peers %v", one, two), []string{one}, two, false
	}),
	cut("a daemon cut from its clients", func(r *partitionRun, rng *rand.Rand) (string, []string, []string, bool) {
		d := r.daemons[rng.IntN(2)].name
		return fmt.Sprintf("%s cut from its clients", d), []string{d}, []string{"client"}, false
	}),
	cut("one way between a daemon and the NATS servers", func(r *partitionRun, rng *rand.Rand) (string, []string, []string, bool) {
		d := r.daemons[rng.IntN(2)].name
		if rng.IntN(2) == 0 {
			return fmt.Sprintf("%s's packets to every NATS server lost (one way)", d), []string{d}, natsHosts, true
		}
		return fmt.Sprintf("the NATS servers' packets to %s lost (one way)", d), natsHosts, []string{d}, true
	}),
	cut("one way between NATS servers", func(r *partitionRun, rng *rand.Rand) (string, []string, []string, bool) {
		two, one := twoOf(rng)
		return fmt.Sprintf("%s's packets to its peers %v lost (one way)", one, two), []string{one}, two, true
	}),
	{"a flapping partition", func(r *partitionRun, rng *rand.Rand, hold time.Duration) {
		d := r.daemons[rng.IntN(2)].name
		two, _ := twoOf(rng)
		// The flips take as many draws as fit in the time: from a
		// generator of their own, so that the next cycles' draws do not
		// depend on the machine's speed.
		flip := rand.New(rand.NewPCG(rng.Uint64(), 0))
		flips := 0
		for end := time.Now().Add(2 * hold); time.Now().Before(end); flips++ {
			r.lab.partition([]string{d}, two)
			holdFor(time.Duration(200+flip.IntN(1300)) * time.Millisecond)
			r.lab.heal()
			holdFor(time.Duration(200+flip.IntN(1300)) * time.Millisecond)
		}
		r.lastFault = fmt.Sprintf("%s cut from %v and healed %d times", d, two, flips)
	}},
	{"a paused lease holder during a partition", func(r *partitionRun, rng *rand.Rand, hold time.Duration) {
		d := r.daemons[rng.IntN(2)]
		two, _ := twoOf(rng)
		r.lastFault = fmt.Sprintf("%s cut from %v and paused (SIGSTOP) past the TTL, healed, then resumed (SIGCONT)", d.name, two)
		r.lab.partition([]string{d.name}, two)
		if err := d.p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			r.t.Fatal(err)
		}
		holdFor(hold + 2*partitionTTL)
		r.lab.heal()
		if err := d.p.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
			r.t.Fatal(err)
		}
	}},
}

// --- the workload ---------------------------------------------------------

var partitionInputs = []string{"what time is it?", "hello", "remember the door code is 42"}

// keyRE finds a workload's key in a task's input or a dispatch task's title.
var keyRE = regexp.MustCompile(`pk-[a-z0-9]+-\d+`)

var partitionHTTP = &http.Client{Timeout: 8 * time.Second}

// call sends one request and returns the status (0 when no answer came:
// a timeout or a connection error) and the body.
func call(method, url, body string, header ...string) (int, []byte) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+partitionToken)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := partitionHTTP.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil
	}
	return resp.StatusCode, b
}

// stopped reports whether the workload was asked to stop.
func (r *partitionRun) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

func (r *partitionRun) go_(f func()) {
	r.wg.Add(1)
	go func() { defer r.wg.Done(); f() }()
}

func (r *partitionRun) startWorkload() {
	for c := range 3 {
		rng := rand.New(rand.NewPCG(r.seed, uint64(100+c)))
		r.go_(func() { r.submitter(c, rng) })
	}
	r.go_(func() { r.reader(3, rand.New(rand.NewPCG(r.seed, 200))) })
	r.go_(func() { r.creator(rand.New(rand.NewPCG(r.seed, 300))) })
	for w := range 2 {
		rng := rand.New(rand.NewPCG(r.seed, uint64(400+w)))
		r.go_(func() { r.worker(fmt.Sprintf("w%d", w+1), w, rng) })
	}
}

// keyedPost posts body with an Idempotency-Key until a daemon acknowledges
// it (201), like a client that retries: after a timeout, a 5xx or a
// connection error it sends the same request with the same key again,
// half the time to the other daemon. It returns the acknowledged answer
// and records every attempt in the history (op is nil for the broker's
// creations, which the history does not model). Past the workload's end
// it still retries (the faults are healed then), for a minute at most.
func (r *partitionRun) keyedPost(client int, rng *rand.Rand, path, key, body string, record bool) (int, []byte) {
	d := rng.IntN(2)
	var giveUp time.Time
	for {
		call0 := r.hist.now()
		status, b := call("POST", r.daemons[d].url+path, body, "Idempotency-Key", key, "X-Agent-ID", "client")
		ret := r.hist.now()
		var c server.CreatedJSON
		ok := status == 201 && json.Unmarshal(b, &c) == nil
		if record {
			out := histOutput{unknown: !ok, id: c.TaskID}
			if !ok && status > 0 && status < 500 {
				out = histOutput{failed: fmt.Sprintf("%d %s", status, bytes.TrimSpace(b))}
			}
			r.hist.add(client, histInput{submit: true, key: key, daemon: d}, out, call0, ret)
		}
		if ok || (status > 0 && status < 500) {
			return status, b
		}
		if r.stopped() {
			if giveUp.IsZero() {
				giveUp = time.Now().Add(time.Minute)
			} else if time.Now().After(giveUp) {
				return status, b
			}
		}
		r.retries.Add(1)
		<-time.After(time.Duration(50+rng.IntN(150)) * time.Millisecond) // a client's backoff: a refused connection answers at once
		if rng.IntN(2) == 0 {
			d = 1 - d
			r.crossRetries.Add(1)
		}
	}
}

// submitter submits agent tasks, each under a key of its own that the
// input also carries (so the audit can find every task a key made).
func (r *partitionRun) submitter(client int, rng *rand.Rand) {
	for n := 0; !r.stopped(); n++ {
		key := fmt.Sprintf("pk-s%d-%d", client, n)
		body, _ := json.Marshal(map[string]string{"input": partitionInputs[rng.IntN(len(partitionInputs))] + " " + key})
		status, b := r.keyedPost(client, rng, "/v1/tasks", key, string(body), true)
		var c server.CreatedJSON
		if status != 201 || json.Unmarshal(b, &c) != nil {
			if status != 0 && status < 500 {
				r.t.Errorf("submission %s: %d %s", key, status, b)
			}
			continue
		}
		r.mu.Lock()
		r.acked[c.TaskID] = key
		r.mu.Unlock()
		r.acks.Add(1)
		select {
		case r.ackCh <- struct{}{}:
		default:
		}
		<-time.After(time.Duration(200+rng.IntN(600)) * time.Millisecond) // a client's pace, which bounds the audit's work
	}
}

// reader reads acknowledged tasks from either daemon; an answer joins the
// history, a failed read does not (it changed nothing).
func (r *partitionRun) reader(client int, rng *rand.Rand) {
	for !r.stopped() {
		r.mu.Lock()
		var id, key string
		for id, key = range r.acked { // a random enough pick
			if rng.IntN(4) == 0 {
				break
			}
		}
		r.mu.Unlock()
		if id == "" {
			<-time.After(100 * time.Millisecond) // nothing to read yet
			continue
		}
		<-time.After(time.Duration(20+rng.IntN(40)) * time.Millisecond) // a reader's pace
		d := rng.IntN(2)
		call0 := r.hist.now()
		status, b := call("GET", r.daemons[d].url+"/v1/tasks/"+id, "")
		ret := r.hist.now()
		var tj server.TaskJSON
		switch {
		case status == 200 && json.Unmarshal(b, &tj) == nil:
			r.hist.add(client, histInput{key: key, id: id, daemon: d}, histOutput{id: id, state: tj.State}, call0, ret)
		case status == 404:
			r.hist.add(client, histInput{key: key, id: id, daemon: d}, histOutput{notFound: true}, call0, ret)
		}
	}
}

// creator creates dispatch tasks with keys (in their titles too), which
// the workers complete.
func (r *partitionRun) creator(rng *rand.Rand) {
	for n := 0; !r.stopped(); n++ {
		key := fmt.Sprintf("pk-b-%d", n)
		body := fmt.Sprintf(`{"title":"job %s","timeout_seconds":20,"max_retries":10}`, key)
		status, b := r.keyedPost(-1, rng, "/api/v1/tasks", key, body, false)
		var j server.DispatchJSON
		if status == 201 && json.Unmarshal(b, &j) == nil {
			r.mu.Lock()
			r.dispatch[j.TaskID] = key
			r.mu.Unlock()
		} else if status != 0 && status < 500 {
			r.t.Errorf("dispatch creation %s: %d %s", key, status, b)
		}
		<-time.After(time.Duration(300+rng.IntN(700)) * time.Millisecond) // the creator's pace
	}
}

// worker registers, long-polls either daemon (mostly its own) for its
// assignments and completes them, retrying a report that got no answer;
// it runs until the workload stops and every dispatch task ended.
func (r *partitionRun) worker(name string, home int, rng *rand.Rand) {
	hdr := []string{"X-Agent-ID", name}
	registered := false
	for !r.stopped() || !r.dispatchDone() {
		d := home
		if rng.IntN(4) == 0 {
			d = 1 - home
		}
		if !registered {
			st, _ := call("PUT", r.daemons[d].url+"/api/v1/agents/"+name, `{"max_tasks":4}`, hdr...)
			registered = st == 200
			continue
		}
		st, b := call("GET", r.daemons[d].url+"/api/v1/tasks?agent="+name+"&status=assigned&wait=2s", "", hdr...)
		if st != 200 {
			continue
		}
		var page struct {
			Tasks []server.DispatchJSON `json:"tasks"`
		}
		if json.Unmarshal(b, &page) != nil {
			continue
		}
		for _, j := range page.Tasks {
			for range 5 {
				st, _ := call("POST", r.daemons[d].url+"/api/v1/tasks/"+j.TaskID+"/complete", `{"result":{"ok":true}}`, hdr...)
				if st == 200 {
					r.completions.Add(1)
				}
				if st != 0 && st < 500 {
					break // done, or no longer this worker's (timed out, given to another)
				}
				if rng.IntN(2) == 0 {
					d = 1 - d
				}
			}
		}
	}
}

// dispatchDone reports whether every acknowledged dispatch task ended
// (completed or dead-lettered), asking the first daemon that answers.
func (r *partitionRun) dispatchDone() bool {
	r.mu.Lock()
	want := len(r.dispatch)
	r.mu.Unlock()
	for _, d := range r.daemons {
		n, ended, ok := listDispatch(d.url)
		if ok {
			return n >= want && ended == n
		}
	}
	return false
}

// listDispatch counts a daemon's dispatch tasks and those that ended,
// page by page; ok is false if a page did not come.
func listDispatch(url string) (n, ended int, ok bool) {
	cursor := ""
	for {
		st, b := call("GET", url+"/api/v1/tasks?limit=1000&cursor="+cursor, "", "X-Agent-ID", "client")
		var page struct {
			Tasks      []server.DispatchJSON `json:"tasks"`
			NextCursor string                `json:"next_cursor"`
		}
		if st != 200 || json.Unmarshal(b, &page) != nil {
			return n, ended, false
		}
		for _, j := range page.Tasks {
			n++
			if j.Status == fsm.StateCompleted || j.DeadLettered {
				ended++
			}
		}
		if page.NextCursor == "" {
			return n, ended, true
		}
		cursor = page.NextCursor
	}
}

// finish stops the faults and the workload (the retries in flight run to
// their answer), waits until every task ended, and stops the daemons.
func (r *partitionRun) finish() {
	t := r.t
	r.lab.heal()
	r.rejoin()
	close(r.stop)
	r.wg.Wait()
	for _, d := range r.daemons {
		finishAll(t, d.p, r.ackedSet())
	}
	// Stop the daemons one after the other; the last one's copy holds the
	// whole stream.
	for _, d := range r.daemons {
		d.p.stop(t)
	}
}

func (r *partitionRun) ackedSet() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := map[string]bool{}
	for id := range r.acked {
		all[id] = true
	}
	return all
}

// --- the history and its model -----------------------------------------

// histInput is an operation of the history: a keyed submission (submit)
// or a read of the task id that key was acknowledged with, each sent to
// daemon (0 or 1).
type histInput struct {
	submit bool
	key    string
	id     string // reads
	daemon int
}

// histOutput is its outcome: a task id (a submission), a state or
// notFound (a read); unknown when no answer came (a timeout, a 5xx, a
// broken connection: it may or may not have taken effect); failed for a
// definite refusal (4xx).
type histOutput struct {
	unknown  bool
	failed   string
	id       string
	state    fsm.State
	notFound bool
}

type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(client int, in histInput, out histOutput, call, ret int64) {
	if out.unknown {
		ret = math.MaxInt64 // it may take effect at any time after its call
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: max(client, 0), Input: in, Output: out, Call: call, Return: ret})
}

// keyState is the model's state for one key: the task id its first
// acknowledged submission returned, and how far along the task machine
// each daemon was seen to be (0: not seen, 1 idle, 2 running
// (reasoning, acting, suspended), 3 ended). A daemon serves reads from
// its own copy, which may lag another daemon's, so progress is per
// daemon: a daemon's answers never go back, and the daemon that
// acknowledged a submission holds its task.
type keyState struct {
	id   string
	seen [2]int
}

func stateRank(s fsm.State) int {
	switch s {
	case fsm.StateIdle:
		return 1
	case fsm.StateCompleted, fsm.StateFailed:
		return 3
	}
	return 2
}

// keyModel is the sequential specification the history is checked
// against, one partition per key: every acknowledged submission of a key
// returns the same task id, and a daemon's reads of the task only move
// forward along the machine.
var keyModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range ops {
			k := op.Input.(histInput).key
			if by[k] == nil {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		var parts [][]porcupine.Operation
		for _, k := range keys {
			parts = append(parts, by[k])
		}
		return parts
	},
	Init: func() any { return keyState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(keyState), input.(histInput), output.(histOutput)
		if out.unknown || out.failed != "" {
			return true, s
		}
		if in.submit {
			if s.id != "" && s.id != out.id {
				return false, s
			}
			s.id = out.id
			s.seen[in.daemon] = max(s.seen[in.daemon], 1)
			return true, s
		}
		if s.id != in.id {
			return false, s
		}
		if out.notFound {
			return s.seen[in.daemon] == 0, s
		}
		r := stateRank(out.state)
		if r < s.seen[in.daemon] {
			return false, s
		}
		s.seen[in.daemon] = r
		return true, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(histInput), output.(histOutput)
		var res string
		switch {
		case out.unknown:
			res = "unknown"
		case out.failed != "":
			res = out.failed
		case out.notFound:
			res = "not found"
		case in.submit:
			res = out.id
		default:
			res = string(out.state)
		}
		if in.submit {
			return fmt.Sprintf("submit(%s) to d%d -> %s", in.key, in.daemon+1, res)
		}
		return fmt.Sprintf("read(%s) from d%d -> %s", in.id, in.daemon+1, res)
	},
}

// checkHistory checks the history against keyModel and returns what it
// found illegal ("" if nothing): the keys whose operations have no legal
// order, with their operations.
func checkHistory(ops []porcupine.Operation) string {
	res := porcupine.CheckOperationsTimeout(keyModel, ops, 2*time.Minute)
	if res == porcupine.Ok {
		return ""
	}
	if res == porcupine.Unknown {
		return "the linearizability check timed out"
	}
	// Name the illegal keys: check each partition alone.
	var bad []string
	for _, part := range keyModel.Partition(ops) {
		if porcupine.CheckOperations(keyModel, part) {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		var lines []string
		for _, op := range part {
			lines = append(lines, "  "+keyModel.DescribeOperation(op.Input, op.Output))
		}
		bad = append(bad, fmt.Sprintf("key %s:\n%s", part[0].Input.(histInput).key, strings.Join(lines, "\n")))
	}
	return fmt.Sprintf("%d keys with no legal order:\n%s", len(bad), strings.Join(bad, "\n"))
}

// submitAttempts describes the history's submissions of key, one line
// each, for a report ("" for a key the history does not model).
func submitAttempts(ops []porcupine.Operation, key string) string {
	var b strings.Builder
	for _, op := range ops {
		if in := op.Input.(histInput); in.submit && in.key == key {
			ret := "no answer"
			if op.Return != math.MaxInt64 {
				ret = time.Duration(op.Return).Round(time.Millisecond).String()
			}
			fmt.Fprintf(&b, "\n  at %v, until %s: %s", time.Duration(op.Call).Round(time.Millisecond), ret, keyModel.DescribeOperation(op.Input, op.Output))
		}
	}
	return b.String()
}

// --- the audit --------------------------------------------------------------

// tasksByKey reads a copy and returns, for each workload key, the agent
// tasks whose input carries it and the dispatch tasks whose title does.
func tasksByKey(l *eventlog.Log) (map[string][]string, error) {
	by := map[string][]string{}
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		if ev.Version != 1 || strings.HasPrefix(ev.Stream, "$") {
			continue
		}
		if k := keyRE.Find(ev.Body); k != nil {
			by[string(k)] = append(by[string(k)], ev.Stream)
		}
	}
	return by, it.Err()
}

// keyProblems compares tasksByKey with what the clients were
// acknowledged: every acknowledged key made exactly one task, the one
// acknowledged, and no key made two.
func keyProblems(by map[string][]string, acked map[string]string) []string {
	var p []string
	for id, key := range acked {
		switch tasks := by[key]; {
		case len(tasks) == 0:
			p = append(p, fmt.Sprintf("key %s: acknowledged task %s is not in the log", key, id))
		case !contains(tasks, id):
			p = append(p, fmt.Sprintf("key %s: acknowledged task %s, the log has %v", key, id, tasks))
		}
	}
	for key, tasks := range by {
		if len(tasks) > 1 {
			p = append(p, fmt.Sprintf("key %s made %d tasks: %v", key, len(tasks), tasks))
		}
	}
	sort.Strings(p)
	return p
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// dispatchEnds counts each dispatch task's ends in a copy: completions
// and dead letters.
func dispatchEnds(l *eventlog.Log) (map[string]int, error) {
	ends := map[string]int{}
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		if ev := it.Event(); ev.Type == string(fsm.DispatchCompleted) || ev.Type == string(fsm.DispatchDeadLettered) {
			ends[ev.Stream]++
		}
	}
	return ends, it.Err()
}

// audit runs every check on the stopped daemons' copies, the stream, the
// fan-out and the history, and returns the figures.
func (r *partitionRun) audit() string {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
	defer cancel()
	last := r.daemons[len(r.daemons)-1] // stopped last: its copy holds the whole stream
	head := checkCopy(t, last.data, r.js)
	for _, d := range r.daemons[:len(r.daemons)-1] {
		l, err := eventlog.Open(d.data, &eventlog.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := logStream(ctx, t, r.js)
		if _, err := cluster.VerifyCopy(ctx, l, st); err != nil {
			t.Errorf("the copy of %s: %v", d.name, err)
		}
		l.Close()
		openVerified(t, d.data) // replay.Verify: checksums, indexes, the fold
	}
	decided := checkOwnersDecided(t, r.js)
	fanned := checkFanout(t, r.bin, last.data, r.daemonFlags(last)[2:], r.js, "EVENTS", agentSubjects...)
	acked := r.ackedSet()
	checkLog(t, last.data, acked) // every acknowledged task once and ended, each input one task, nothing completed twice

	l, _ := openVerified(t, last.data)
	by, err := tasksByKey(l)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	agentKeys, dispatchKeys := map[string]string{}, map[string]string{}
	for id, k := range r.acked {
		agentKeys[id] = k
	}
	for id, k := range r.dispatch {
		dispatchKeys[id] = k
	}
	r.mu.Unlock()
	dups := 0
	for _, tasks := range by {
		dups += len(tasks) - 1
	}
	byAgent, byDispatch := map[string][]string{}, map[string][]string{}
	for k, tasks := range by {
		if strings.HasPrefix(k, "pk-b-") {
			byDispatch[k] = tasks
		} else {
			byAgent[k] = tasks
		}
	}
	problems := append(keyProblems(byAgent, agentKeys), keyProblems(byDispatch, dispatchKeys)...)
	ends, err := dispatchEnds(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, tasks := range byDispatch {
		for _, id := range tasks {
			if ends[id] != 1 {
				problems = append(problems, fmt.Sprintf("dispatch task %s ended %d times", id, ends[id]))
			}
		}
	}
	r.hist.mu.Lock()
	ops := r.hist.ops
	r.hist.mu.Unlock()
	for _, p := range problems {
		t.Error(p + submitAttempts(ops, keyRE.FindString(p)))
	}
	if bad := checkHistory(ops); bad != "" {
		t.Errorf("the history is not linearizable: %s", bad)
	}
	return fmt.Sprintf("%d agent tasks and %d dispatch tasks acknowledged (%d completions reported), %d history operations, "+
		"%d keyed posts sent again (%d to the other daemon); "+
		"%d tasks made twice or more by one key; %d events in the stream, %d broker decisions by their partitions' owners, "+
		"%d on the fan-out once each; %d daemon restarts (%d after a lost lease), %d starts that failed and were tried again",
		len(agentKeys), len(dispatchKeys), r.completions.Load(), len(ops), r.retries.Load(), r.crossRetries.Load(), dups, head, decided, fanned.Last, r.restarts, r.lostLease, r.failedStarts)
}

// TestPartitionAuditFails is the negative control of TestClusterPartitions'
// audit: fed what a broken system would produce, it must report it.
//   - A client that retries without its Idempotency-Key (a daemon in
//     process; the second post makes a second task for the key):
//     keyProblems reports the key with two tasks; with the key on the
//     retry it reports nothing.
//   - Histories where a key's submissions return two task ids, where a
//     daemon's read goes back along the machine, and where the daemon
//     that acknowledged a submission does not find its task: checkHistory
//     finds no legal order; the same histories made legal pass.
func TestPartitionAuditFails(t *testing.T) {
	cfg := testConfig(t)
	td := startDaemon(t, cfg)
	post := func(input, key string) string {
		h := []string{}
		if key != "" {
			h = append(h, "Idempotency-Key", key)
		}
		r := td.do("POST", "/v1/tasks", fmt.Sprintf(`{"input":%q}`, input), h...)
		var c server.CreatedJSON
		r.json(t, &c)
		return c.TaskID
	}
	good := post("hello pk-s0-1", "pk-s0-1")
	if again := post("hello pk-s0-1", "pk-s0-1"); again != good {
		t.Fatalf("a keyed retry made task %s, the first %s", again, good)
	}
	bad := post("hello pk-s0-2", "pk-s0-2")
	post("hello pk-s0-2", "") // the broken client's retry: no key
	td.waitTask(good)
	td.stop()
	l, err := eventlog.Open(cfg.engine.DataDir, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	by, err := tasksByKey(l)
	if err != nil {
		t.Fatal(err)
	}
	p := keyProblems(by, map[string]string{good: "pk-s0-1", bad: "pk-s0-2"})
	if len(p) != 1 || !strings.Contains(p[0], "key pk-s0-2 made 2 tasks") {
		t.Errorf("the audit of a keyless retry reported %q, want key pk-s0-2 with 2 tasks", p)
	}
	if p := keyProblems(by, map[string]string{good: "pk-s0-1"}); len(p) != 1 {
		t.Errorf("the audit reported %q", p) // pk-s0-2's two tasks, acknowledged or not
	}
	delete(by, "pk-s0-2")
	if p := keyProblems(by, map[string]string{good: "pk-s0-1", bad: "pk-s0-2"}); len(p) != 1 || !strings.Contains(p[0], "is not in the log") {
		t.Errorf("the audit of a lost task reported %q", p)
	}

	op := func(call, ret int64, in histInput, out histOutput) porcupine.Operation {
		return porcupine.Operation{Input: in, Output: out, Call: call, Return: ret}
	}
	sub := func(d int) histInput { return histInput{submit: true, key: "k", daemon: d} }
	read := func(d int) histInput { return histInput{key: "k", id: "A", daemon: d} }
	for _, c := range []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"a retry to the other daemon answered with the same task", []porcupine.Operation{
			op(0, math.MaxInt64, sub(0), histOutput{unknown: true}),
			op(2, 3, sub(1), histOutput{id: "A"}),
			op(4, 5, read(0), histOutput{notFound: true}), // daemon 0's copy lags
			op(6, 7, read(1), histOutput{id: "A", state: fsm.StateReasoning}),
			op(8, 9, read(0), histOutput{id: "A", state: fsm.StateIdle}),
			op(10, 11, read(1), histOutput{id: "A", state: fsm.StateCompleted}),
		}, true},
		{"a retry to the other daemon answered with another task", []porcupine.Operation{
			op(0, math.MaxInt64, sub(0), histOutput{unknown: true}),
			op(0, 1, sub(0), histOutput{id: "A"}),
			op(2, 3, sub(1), histOutput{id: "B"}),
		}, false},
		{"a daemon's read going back", []porcupine.Operation{
			op(0, 1, sub(0), histOutput{id: "A"}),
			op(2, 3, read(0), histOutput{id: "A", state: fsm.StateCompleted}),
			op(4, 5, read(0), histOutput{id: "A", state: fsm.StateReasoning}),
		}, false},
		{"the acknowledging daemon without its task", []porcupine.Operation{
			op(0, 1, sub(1), histOutput{id: "A"}),
			op(2, 3, read(1), histOutput{notFound: true}),
		}, false},
	} {
		got := checkHistory(c.ops)
		if c.legal != (got == "") {
			t.Errorf("%s: checkHistory says %q", c.name, got)
		}
	}
}
