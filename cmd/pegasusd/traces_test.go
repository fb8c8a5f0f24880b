package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/traces"
	"github.com/pegasus-engine/pegasus/traces/otlp"
	"github.com/pegasus-engine/pegasus/traces/otlp/jaegertest"
)

// expectedTraces maps the root tasks of the log in dir (all of them
// without ids) as the export does, by trace id (hex).
func expectedTraces(t *testing.T, dir string, ids ...string) map[string][]traces.Span {
	t.Helper()
	l, err := eventlog.Open(dir, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := replay.FromLog(l)
	ctx := context.Background()
	if len(ids) == 0 {
		if ids, err = otlp.RootTasks(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string][]traces.Span{}
	for _, id := range ids {
		spans, err := otlp.Collect(ctx, r, id, 0, false, traces.Options{})
		if err != nil || len(spans) == 0 {
			t.Fatalf("task %s: %d spans, %v", id, len(spans), err)
		}
		out[hex.EncodeToString(spans[0].TraceID[:])] = spans
	}
	return out
}

func hexID(b [8]byte) string { return hex.EncodeToString(b[:]) }

// checkTrace waits until Jaeger holds every span of want, then checks
// that it holds each once, nothing else, with want's parents, names and
// times.
func checkTrace(t *testing.T, j *jaegertest.Jaeger, tid string, want []traces.Span) []jaegertest.Span {
	t.Helper()
	ids := map[string]traces.Span{}
	for _, s := range want {
		ids[hexID(s.SpanID)] = s
	}
	got := j.WaitTrace(t, tid, func(spans []jaegertest.Span) bool {
		n := 0
		for _, s := range spans {
			if _, ok := ids[s.SpanID]; ok {
				n++
			}
		}
		return n >= len(ids)
	})
	seen := map[string]int{}
	for _, s := range got {
		seen[s.SpanID]++
		w, ok := ids[s.SpanID]
		switch {
		case !ok:
			t.Errorf("trace %s: span %s %q is not the mapping's", tid, s.SpanID, s.OperationName)
		case seen[s.SpanID] > 1:
			t.Errorf("trace %s: span %s %q is in Jaeger %d times", tid, s.SpanID, s.OperationName, seen[s.SpanID])
		case s.OperationName != w.Name || s.StartTime != w.Start.UnixMicro() || s.Duration != w.End.Sub(w.Start).Microseconds():
			t.Errorf("trace %s: span %s is %q %d+%d, the mapping's %q %d+%d", tid, s.SpanID, s.OperationName, s.StartTime, s.Duration,
				w.Name, w.Start.UnixMicro(), w.End.Sub(w.Start).Microseconds())
		case w.Parent == [8]byte{} && s.Parent() != "" || w.Parent != [8]byte{} && s.Parent() != hexID(w.Parent):
			t.Errorf("trace %s: span %s %q has parent %q, want %q", tid, s.SpanID, s.OperationName, s.Parent(), hexID(w.Parent))
		}
	}
	return got
}

// tagsOf lists a span's attributes as key=value, sorted, for comparisons.
func tagsOf(s jaegertest.Span) string {
	var kv []string
	for _, tg := range s.Tags {
		kv = append(kv, fmt.Sprintf("%s=%v", tg.Key, tg.Value))
	}
	sort.Strings(kv)
	return strings.Join(kv, " ")
}

// TestTracesJaeger runs a daemon exporting live to a real Jaeger: a task
// with a model call and a built-in tool call, and a broker task run by the
// agent whose first child asks a question (a suspension) and is
// cancelled, whose retry's child is answered and calls a tool. Each root
// task's trace is read back through Jaeger's query API: the spans of the
// mapping, once each, with their parents, and the GenAI attributes. The
// same tasks exported offline with pegasus-replay from a checkpoint into a
// second Jaeger give the same traces, span for span.
func TestTracesJaeger(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Jaeger and pegasus-replay")
	}
	j := jaegertest.Start(t)
	cfg := testConfig(t)
	cfg.engine.Traces = engine.TracesOptions{Enabled: true, OTLP: otlp.Options{Endpoint: j.OTLP}, OpenInterval: -1}
	cfg.engine.Broker.AgentWorker = true
	cfg.engine.DisableReflection = true // the checkpoint below is the tasks' whole story
	td := startDaemon(t, cfg)

	timeTask := td.submit("what time is it?")
	if tj := td.waitTask(timeTask); tj.State != fsm.StateCompleted {
		t.Fatalf("task: %s", tj.State)
	}
	ask, _, _ := retryThroughAChild(t, td, "general", "what time is it?")

	r := td.do("POST", "/v1/admin/checkpoint", "")
	var cp struct {
		Path string `json:"path"`
	}
	r.json(t, &cp)
	mustStatus(t, r, 201)
	want := expectedTraces(t, cp.Path, timeTask, ask.TaskID)

	live := map[string][]jaegertest.Span{}
	kinds := map[traces.Kind]int{}
	for tid, spans := range want {
		live[tid] = checkTrace(t, j, tid, spans)
		byID := map[string]jaegertest.Span{}
		for _, s := range live[tid] {
			byID[s.SpanID] = s
		}
		for _, s := range spans {
			kinds[s.Kind]++
			js := byID[hexID(s.SpanID)]
			for _, a := range s.Attrs {
				if v, ok := js.Tag(string(a.Key)); !ok || fmt.Sprint(v) != fmt.Sprint(jsonValue(a.Value.AsInterface())) {
					t.Errorf("span %q: attribute %s = %v in Jaeger, %v in the mapping", s.Name, a.Key, v, a.Value.AsInterface())
				}
			}
			switch s.Kind {
			case traces.KindModel:
				for _, k := range []string{"gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} {
					if _, ok := js.Tag(k); !ok {
						t.Errorf("model span %q has no %s: %s", s.Name, k, tagsOf(js))
					}
				}
				if v, _ := js.Tag("gen_ai.operation.name"); v != "chat" {
					t.Errorf("model span %q: gen_ai.operation.name %v", s.Name, v)
				}
			case traces.KindTool:
				if v, _ := js.Tag("gen_ai.operation.name"); v != "execute_tool" {
					t.Errorf("tool span %q: gen_ai.operation.name %v", s.Name, v)
				}
				if v, _ := js.Tag("gen_ai.tool.name"); v != "current_time" {
					t.Errorf("tool span %q: gen_ai.tool.name %v", s.Name, v)
				}
			}
		}
		if root := spans[0]; byID[hexID(root.SpanID)].Parent() != "" {
			t.Errorf("trace %s: the root span has a parent", tid)
		}
	}
	for _, k := range []traces.Kind{traces.KindTask, traces.KindModel, traces.KindTool, traces.KindSuspend, traces.KindWorker} {
		if kinds[k] == 0 {
			t.Errorf("no %s span in the traces (%v)", k, kinds)
		}
	}
	if n := len(want[hex.EncodeToString(traceOf(t, want, ask.TaskID))]); n < 4 {
		t.Errorf("the broker task's trace has %d spans", n)
	}

	// Offline, from the checkpoint, into a second Jaeger: the same spans.
	j2 := jaegertest.Start(t)
	replayBin := goBuild(t, "pegasus-replay", "../pegasus-replay")
	out, err := exec.Command(replayBin, "-d", cp.Path, "export", "--otlp", j2.OTLP, timeTask, ask.TaskID).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "exported 2 traces") {
		t.Fatalf("pegasus-replay export --otlp: %v\n%s", err, out)
	}
	for tid, spans := range want {
		offline := checkTrace(t, j2, tid, spans)
		if a, b := spanSummary(live[tid]), spanSummary(offline); a != b {
			t.Errorf("trace %s live:\n%s\noffline:\n%s", tid, a, b)
		}
	}
	var metrics strings.Builder
	resp, err := http.Get(td.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(&metrics, resp.Body)
	resp.Body.Close()
	if n := metricValue(metrics.String(), "pegasus_traces_exported_total"); n < 2 {
		t.Errorf("pegasus_traces_exported_total %v", n)
	}
}

// traceOf returns the trace id of root task id among want.
func traceOf(t *testing.T, want map[string][]traces.Span, id string) []byte {
	t.Helper()
	for _, spans := range want {
		if spans[0].Task == id {
			return spans[0].TraceID[:]
		}
	}
	t.Fatalf("no trace of %s", id)
	return nil
}

// jsonValue is how Jaeger's JSON gives an attribute's value back.
func jsonValue(v any) any {
	switch v := v.(type) {
	case int64:
		return float64(v)
	case int:
		return float64(v)
	case []string:
		return `["` + strings.Join(v, `","`) + `"]`
	}
	return v
}

// spanSummary is a trace's spans as ids, parents, names, times and
// attributes, sorted.
func spanSummary(spans []jaegertest.Span) string {
	var lines []string
	for _, s := range spans {
		lines = append(lines, fmt.Sprintf("%s<%s %q %d+%d %s", s.SpanID, s.Parent(), s.OperationName, s.StartTime, s.Duration, tagsOf(s)))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

var metricLine = regexp.MustCompile(`(?m)^(\S+) (\S+)$`)

// metricValue returns the value of the unlabelled series name in a
// /metrics page, or -1.
func metricValue(page, name string) float64 {
	for _, m := range metricLine.FindAllStringSubmatch(page, -1) {
		if m[1] == name {
			v, _ := strconv.ParseFloat(m[2], 64)
			return v
		}
	}
	return -1
}

// TestTracesCrash kills the exporting daemon with SIGKILL under load
// several times, then lets every task finish and the export catch up:
// every root task's trace is then in Jaeger, each span once (a trace sent
// again after a kill is the same spans, which Jaeger keeps once; a span is
// never sent changed).
func TestTracesCrash(t *testing.T) {
	seed, rng := crashRun(t)
	j := jaegertest.Start(t)
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	flags := []string{"--otlp-endpoint", j.OTLP, "--otlp-open-interval", "0"}
	inputs := []string{"what time is it?", "hello", "remember the door code is 42"}
	acked := map[string]bool{}
	for cycle := range 4 {
		p := startProc(t, bin, data, flags...)
		killUnderLoad(t, p, inputs, seed, cycle, 3, 2+rng.IntN(8), acked)
	}
	p := startProc(t, bin, data, flags...)
	finishAll(t, p, acked)
	p.stop(t)
	head := logHead(t, data)
	p = startProc(t, bin, data, flags...)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(p.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if c := metricValue(string(page), "pegasus_traces_cursor"); c >= float64(head) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export's cursor did not reach %d within a minute\n%s", head, page)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.kill(t)
	want := expectedTraces(t, data)
	for tid, spans := range want {
		checkTrace(t, j, tid, spans)
	}
	t.Logf("%d traces in Jaeger once each after 4 kills (%d acknowledged tasks)", len(want), len(acked))
}

// tracingDocSetup runs docs/tracing.md's examples against a Jaeger of
// their own: the daemon exports to it, and the addresses the document
// names (Jaeger's defaults) are its.
func tracingDocSetup(t *testing.T, cfg *config) map[string]string {
	j := jaegertest.Start(t)
	cfg.engine.Traces = engine.TracesOptions{Enabled: true, OTLP: otlp.Options{Endpoint: j.OTLP}}
	return map[string]string{
		"http://127.0.0.1:4318": j.OTLP,
		"127.0.0.1:16686":       strings.TrimPrefix(j.Query, "http://"),
	}
}

// TestTracesOpenInterval: a root task that waits for an answer has its
// finished spans sent every --otlp-open-interval, not its open ones (the
// task's own span); once answered it ends, and its trace is then whole in
// Jaeger, each span once (those sent while it ran were not sent changed).
func TestTracesOpenInterval(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Jaeger")
	}
	j := jaegertest.Start(t)
	cfg := testConfig(t)
	cfg.engine.Traces = engine.TracesOptions{Enabled: true, OTLP: otlp.Options{Endpoint: j.OTLP}, OpenInterval: 50 * time.Millisecond}
	cfg.engine.DisableReflection = true
	td := startDaemon(t, cfg)
	id := td.submit("?")
	if tj := td.waitTask(id); tj.State != fsm.StateSuspended {
		t.Fatalf("task: %s", tj.State)
	}
	ctx := context.Background()
	all, err := otlp.Collect(ctx, td.d.engine.History(), id, 0, false, traces.Options{})
	if err != nil || len(all) == 0 || !all[0].Open {
		t.Fatalf("the running task's spans: %+v, %v", all, err)
	}
	root := all[0].SpanID
	running, err := otlp.Collect(ctx, td.d.engine.History(), id, 0, true, traces.Options{})
	if err != nil || len(running) == 0 {
		t.Fatalf("the running task's finished spans: %d, %v", len(running), err)
	}
	tid := hex.EncodeToString(running[0].TraceID[:])
	got := j.WaitTrace(t, tid, func(s []jaegertest.Span) bool { return len(s) >= len(running) })
	for _, s := range got {
		if s.SpanID == hexID(root) {
			t.Fatalf("the running task's own span was sent: %+v", s)
		}
	}
	mustStatus(t, td.do("POST", "/v1/tasks/"+id+"/messages", `{"text":"what time is it?"}`), 200)
	if tj := td.waitTask(id); tj.State != fsm.StateCompleted {
		t.Fatalf("task after the answer: %s", tj.State)
	}
	r := td.do("POST", "/v1/admin/checkpoint", "")
	var cp struct {
		Path string `json:"path"`
	}
	r.json(t, &cp)
	checkTrace(t, j, tid, expectedTraces(t, cp.Path, id)[tid])
}

// TestTracesFlags: a bad --otlp-endpoint or interval stops pegasusd
// before it starts; the export is off by default and OTEL_EXPORTER_OTLP_*
// turn it on.
func TestTracesFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--otlp-endpoint", "127.0.0.1:4318"}, "--otlp-endpoint"},
		{[]string{"--otlp-endpoint", "http://127.0.0.1:4318", "--otlp-open-interval", "-1s"}, "--otlp-open-interval"},
	} {
		var stderr strings.Builder
		code := run(append([]string{"pegasusd", "serve", "--data-dir", t.TempDir()}, c.args...), nil, io.Discard, &stderr)
		if code != exitError || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d: %s", c.args, code, stderr.String())
		}
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	app := newApp(&client{})
	var got engine.TracesOptions
	parse := func(args ...string) {
		t.Helper()
		serve := &cli.Command{Name: "serve", Flags: tracesFlags(), Action: func(cc *cli.Context) error {
			var err error
			got, err = tracesConfigFrom(cc)
			return err
		}}
		app.Commands = []*cli.Command{serve}
		if err := app.Run(append([]string{"pegasusd", "serve"}, args...)); err != nil {
			t.Fatal(err)
		}
	}
	parse()
	if got.Enabled {
		t.Fatalf("the export is on by default: %+v", got)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	parse("--otlp-open-interval", "0")
	if !got.Enabled || got.OTLP.Endpoint != "" || got.OpenInterval >= 0 {
		t.Fatalf("with OTEL_EXPORTER_OTLP_ENDPOINT and --otlp-open-interval 0: %+v", got)
	}
}

// jaegerDaemon starts a Jaeger and a daemon that exports to it, with no
// open interval and no reflection (skipped with -short).
func jaegerDaemon(t *testing.T) (*jaegertest.Jaeger, *config, *testDaemon) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Jaeger")
	}
	j := jaegertest.Start(t)
	cfg := testConfig(t)
	cfg.engine.Traces = engine.TracesOptions{Enabled: true, OTLP: otlp.Options{Endpoint: j.OTLP}, OpenInterval: -1}
	cfg.engine.DisableReflection = true
	return j, cfg, startDaemon(t, cfg)
}

// TestTracesOpenIntervalRestart: a root task that started before a restart
// and still runs after it gets its finished spans sent every interval by
// the restarted daemon, not only at its end.
func TestTracesOpenIntervalRestart(t *testing.T) {
	j, cfg, td := jaegerDaemon(t)
	id := td.submit("?")
	if tj := td.waitTask(id); tj.State != fsm.StateSuspended {
		t.Fatalf("task: %s", tj.State)
	}
	cfg.engine.Traces.OpenInterval = 50 * time.Millisecond
	td = td.restart(cfg)
	running, err := otlp.Collect(context.Background(), td.d.engine.History(), id, 0, true, traces.Options{})
	if err != nil || len(running) == 0 {
		t.Fatalf("the running task's finished spans: %d, %v", len(running), err)
	}
	tid := hex.EncodeToString(running[0].TraceID[:])
	j.WaitTrace(t, tid, func(s []jaegertest.Span) bool { return len(s) >= len(running) })
}

// TestTracesBrokerChildWithoutCausation: a broker task created through the
// API with a parent_task_id is caused by none of its parent's events, so no
// tree holds it: it is exported live as a trace of its own.
func TestTracesBrokerChildWithoutCausation(t *testing.T) {
	j, _, td := jaegerDaemon(t)
	parent := td.submit("what time is it?")
	if tj := td.waitTask(parent); tj.State != fsm.StateCompleted {
		t.Fatalf("task: %s", tj.State)
	}
	child := dtask(t, td.as("ops", "POST", "/api/v1/tasks", fmt.Sprintf(`{"title":"orphan","parent_task_id":%q}`, parent)))
	mustStatus(t, td.as("w", "PUT", "/api/v1/agents/w", `{"capabilities":["general"]}`), 200)
	if got := td.poll("w"); len(got) != 1 || got[0].TaskID != child.TaskID {
		t.Fatalf("the worker got %+v", got)
	}
	mustStatus(t, td.as("w", "POST", "/api/v1/tasks/"+child.TaskID+"/complete", `{"result":{"ok":true}}`), 200)
	spans, err := otlp.Collect(context.Background(), td.d.engine.History(), child.TaskID, 0, false, traces.Options{})
	if err != nil || len(spans) == 0 {
		t.Fatalf("the broker task's spans: %d, %v", len(spans), err)
	}
	tid := hex.EncodeToString(spans[0].TraceID[:])
	for _, s := range j.WaitTrace(t, tid, func(s []jaegertest.Span) bool { return len(s) >= len(spans) }) {
		if s.SpanID == hexID(spans[0].SpanID) {
			if v, _ := s.Tag("pegasus.parent_task_id"); v != parent {
				t.Fatalf("the broker task's span: pegasus.parent_task_id %v, want %s", v, parent)
			}
			return
		}
	}
	t.Fatalf("trace %s: no span %x", tid, spans[0].SpanID)
}
