package main

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkBrokerThroughput measures tasks/s through the broker: 16
// clients create no-op tasks over HTTP while 8 workers (max_tasks 4)
// long-poll, report progress-free completions, every append synced. It
// reports tasks/s and p50/p99 create-to-complete.
//
//	go test ./cmd/pegasusd -run '^$' -bench BrokerThroughput -benchtime 2000x
func BenchmarkBrokerThroughput(b *testing.B) {
	cfg := testConfig(b)
	cfg.maxBody = 1 << 20
	td := startDaemon(b, cfg)
	const clients, workers = 16, 8
	for w := range workers {
		id := fmt.Sprintf("bw%d", w)
		if r := td.do("PUT", "/api/v1/agents/"+id, `{"max_tasks":4}`, "X-Agent-ID", id); r.status != 200 {
			b.Fatalf("register: %d %s", r.status, r.body)
		}
	}
	var created sync.Map // task id -> create time
	var done atomic.Int64
	lat := make(chan time.Duration, b.N)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := td.do("GET", "/api/v1/tasks?agent="+id+"&status=assigned&wait=1s", "", "X-Agent-ID", id)
				var page struct {
					Tasks []dispatchJSON `json:"tasks"`
				}
				r.json(b, &page)
				for _, t := range page.Tasks {
					if r := td.do("POST", "/api/v1/tasks/"+t.TaskID+"/complete", `{}`, "X-Agent-ID", id); r.status != 200 {
						b.Errorf("complete: %d %s", r.status, r.body)
						return
					}
					if at, ok := created.Load(t.TaskID); ok {
						lat <- time.Since(at.(time.Time))
					}
					done.Add(1)
				}
			}
		}(fmt.Sprintf("bw%d", w))
	}
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var cw sync.WaitGroup
	for range clients {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for next.Add(1) <= int64(b.N) {
				at := time.Now()
				r := td.do("POST", "/api/v1/tasks", `{"title":"noop"}`, "X-Agent-ID", "client")
				if r.status != 201 {
					b.Errorf("create: %d %s", r.status, r.body)
					return
				}
				var j dispatchJSON
				r.json(b, &j)
				created.Store(j.TaskID, at)
			}
		}()
	}
	cw.Wait()
	for done.Load() < int64(b.N) && !b.Failed() {
		td.do("GET", "/api/v1/tasks?status=pending&owner=nobody&wait=50ms", "", "X-Agent-ID", "client")
	}
	elapsed := time.Since(start)
	b.StopTimer()
	close(stop)
	wg.Wait()
	close(lat)
	var ds []time.Duration
	for d := range lat {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tasks/s")
	if len(ds) > 0 {
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, "p99-ms")
	}
}
