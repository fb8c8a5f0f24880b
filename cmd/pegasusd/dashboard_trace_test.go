package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// traceSpan is a span as GET /v1/tasks/{id}/trace answers it.
type traceSpan struct {
	SpanID     string         `json:"span_id"`
	Parent     string         `json:"parent_span_id"`
	Name       string         `json:"name"`
	Kind       string         `json:"kind"`
	Status     string         `json:"status"`
	Open       bool           `json:"open"`
	Attributes map[string]any `json:"attributes"`
}

// TestDashboardTraceOfAWorkerTool: through a real daemon, a scripted
// model and a worker on the worker SDK, a task calls a worker tool. Its
// trace (GET /v1/tasks/{id}/trace) is the task with its admission, its two
// model calls and the tool call, under which the broker task that ran it
// waits for a worker and is held by it; the gen_ai attributes are set. The
// task page's waterfall draws a bar for each of those spans, and axe-core
// finds no violation on it.
func TestDashboardTraceOfAWorkerTool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon")
	}
	model := startScriptedModel(t, "scripted-1", 0)
	r := startRig(t, modelConfig(model)+workerToolsConfig)
	goWorker(t, r.p.url, "go-reverser", "reverse", reverse)
	id := r.submit(`call reverse {"text":"og olleh"}`)
	if task := r.wait(id); task.State != "completed" {
		t.Fatalf("the task is %s: %s", task.State, task.Error)
	}

	res, err := http.Get(r.p.url + "/v1/tasks/" + id + "/trace")
	if err != nil {
		t.Fatal(err)
	}
	var trace struct {
		TaskID  string      `json:"task_id"`
		TraceID string      `json:"trace_id"`
		Spans   []traceSpan `json:"spans"`
	}
	err = json.NewDecoder(res.Body).Decode(&trace)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET trace: %d %v", res.StatusCode, err)
	}
	// The tree, by name and kind (ids and times differ from run to run).
	depth := map[string]int{}
	var tree strings.Builder
	for _, s := range trace.Spans {
		d := 0
		if s.Parent != "" {
			pd, ok := depth[s.Parent]
			if !ok {
				t.Fatalf("span %s: parent %s is not a span before it", s.Name, s.Parent)
			}
			d = pd + 1
		}
		depth[s.SpanID] = d
		fmt.Fprintf(&tree, "%s%s [%s] %s\n", strings.Repeat("  ", d), s.Name, s.Kind, s.Status)
	}
	want := `task general [task] ok
  admission [admission] unset
  chat scripted-1 [model] ok
  execute_tool reverse [tool] ok
    dispatch tool reverse [worker] ok
      waiting for a worker [suspend] unset
      attempt 1 go-reverser [attempt] ok
  chat scripted-1 [model] ok
`
	if tree.String() != want {
		t.Errorf("the trace:\n%s\nwant:\n%s", tree.String(), want)
	}
	attr := func(i int, k string) any { return trace.Spans[i].Attributes[k] }
	for i, s := range trace.Spans {
		switch s.Kind {
		case "model":
			if attr(i, "gen_ai.operation.name") != "chat" || attr(i, "gen_ai.request.model") != "scripted-1" ||
				attr(i, "gen_ai.usage.input_tokens") == nil || attr(i, "gen_ai.response.finish_reasons") == nil {
				t.Errorf("model call %d: %v", i, s.Attributes)
			}
		case "tool":
			if attr(i, "gen_ai.operation.name") != "execute_tool" || attr(i, "gen_ai.tool.name") != "reverse" ||
				attr(i, "gen_ai.tool.call.id") == nil || attr(i, "pegasus.tool.source") != "worker:reverse" {
				t.Errorf("tool call: %v", s.Attributes)
			}
			if attr(i, "gen_ai.tool.call.arguments") != nil {
				t.Errorf("the tool's arguments without contents=true")
			}
		}
	}

	exe := findChromium(t)
	b := newBrowser(t, exe)
	b.do("open the task", chromedp.Navigate(r.p.url+"/#/tasks/"+id))
	b.until("the waterfall", fmt.Sprintf(`document.querySelectorAll("#waterfall > li.wf-row .wf-bar").length === %d`, len(trace.Spans)))
	for kind, n := range map[string]int{"model": 2, "tool": 1, "worker": 1, "attempt": 1} {
		if got := eval[int](b, fmt.Sprintf(`document.querySelectorAll('#waterfall > li[data-kind=%q] .wf-bar').length`, kind)); got != n {
			t.Errorf("%d %s bars, want %d", got, kind, n)
		}
	}
	b.shot("trace")
	b.accessible("task with a worker tool")
}
