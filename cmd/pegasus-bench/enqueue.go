package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The enqueue workload (-enqueue): tasks created as fast as clients can,
// nothing else asked of the daemon, through a pegasusd started here per
// shape (its defaults: every append synced) or a running one
// (-enqueue-url). Four shapes: agent tasks (POST /v1/tasks) and broker
// tasks (POST /api/v1/tasks, requiring a capability no worker has, so
// they stay pending), one task per request or -enqueue-batch per request
// (POST .../tasks:batch). Each prints tasks/s, the daemon's CPU per task
// (its user and system time over the run, from /proc) and the load.
//
//	go build -o bin/ ./cmd/pegasusd ./cmd/pegasus-bench && bin/pegasus-bench -enqueue -rounds 3

// enqueueFlags are the flags of -enqueue.
type enqueueFlags struct {
	url, pegasusd, dir string
	rounds             int
	tasks, clients     int
	batch              int
	desc               int // bytes of description per broker task
	run                func(string) bool
	profiles           string
}

// enqueueShape is one shape of a round.
type enqueueShape struct {
	name   string
	path   string
	broker bool
	batch  int // tasks per request; 0: the single create
}

func (f enqueueFlags) shapes() []enqueueShape {
	all := []enqueueShape{
		{name: "agent single", path: "/v1/tasks"},
		{name: "agent batch", path: "/v1/tasks:batch", batch: f.batch},
		{name: "broker single", path: "/api/v1/tasks", broker: true},
		{name: "broker batch", path: "/api/v1/tasks:batch", broker: true, batch: f.batch},
	}
	return slices.DeleteFunc(all, func(s enqueueShape) bool { return f.run != nil && !f.run(s.name) })
}

// enqueueResult is one run of a shape.
type enqueueResult struct {
	tasks       int
	elapsed     time.Duration
	cpu         time.Duration // the daemon's user+system time, 0 when unknown
	rss, peak   int64         // the daemon's resident memory after the run and its peak, in bytes; 0 when unknown
	alloc, gcs  float64       // the bytes the daemon allocated over the run and its GC cycles (its /metrics); alloc 0 when unknown
	finished    float64       // the tasks the daemon's agent completed over the run (its /metrics)
	load, load2 string
}

func (r enqueueResult) perSec() float64 { return float64(r.tasks) / r.elapsed.Seconds() }

func (r enqueueResult) String() string {
	s := fmt.Sprintf("%8.0f tasks/s  %6d tasks in %6.2fs", r.perSec(), r.tasks, r.elapsed.Seconds())
	if r.cpu > 0 {
		s += fmt.Sprintf("  daemon CPU %5.1f µs/task (%.2f cores)", float64(r.cpu.Microseconds())/float64(r.tasks), r.cpu.Seconds()/r.elapsed.Seconds())
	}
	if r.alloc > 0 {
		s += fmt.Sprintf("  alloc %5.1f KiB/task (%.0f GCs)", r.alloc/1024/float64(r.tasks), r.gcs)
	}
	if r.finished > 0 {
		s += fmt.Sprintf("  %.0f run", r.finished)
	}
	if r.peak > 0 {
		s += fmt.Sprintf("  RSS %4d MiB (peak %4d MiB)", r.rss>>20, r.peak>>20)
	}
	return s + fmt.Sprintf("  (load %s -> %s)", r.load, r.load2)
}

func runEnqueue(ctx context.Context, f enqueueFlags) error {
	shapes := f.shapes()
	results := make([][]enqueueResult, len(shapes))
	for round := range f.rounds {
		for i, sh := range shapes {
			var args []string
			if f.profiles != "" {
				args = []string{"--cpuprofile", fmt.Sprintf("%s/enqueue-%s-r%d.pprof", f.profiles, strings.ReplaceAll(sh.name, " ", "-"), round)}
			}
			fb := brokerFlags{url: f.url, pegasusd: f.pegasusd, dir: f.dir}
			d, err := fb.daemon(ctx, args...)
			if err != nil {
				return err
			}
			res, err := enqueue(ctx, d, sh, f, round)
			if rerr := d.remove(); err == nil {
				err = rerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", sh.name, err)
			}
			fmt.Printf("%-14s %s\n", sh.name, res)
			results[i] = append(results[i], res)
		}
	}
	fmt.Printf("\nmedian of %d rounds (%d clients, batches of %d):\n", f.rounds, f.clients, f.batch)
	for i, sh := range shapes {
		rs := results[i]
		slices.SortFunc(rs, func(x, y enqueueResult) int { return cmp.Compare(x.perSec(), y.perSec()) })
		fmt.Printf("%-14s %s\n", sh.name, rs[len(rs)/2])
	}
	return nil
}

// enqueue creates f.tasks tasks from f.clients clients against d.
func enqueue(ctx context.Context, d *daemonProc, sh enqueueShape, f enqueueFlags, round int) (enqueueResult, error) {
	per := max(sh.batch, 1)
	requests := (f.tasks + per - 1) / per
	tr := &http.Transport{MaxIdleConnsPerHost: f.clients, MaxConnsPerHost: f.clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	desc := ""
	if f.desc > 0 {
		desc = fmt.Sprintf(`,"description":%q`, strings.Repeat("d", f.desc))
	}
	body := func(req int) []byte {
		var b bytes.Buffer
		item := func(i int) {
			if sh.broker {
				fmt.Fprintf(&b, `{"title":"job %d.%d.%d"%s,"required_capabilities":["nobody"]}`, round, req, i, desc)
			} else {
				fmt.Fprintf(&b, `{"input":"job %d.%d.%d"}`, round, req, i)
			}
		}
		if sh.batch == 0 {
			item(0)
			return b.Bytes()
		}
		b.WriteString(`{"tasks":[`)
		for i := range sh.batch {
			if i > 0 {
				b.WriteByte(',')
			}
			item(i)
		}
		b.WriteString(`]}`)
		return b.Bytes()
	}
	bodies := make([][]byte, requests)
	for i := range bodies {
		bodies[i] = body(i)
	}
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	const allocated, gcs = "go_memstats_alloc_bytes_total", "go_gc_duration_seconds_count"
	const finished = `pegasus_tasks_finished_total{outcome="completed"}`
	m0, merr := readMetrics(ctx, d.url, allocated, gcs, finished)
	cpu0 := procCPU(d)
	load := loadAvg()
	t0 := time.Now()
	var wg sync.WaitGroup
	for range f.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= requests {
					return
				}
				req, err := http.NewRequestWithContext(ctx, "POST", d.url+sh.path, bytes.NewReader(bodies[i]))
				if err != nil {
					fail(err)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				if sh.broker {
					req.Header.Set("X-Agent-ID", "bench")
				}
				resp, err := hc.Do(req)
				if err != nil {
					fail(err)
					return
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					fail(fmt.Errorf("%s: %d %s", sh.path, resp.StatusCode, data))
					return
				}
			}
		}()
	}
	wg.Wait()
	res := enqueueResult{tasks: requests * per, elapsed: time.Since(t0), load: load, load2: loadAvg()}
	if cpu0 >= 0 {
		if cpu1 := procCPU(d); cpu1 >= 0 {
			res.cpu = cpu1 - cpu0
		}
	}
	res.rss, res.peak = procRSS(d)
	if m1, err := readMetrics(ctx, d.url, allocated, gcs, finished); merr == nil && err == nil && m0[allocated] > 0 {
		res.alloc, res.gcs = m1[allocated]-m0[allocated], m1[gcs]-m0[gcs]
		res.finished = m1[finished] - m0[finished]
	}
	return res, firstErr
}

// procRSS is the daemon's resident memory now and its peak (VmRSS and
// VmHWM of /proc/PID/status), in bytes, or zeros when unknown. With the
// tasks still queued (the broker shapes), it is what a container's limit
// must hold at that queue length.
func procRSS(d *daemonProc) (rss, peak int64) {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			continue
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak
}

// procCPU is the user and system time the daemon used so far (from
// /proc/PID/stat), or -1 when unknown (a daemon running elsewhere).
func procCPU(d *daemonProc) time.Duration {
	if d.cmd == nil || d.cmd.Process == nil {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	// Fields after the command name (which may hold spaces, in parens):
	// utime and stime are the 14th and 15th fields of the line.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(fields[11], 10, 64)
	st, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz
}
