package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkEnqueue creates tasks from 16 clients through a daemon in this
// process, over HTTP on loopback: broker tasks (which no worker takes)
// and agent tasks, one per request and in batches of 100. It reports
// tasks/s; run it with -cpuprofile to see the daemon's CPU per enqueue.
//
//	go test -run '^$' -bench BenchmarkEnqueue -benchtime 20000x ./cmd/pegasusd
func BenchmarkEnqueue(b *testing.B) {
	for _, c := range []struct {
		name, path, item string
		batch            int
	}{
		{"broker/single", "/api/v1/tasks", `{"title":"job %d","required_capabilities":["nobody"]}`, 0},
		{"broker/batch100", "/api/v1/tasks:batch", `{"title":"job %d","required_capabilities":["nobody"]}`, 100},
		{"agent/single", "/v1/tasks", `{"input":"job %d"}`, 0},
		{"agent/batch100", "/v1/tasks:batch", `{"input":"job %d"}`, 100},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg := testConfig(b)
			cfg.server.MaxBodyBytes = 1 << 20
			td := startDaemon(b, cfg)
			tr := &http.Transport{MaxIdleConnsPerHost: 16}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: time.Minute}
			per := max(c.batch, 1)
			var next atomic.Int64
			body := func(i int) []byte {
				if c.batch == 0 {
					return fmt.Appendf(nil, c.item, i)
				}
				items := make([]string, c.batch)
				for j := range items {
					items[j] = fmt.Sprintf(c.item, i*c.batch+j)
				}
				return []byte(batchBody(items...))
			}
			b.SetParallelism(8) // 16 clients on 2 cores
			t0 := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("POST", td.url+c.path, bytes.NewReader(body(int(next.Add(1)))))
					req.Header.Set("X-Agent-ID", "bench")
					resp, err := hc.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					data, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						b.Errorf("%d %s", resp.StatusCode, data)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*per)/time.Since(t0).Seconds(), "tasks/s")
		})
	}
}
