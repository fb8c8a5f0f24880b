package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

func scrape(t *testing.T, r response) map[string]*dto.MetricFamily {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", r.status, r.body)
	}
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(r.body)))
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	return mfs
}

// value returns the sample of family name whose labels include want.
func value(mfs map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || lp.GetName() == want[i] && lp.GetValue() == want[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

// TestMetricsAfter100Tasks: a scrape after 100 tasks shows the counts of
// GET /v1/stats.
func TestMetricsAfter100Tasks(t *testing.T) {
	cfg := testConfig(t)
	cfg.engine.DisableReflection = true
	td := startDaemon(t, cfg)
	inputs := []string{"what time is it?", "hello", "?"} // "?" suspends: the model asks
	ids := make(chan string, 100)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 100; i += 4 {
				ids <- td.submit(inputs[i%len(inputs)])
			}
		}()
	}
	wg.Wait()
	close(ids)
	n := 0
	for id := range ids {
		td.waitTask(id)
		n++
	}
	// Cancel a few suspended tasks so that failures are counted too.
	var page struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
		} `json:"tasks"`
	}
	td.do("GET", "/v1/tasks?state=suspended&limit=5", "").json(t, &page)
	for _, tk := range page.Tasks {
		if r := td.do("POST", "/v1/tasks/"+tk.TaskID+"/cancel", ""); r.status != 200 {
			t.Fatalf("cancel: %d %s", r.status, r.body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := td.d.engine.Metrics().WaitFor(ctx, td.d.engine.Log().Head()); err != nil {
		t.Fatal(err)
	}

	var stats struct {
		Tasks struct {
			Tasks     int64            `json:"tasks"`
			Completed int64            `json:"completed"`
			Failed    int64            `json:"failed"`
			ByState   map[string]int64 `json:"by_state"`
		} `json:"tasks"`
		Log struct {
			Head uint64 `json:"head"`
		} `json:"log"`
	}
	td.do("GET", "/v1/stats", "").json(t, &stats)
	mfs := scrape(t, td.do("GET", "/metrics", ""))

	if stats.Tasks.Tasks != 100 || n != 100 {
		t.Fatalf("stats count %d tasks after submitting %d", stats.Tasks.Tasks, n)
	}
	for _, st := range []string{"idle", "reasoning", "acting", "suspended", "completed", "failed"} {
		got, ok := value(mfs, "pegasus_tasks", "state", st)
		if !ok || got != float64(stats.Tasks.ByState[st]) {
			t.Errorf("pegasus_tasks{state=%q} = %v (present %v), /v1/stats says %d", st, got, ok, stats.Tasks.ByState[st])
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   int64
	}{
		{"pegasus_tasks_created_total", nil, stats.Tasks.Tasks},
		{"pegasus_tasks_finished_total", []string{"outcome", "completed"}, stats.Tasks.Completed},
		{"pegasus_tasks_finished_total", []string{"outcome", "failed"}, stats.Tasks.Failed},
		{"pegasus_task_failures_total", []string{"reason", "cancelled"}, int64(len(page.Tasks))},
	} {
		if got, _ := value(mfs, c.name, c.labels...); got != float64(c.want) {
			t.Errorf("%s%v = %v, want %d", c.name, c.labels, got, c.want)
		}
	}
	if stats.Tasks.Failed == 0 || stats.Tasks.Completed == 0 {
		t.Errorf("the workload should complete and fail tasks: %+v", stats.Tasks)
	}
	// Every event since the start is counted once, by type.
	var events float64
	for _, m := range mfs["pegasus_events_appended_total"].GetMetric() {
		events += m.GetCounter().GetValue()
	}
	if events != float64(stats.Log.Head) {
		t.Errorf("events appended %v, log head %d (a fresh log: every event is since the start)", events, stats.Log.Head)
	}
	if got, _ := value(mfs, "pegasus_eventlog_head_sequence"); got != float64(stats.Log.Head) {
		t.Errorf("head %v, want %d", got, stats.Log.Head)
	}
	// The requests above are counted by route pattern.
	if got, _ := value(mfs, "pegasus_http_requests_total", "route", "POST /v1/tasks", "code", "201"); got != 100 {
		t.Errorf("POST /v1/tasks 201 counted %v times, want 100", got)
	}
}

// TestMetricsAuth: /metrics is behind the token, unless --metrics-addr
// serves it on its own loopback listener; that address must be loopback.
func TestMetricsAuth(t *testing.T) {
	cfg := testConfig(t)
	cfg.server.Token = "m3trics"
	td := startDaemon(t, cfg)
	if r := td.do("GET", "/metrics", ""); r.status != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token: %d", r.status)
	}
	scrape(t, td.do("GET", "/metrics", "", "Authorization", "Bearer m3trics"))

	cfg = testConfig(t)
	cfg.server.Token = "m3trics"
	cfg.metricsAddr = "127.0.0.1:0"
	td = startDaemon(t, cfg)
	if r := td.do("GET", "/metrics", "", "Authorization", "Bearer m3trics"); r.status != http.StatusNotFound {
		t.Errorf("GET /metrics on the API's listener with --metrics-addr: %d, want 404", r.status)
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", td.d.metricsLn.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /metrics on --metrics-addr: %d", resp.StatusCode)
	}

	if _, err := listenMetrics("0.0.0.0:0"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("--metrics-addr 0.0.0.0:0: %v, want a refusal", err)
	}
}
