package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/pegasus-engine/pegasus/server"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
)

var (
	clusterBench        = flag.Int("cluster-bench", 0, "tasks per setup of TestClusterBench (0: skip)")
	clusterBenchProfile = flag.String("cluster-bench-cpuprofile", "", "TestClusterBench: write the one R3 daemon's CPU profile to this file")
	clusterBenchServers = flag.String("cluster-bench-servers-cpuprofile", "", "TestClusterBench: write this process's CPU profile (the JetStream servers and the clients) during the one R3 daemon's run to this file")
	clusterBenchR3      = flag.Bool("cluster-bench-r3", false, "TestClusterBench: measure embedded, raw JetStream and one R3 daemon only")
	clusterBenchParts   = flag.Int("cluster-bench-partitions", 16, "TestClusterBench: the one R3 daemon's --cluster-partitions")
)

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
				var cj server.CreatedJSON
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
	pe := startProc(t, bin, filepath.Join(t.TempDir(), "d"))
	e0, u0 := scrapeCounters(t, pe.url, ""), testCPU()
	base := runTasks(t, n, pe.url)
	report := func(name string, v float64) {
		t.Logf("%-32s %7.0f tasks/s  %.2f of embedded", name, v, v/base)
	}
	report("embedded", base)
	costs(t, "embedded", n, e0, scrapeCounters(t, pe.url, ""), u0)
	pe.stop(t)
	if !*clusterBenchR3 {
		n1 := natstest.Start(t, 1)
		report("clustered, 1 server (R1)", runTasks(t, n, startProc(t, bin, filepath.Join(t.TempDir(), "d"), "--cluster", n1.URL()).url))
	}
	n3 := natstest.Start(t, 3)
	// The same servers' limit: 8 publishers of synced JetStream messages
	// of an event's size, each waiting for its acknowledgement.
	raw, rawBytes := rawPublishRate(t, n3, 8, 3*time.Second)
	t.Logf("%-32s %7.0f messages/s (8 publishers, R3, fsync always; %.0f bytes each, as JetStream counts them)", "raw JetStream", raw, rawBytes)
	r3flags := []string{"--cluster", n3.URL(), "--cluster-node", "a", "--cluster-partitions", strconv.Itoa(*clusterBenchParts)}
	if *clusterBenchProfile != "" {
		r3flags = append(r3flags, "--cpuprofile", *clusterBenchProfile)
	}
	p3 := startProc(t, bin, filepath.Join(t.TempDir(), "d"), r3flags...)
	waitLeases(t, n3.JetStream(), "a", *clusterBenchParts) // its appends go through the committers from the first task
	info0 := streamInfo(t, n3, "PEGASUS_LOG")
	c0, u0 := scrapeCounters(t, p3.url, ""), testCPU()
	if *clusterBenchServers != "" {
		f, err := os.Create(*clusterBenchServers)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	report("clustered, 3 servers (R3)", runTasks(t, n, p3.url))
	el := time.Since(start).Seconds()
	if *clusterBenchServers != "" {
		pprof.StopCPUProfile()
	}
	info1 := streamInfo(t, n3, "PEGASUS_LOG")
	c1 := scrapeCounters(t, p3.url, "")
	msgs := float64(info1.State.Msgs - info0.State.Msgs)
	stored := float64(info1.State.Bytes - info0.State.Bytes)
	evs := c1["pegasus_eventlog_head_sequence"] - c0["pegasus_eventlog_head_sequence"]
	batches := c1["pegasus_cluster_batches_total"] - c0["pegasus_cluster_batches_total"]
	appends := c1["pegasus_cluster_appends_total"] - c0["pegasus_cluster_appends_total"]
	refused := c1["pegasus_cluster_batches_refused_total"] - c0["pegasus_cluster_batches_refused_total"]
	inBatches := c1["pegasus_cluster_messages_total"] - c0["pegasus_cluster_messages_total"]
	// Messages outside the committers' batches (appends over two
	// partitions, or sent alone) are counted as one request each: an
	// upper bound (such an append of n messages is one request).
	requests := batches + (msgs - inBatches)
	t.Logf("%-32s %7.0f messages/s  %.2f of raw; at most %.0f requests/s  %.2f of raw; %.1f appends a batch; %.2f%% of batches refused",
		"clustered R3, JetStream side", msgs/el, msgs/el/raw, requests/el, requests/el/raw, appends/max(batches, 1), 100*refused/max(batches, 1))
	// A message carries several events (packed): the events and the
	// bytes the node stores a second, against the raw publishers' messages
	// (one event-sized message each) and their bytes.
	t.Logf("%-32s %7.0f events/s  %.2f of raw messages/s; %.2f of raw bytes/s",
		"clustered R3, JetStream side", evs/el, evs/el/raw, stored/el/(raw*rawBytes))
	t.Logf("%-32s per task: %.1f messages (%.0f bytes each, as JetStream counts them), %.1f events, %.1f batches of the committers (%.1f messages), %.1f messages outside them",
		"clustered R3", msgs/float64(n), stored/max(msgs, 1), evs/float64(n), batches/float64(n), inBatches/float64(n), (msgs-inBatches)/float64(n))
	costs(t, "clustered R3", n, c0, c1, u0)
	p3.stop(t) // writes its profile
	if *clusterBenchR3 {
		return
	}
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

// rawPublishRate publishes messages of an event's size (512 bytes) to a
// new R3 stream on the servers from pubs publishers, each waiting for its
// acknowledgement, for d, and returns the messages per second and the
// bytes of one message as JetStream counts them.
func rawPublishRate(t *testing.T, nats *natstest.Cluster, pubs int, d time.Duration) (float64, float64) {
	t.Helper()
	js := nats.JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage,
		Replicas: len(nats.Servers)}); err != nil {
		t.Fatal(err)
	}
	defer js.DeleteStream(context.Background(), "RAW")
	payload := bytes.Repeat([]byte("x"), 512)
	var total atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if _, err := js.Publish(ctx, fmt.Sprintf("raw.%d", i), payload); err != nil {
					t.Error(err)
					return
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	info := streamInfo(t, nats, "RAW")
	return float64(total.Load()) / d.Seconds(), float64(info.State.Bytes) / max(float64(info.State.Msgs), 1)
}

func streamInfo(t *testing.T, nats *natstest.Cluster, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := nats.JetStream().Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// costs logs, for n tasks between two scrapes of a daemon's metrics, a
// task's mean duration, the mean time from an event's time (taken by its
// appender) to the daemon's delivery of it to subscribers (a replicated
// append's whole path with --cluster), and the CPU the daemon and this
// process (the JetStream servers and the clients) spent per task.
func costs(t *testing.T, name string, n int, m0, m1 map[string]float64, cpu0 float64) {
	t.Helper()
	d := func(k string) float64 { return m1[k] - m0[k] }
	t.Logf("%-32s task %.1f ms; event to delivery %.2f ms (%.0f commits); CPU per task: daemon %.2f ms, test process %.2f ms",
		name, 1000*d(`pegasus_task_duration_seconds_sum{outcome="completed"}`)/float64(n),
		1000*d("pegasus_eventlog_commit_latency_seconds_sum")/max(d("pegasus_eventlog_commit_latency_seconds_count"), 1),
		d("pegasus_eventlog_commit_latency_seconds_count"),
		1000*d("process_cpu_seconds_total")/float64(n), 1000*(testCPU()-cpu0)/float64(n))
}

// testCPU is the CPU time this process used so far, in seconds.
func testCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// scrapeCounters reads the daemon's /metrics series whose names start
// with prefix (with their labels, as written).
func scrapeCounters(t *testing.T, url, prefix string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if name, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, prefix) && !strings.HasPrefix(name, "#") {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				out[name] = f
			}
		}
	}
	return out
}
