package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
)

var clusterBench = flag.Int("cluster-bench", 0, "tasks per setup of TestClusterBench (0: skip)")

// runTasks submits n tasks over HTTP from 8 clients, spread over the
// daemons' urls, each client waiting for its task to finish before the
// next, and returns the tasks per second.
func runTasks(t *testing.T, n int, urls ...string) float64 {
	t.Helper()
	client := &http.Client{Timeout: 70 * time.Second}
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := urls[c%len(urls)]
			for range jobs {
				body, _ := json.Marshal(map[string]string{"input": "what time is it?"})
				resp, err := client.Post(u+"/v1/tasks", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				var cj createdJSON
				err = json.NewDecoder(resp.Body).Decode(&cj)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 201 {
					t.Errorf("submit: %d %v", resp.StatusCode, err)
					return
				}
				for {
					tj, code, err := waitTask(client, u, cj.TaskID)
					if err != nil || code != 200 {
						t.Errorf("wait %s: %d %v", cj.TaskID, code, err)
						return
					}
					if tj.State.IsTerminal() {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// TestClusterBench measures end-to-end tasks per second (submitted over
// HTTP, run by the offline model, waited for) with the embedded log and
// with --cluster on in-process JetStream servers that fsync every write:
// one server (R1), three (R3), and two daemons on three servers sharing
// the partitions (measured once balanced), without and with the fan-out,
// and three daemons.
// Run it with -cluster-bench N (docs/cluster.md).
func TestClusterBench(t *testing.T) {
	if *clusterBench == 0 {
		t.Skip("set -cluster-bench N")
	}
	n := *clusterBench
	bin := buildDaemon(t)
	base := runTasks(t, n, startProc(t, bin, filepath.Join(t.TempDir(), "d")).url)
	report := func(name string, v float64) {
		t.Logf("%-32s %7.0f tasks/s  %.2f of embedded", name, v, v/base)
	}
	report("embedded", base)
	n1 := natstest.Start(t, 1)
	report("clustered, 1 server (R1)", runTasks(t, n, startProc(t, bin, filepath.Join(t.TempDir(), "d"), "--cluster", n1.URL()).url))
	n3 := natstest.Start(t, 3)
	report("clustered, 3 servers (R3)", runTasks(t, n, startProc(t, bin, filepath.Join(t.TempDir(), "d"), "--cluster", n3.URL()).url))
	// k daemons on three servers, measured once they share the 16
	// partitions (8 and 8; 6, 6 and 4), with clients on every daemon.
	shared := func(name string, k int, publish bool) {
		nats := natstest.Start(t, 3)
		flags := func(node string) []string {
			f := []string{"--cluster", nats.URL(), "--cluster-node", node}
			if publish {
				f = append(f, "--publish", nats.URL(), "--publish-replicas", "3")
			}
			return f
		}
		var procs []*proc
		var urls []string
		for i, want := range [][]int{{16}, {8, 8}, {6, 6, 4}}[:k] {
			p := startProc(t, bin, filepath.Join(t.TempDir(), string(rune('a'+i))), flags(string(rune('a'+i)))...)
			procs, urls = append(procs, p), append(urls, p.url)
			owners := map[string]int{}
			for j, n := range want {
				owners[string(rune('a'+j))] = n
			}
			waitOwners(t, nats.JetStream(), owners) // balanced before the clock starts
		}
		report(name, runTasks(t, n, urls...))
		for _, p := range procs {
			p.stop(t)
		}
	}
	shared("2 daemons, 3 servers (R3)", 2, false)
	shared("2 daemons, R3, --publish (R3)", 2, true)
	shared("3 daemons, 3 servers (R3)", 3, false)
}
