package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/daemontest"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/server"
)

var (
	crashCycles = flag.Int("crash-cycles", 20, "kill -9 cycles in TestCrashRecovery")
	crashSeed   = flag.Uint64("crash-seed", 0, "seed of TestCrashRecovery (0: random, printed)")
)

// crashRun skips a subprocess test in -short mode, else returns its seed
// (-crash-seed, or random and printed) and a generator seeded with it.
func crashRun(t *testing.T) (uint64, *rand.Rand) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -crash-seed=%d)", seed, seed)
	return seed, rand.New(rand.NewPCG(seed, seed>>1))
}

// buildDaemon compiles this package into a binary for the subprocess tests.
func buildDaemon(t *testing.T) string {
	t.Helper()
	return goBuild(t, "pegasusd", ".")
}

// goBuild builds the package pkg into a binary name for the subprocess
// tests.
func goBuild(t *testing.T, name, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// proc is a pegasusd subprocess (internal/daemontest), killed when the
// test ends if it still runs.
type proc struct {
	*daemontest.Daemon
	url   string // Daemon.URL
	token string // the daemon's --token, which finishAll sends
}

var resumedRE = regexp.MustCompile(`agent started.* resumed=(\d+)`)

func startProc(t *testing.T, bin, data string, extra ...string) *proc {
	t.Helper()
	return startProcIn(t, nil, bin, data, extra...)
}

// startProcIn is startProc with the daemon's command line after wrap
// (for example ip netns exec NAME, which executes it in a network
// namespace as the same process); extra may name another --addr.
func startProcIn(t *testing.T, wrap []string, bin, data string, extra ...string) *proc {
	t.Helper()
	p, err := launchProc(t, wrap, bin, data, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// launchProc is startProcIn returning an error, which wraps
// daemontest.ErrNotListening and carries the daemon's output, when the
// daemon did not start (as a supervisor would see it).
func launchProc(t *testing.T, wrap []string, bin, data string, extra ...string) (*proc, error) {
	t.Helper()
	d, err := daemontest.StartWrapped(wrap, bin, data, "", extra...)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = d.Kill() }) // a test that failed midway leaves no daemon running
	return &proc{Daemon: d, url: d.URL}, nil
}

func (p *proc) output() string { return p.Logs() }

func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
}

// stop sends SIGINT and expects a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}

// submitter posts tasks until stopped or the daemon dies, and reports the
// ids the daemon acknowledged (201). Like a client that retries, it posts
// again after a timeout or a 5xx answer (a daemon slow to start, or one
// whose NATS server is down), which may have created a task it never
// acknowledged; it stops at a refused or broken connection (the daemon
// died) and at any other answer.
func submitter(url string, inputs []string, rng *rand.Rand, acked chan<- string, stop <-chan struct{}) {
	client := &http.Client{Timeout: 10 * time.Second}
	for {
		select {
		case <-stop:
			return
		default:
		}
		body, _ := json.Marshal(map[string]string{"input": inputs[rng.IntN(len(inputs))]})
		resp, err := client.Post(url+"/v1/tasks", "application/json", bytes.NewReader(body))
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		if err != nil {
			return // killed
		}
		var c server.CreatedJSON
		err = json.NewDecoder(resp.Body).Decode(&c)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			continue
		}
		if err != nil || resp.StatusCode != 201 {
			return
		}
		acked <- c.TaskID // an acknowledged task is always reported, stop or not
	}
}

// killUnderLoad runs workers submitters against p, kills p with SIGKILL
// once killAfter submissions were acknowledged, and records every
// acknowledged task id in ackedAll (those acknowledged as the process died
// too).
func killUnderLoad(t *testing.T, p *proc, inputs []string, seed uint64, cycle, workers, killAfter int, ackedAll map[string]bool) {
	t.Helper()
	acked := make(chan string)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		sub := rand.New(rand.NewPCG(seed, uint64(cycle*10+i)))
		go func() { defer wg.Done(); submitter(p.url, inputs, sub, acked, stop) }()
	}
	submitted := make(chan struct{}) // every submitter returned
	go func() { wg.Wait(); close(submitted) }()
	timeout := time.After(testTimeout) // a bound for the failure only
	for n := 0; n < killAfter; n++ {
		select {
		case id := <-acked:
			ackedAll[id] = true
		case <-submitted:
			close(stop)
			t.Fatalf("every submitter stopped after %d of %d acknowledgements: the daemon died or refused them\n%s", n, killAfter, p.output())
		case <-timeout:
			p.kill(t)
			close(stop)
			t.Fatalf("%d of %d acknowledgements within %v\n%s", n, killAfter, testTimeout, p.output())
		}
	}
	p.kill(t)
	close(stop)
	collectAcked(acked, submitted, ackedAll)
}

// collectAcked records the acknowledgements that arrive until every
// submitter has returned: those answered before the kill count too.
func collectAcked(acked <-chan string, submitted <-chan struct{}, ackedAll map[string]bool) {
	for {
		select {
		case id := <-acked:
			ackedAll[id] = true
		case <-submitted:
			return
		}
	}
}

// TestCrashRecovery runs pegasusd as a subprocess under concurrent
// submissions and kills it with SIGKILL at random points, many times, then
// restarts it once more and checks: every acknowledged task is present,
// every task reaches a terminal state, no input created two tasks, and
// verify (which re-folds everything and compares the persisted projections
// with a fresh fold) finds nothing wrong.
func TestCrashRecovery(t *testing.T) {
	seed, rng := crashRun(t)
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	inputs := []string{"what time is it?", "hello", "remember the door code is 42", "what is the date today?"}

	ackedAll := map[string]bool{}
	resumed := 0
	for cycle := range *crashCycles {
		p := startProc(t, bin, data)
		killAfter := rng.IntN(13) // acknowledged submissions before the kill; 0 kills during recovery's aftermath
		killUnderLoad(t, p, inputs, seed, cycle, 4, killAfter, ackedAll)
		if m := resumedRE.FindStringSubmatch(p.output()); m != nil {
			n, _ := strconv.Atoi(m[1])
			resumed += n
		}
	}

	// A last, clean run: every task must finish, the acknowledged ones and
	// those whose answer was lost as the process died (created, never
	// acknowledged), which recovery resumes too.
	p := startProc(t, bin, data)
	finishAll(t, p, ackedAll)
	p.stop(t)
	t.Logf("%d acknowledged tasks over %d crashes; restarts resumed %d in-flight tasks", len(ackedAll), *crashCycles, resumed)
	checkLog(t, data, ackedAll)
}

// finishAll waits until every task of a running daemon is terminal: the
// acknowledged ones and those whose answer was lost as a process died
// (created, never acknowledged), which recovery resumes too.
func finishAll(t *testing.T, p *proc, ackedAll map[string]bool) {
	t.Helper()
	client := &http.Client{Timeout: 70 * time.Second, Transport: bearer(p.token)}
	waitTerminal := func(id, what string) {
		for range 4 { // each wait returns at a change or after 30s
			tj, code, err := waitTask(client, p.url, id)
			if err != nil || code != 200 {
				t.Fatalf("%s task %s: %d %v\n%s", what, id, code, err, p.output())
			}
			if tj.State.IsTerminal() {
				return
			}
		}
		t.Fatalf("%s task %s did not finish within two minutes of the restart\n%s", what, id, p.output())
	}
	for id := range ackedAll {
		waitTerminal(id, "acknowledged")
	}
	for {
		resp, err := client.Get(p.url + "/v1/tasks?state=idle,reasoning,acting&limit=1000")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Tasks []struct {
				ID string `json:"task_id"`
			} `json:"tasks"`
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("list unfinished tasks: %d %v", resp.StatusCode, err)
		}
		if len(list.Tasks) == 0 {
			break
		}
		for _, tk := range list.Tasks {
			waitTerminal(tk.ID, "unacknowledged")
		}
	}
}

// bearer is a transport that sends token as the bearer token, if any.
func bearer(token string) http.RoundTripper {
	if token == "" {
		return http.DefaultTransport
	}
	return bearerTransport(token)
}

type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// waitTask asks for a task, waiting up to 30s for a change; it returns
// the task and the status code.
func waitTask(client *http.Client, url, id string) (server.TaskJSON, int, error) {
	var tj server.TaskJSON
	resp, err := client.Get(url + "/v1/tasks/" + id + "?wait=30s")
	if err != nil {
		return tj, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return tj, resp.StatusCode, nil
	}
	return tj, resp.StatusCode, json.NewDecoder(resp.Body).Decode(&tj)
}

// openVerified opens a stopped daemon's data directory read-only, fails
// the test unless verify finds nothing wrong, and folds it. The log is
// closed when the test ends.
func openVerified(t *testing.T, data string) (*eventlog.Log, *replay.View) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	l, err := eventlog.Open(data, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	rep, err := replay.Verify(ctx, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify: %s\n%+v", rep.Summary(), rep.Problems)
	}
	v, _, err := replay.Open(ctx, l, &replay.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return l, v
}

// checkLog audits a stopped daemon's data directory.
func checkLog(t *testing.T, data string, acked map[string]bool) {
	t.Helper()
	l, v := openVerified(t, data)
	for id := range acked {
		task, err := v.Task(id)
		if err != nil {
			t.Fatalf("acknowledged task %s is missing: %v", id, err)
		}
		if !task.State.IsTerminal() {
			t.Errorf("task %s is %s", id, task.State)
		}
	}
	if open := v.InState(fsm.StateIdle, fsm.StateReasoning, fsm.StateActing, fsm.StateSuspended); len(open) != 0 {
		t.Errorf("%d tasks did not finish, first %s (%s)", len(open), open[0].ID, open[0].State)
	}

	// Inputs and tasks pair one to one: every task stream starts with the
	// input that created it, each input was admitted by at most one
	// TASK_CREATED caused by it, and nothing was appended twice.
	created := map[ulid.ULID]int{}
	inputs := map[ulid.ULID]bool{}
	completed := map[string]int{}
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		switch {
		case ev.Version == 1 && !strings.HasPrefix(ev.Stream, "$") && ev.Type != string(fsm.DispatchCreated): // broker tasks have no input
			if ev.Stream != ev.ID.String() {
				t.Errorf("task stream %s starts with %s %s, not its input", ev.Stream, ev.Type, ev.ID)
			}
			inputs[ev.ID] = true
		case ev.Type == string(fsm.TaskCreated):
			created[ev.Causation]++
		case ev.Type == string(fsm.TaskCompleted):
			completed[ev.Stream]++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	for in := range inputs {
		if created[in] != 1 {
			t.Errorf("input %s created %d tasks", in, created[in])
		}
	}
	for c, n := range created {
		if !inputs[c] {
			t.Errorf("%d task(s) caused by %s, which is not an input", n, c)
		}
	}
	for id, n := range completed {
		if n != 1 {
			t.Errorf("task %s completed %d times", id, n)
		}
	}
	if len(inputs) < len(acked) {
		t.Errorf("%d inputs for %d acknowledged tasks", len(inputs), len(acked))
	}
}
