package main

import (
	"bufio"
	"context"
	"flag"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

var retentionCycles = flag.Int("retention-crash-cycles", 3, "kill -9 cycles in TestRetentionCrashRecovery")

// TestRetentionCrashRecovery runs pegasusd with retention every 20ms and a
// 1ms window under concurrent submissions, kills it with SIGKILL at random
// points (so kills land before, in and after retention runs), restarts it,
// and at the end checks that verify is clean (holes exactly those of the
// manifests, projections consistent), that every archive matches its
// manifest, that at least one run archived tasks, and that every
// acknowledged task is either in the live log or in an archive.
func TestRetentionCrashRecovery(t *testing.T) {
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -crash-seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 15))
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	flags := []string{"--retain-finished", "1ms", "--retention-interval", "20ms"}
	inputs := []string{"what time is it?", "hello", "what is the date today?"}

	ackedAll := map[string]bool{}
	cycles := *retentionCycles
	if testing.Short() {
		cycles = min(cycles, 2)
	}
	for cycle := range cycles {
		p := startProc(t, bin, data, flags...)
		killUnderLoad(t, p, inputs, seed, cycle, 3, 5+rng.IntN(40), ackedAll)
	}

	// A last run: every task finishes (a finished task may be archived
	// under the wait, which then answers 404: it finished).
	p := startProc(t, bin, data, flags...)
	client := &http.Client{Timeout: 70 * time.Second}
	for id := range ackedAll {
		for range 4 {
			tj, code, err := waitTask(client, p.url, id)
			if code == http.StatusNotFound {
				break
			}
			if err != nil || code != 200 {
				t.Fatalf("task %s: %d %v", id, code, err)
			}
			if tj.State.IsTerminal() {
				break
			}
		}
	}
	// Every cycle may have been killed before a run archived anything, and
	// the last run's tasks finished just now: wait for a run that did.
	waitArchived(t, p)
	p.stop(t)

	l, v := openVerified(t, data)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ar, err := replay.VerifyArchives(ctx, replay.FromLog(l), vfs.Default, filepath.Join(data, "archive"))
	if err != nil {
		t.Fatal(err)
	}
	if !ar.OK() || ar.Manifests == 0 {
		t.Fatalf("archives: %d manifests, problems %v", ar.Manifests, ar.Problems)
	}
	archived := map[string]bool{}
	ms, err := replay.Manifests(ctx, replay.FromLog(l))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		f, err := os.Open(filepath.Join(data, "archive", m.File))
		if err != nil {
			t.Fatal(err)
		}
		ml, _, err := replay.ReadExport(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range ml.All() {
			archived[ev.Stream] = true
		}
	}
	for id := range ackedAll {
		if _, err := v.Task(id); err != nil && !archived[id] {
			t.Errorf("acknowledged task %s is neither in the log nor archived: %v", id, err)
		}
		if archived[id] {
			if n, _ := l.StreamVersion(id); n != 0 {
				t.Errorf("task %s is archived and still in the log", id)
			}
		}
	}
	holes, err := l.Holes()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d acknowledged tasks over %d kills; %d retention runs archived %d tasks; %d holes; %d orphan archives",
		len(ackedAll), cycles, ar.Manifests, len(archived), len(holes), len(ar.Orphans))
}

// waitArchived waits, up to testTimeout, until the log of the running
// daemon p holds an EVENTS_ARCHIVED event, read from its event stream
// from the start.
func waitArchived(t *testing.T, p *proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/v1/events/stream?after_seq=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if sc.Text() == "event: "+eventlog.TypeEventsArchived {
			return
		}
	}
	t.Fatalf("no retention run archived tasks within %v: %v\n%s", testTimeout, sc.Err(), p.output())
}
