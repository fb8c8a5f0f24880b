package metrics

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/retention"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startAgent runs an agent with the offline model over an in-memory log,
// and the metrics' subscription from the log's first event.
func startAgent(t *testing.T) (*agent.Agent, *Metrics) {
	t.Helper()
	ctx := testCtx(t)
	l, err := eventlog.Open("data", &eventlog.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	// No reflection: it runs after a task completes, and the tests
	// compare counts once every task has settled.
	a, err := agent.New(l, agent.Options{DisableReflection: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m := New(a, l, Options{})
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx, 1) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if err := a.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return a, m
}

// runTasks submits tasks and waits until each is finished or suspended,
// then until the metrics have read the whole log.
func runTasks(t *testing.T, a *agent.Agent, m *Metrics, inputs ...string) {
	t.Helper()
	ctx := testCtx(t)
	for _, in := range inputs {
		id, err := a.Submit(ctx, in, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.WaitUntil(ctx, id, func(t *fsm.Task) bool { return agent.Done(t) || t.State == fsm.StateSuspended }); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.WaitFor(ctx, m.l.Head()); err != nil {
		t.Fatal(err)
	}
}

func TestLint(t *testing.T) {
	a, m := startAgent(t)
	runTasks(t, a, m, "what time is it?", "remember that the sky is blue", "?")
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// Every family the docs promise is present after a few tasks.
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	for _, name := range []string{"pegasus_tasks", "pegasus_tasks_active", "pegasus_events_appended_total",
		"pegasus_eventlog_commit_events", "pegasus_eventlog_commit_latency_seconds", "pegasus_model_calls_total",
		"pegasus_model_call_duration_seconds", "pegasus_model_tokens_total", "pegasus_tool_calls_total",
		"pegasus_fold_lag_events", "pegasus_queue_depth", "pegasus_queue_oldest_age_seconds", "pegasus_runtime_slots",
		"pegasus_eventlog_disk_usage_bytes", "pegasus_eventlog_compactions_total", "pegasus_eventlog_wal_written_bytes_total",
		"pegasus_eventlog_wal_fsync_duration_seconds", "pegasus_task_duration_seconds"} {
		if !got[name] {
			t.Errorf("no %s after three tasks", name)
		}
	}

	// docs/metrics.md lists every series, and nothing else.
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(pegasus_[a-z_]+)` \\|").FindAllSubmatch(doc, -1) {
		listed[string(m[1])] = true
	}
	for name := range got {
		if !listed[name] {
			t.Errorf("docs/metrics.md does not list %s", name)
		}
	}
	// Series that need HTTP requests or a failed task to appear.
	later := map[string]bool{"pegasus_http_requests_total": true, "pegasus_http_request_duration_seconds": true,
		"pegasus_task_failures_total": true,
		// Rate-limited models only (docs/limits.md).
		"pegasus_model_rate_waiting_calls": true, "pegasus_model_rate_window_tokens": true,
		"pegasus_model_rate_window_requests": true,
		// --cluster only.
		"pegasus_cluster_appends_total": true, "pegasus_cluster_batches_total": true,
		"pegasus_cluster_batches_refused_total": true, "pegasus_cluster_messages_total": true,
		// Registered by the engine (engine/storage.go; its test checks them).
		"pegasus_eventlog_write_stall_duration_seconds": true, "pegasus_eventlog_flush_duration_seconds": true,
		"pegasus_eventlog_flushed_bytes_total": true, "pegasus_eventlog_compaction_duration_seconds": true,
		"pegasus_task_stage_duration_seconds": true,
		// --otlp-endpoint only (engine/traces.go; docs/tracing.md's run reads them).
		"pegasus_traces_exported_total": true, "pegasus_trace_spans_exported_total": true,
		"pegasus_traces_export_failures_total": true, "pegasus_traces_dropped_total": true,
		"pegasus_traces_cursor": true, "pegasus_traces_queue": true}
	for name := range listed {
		if !got[name] && !later[name] {
			t.Errorf("docs/metrics.md lists %s, which the registry does not expose", name)
		}
	}
}

// TestCountsFromTheLog checks the event-derived counters against an
// independent count over the log, and the commit groups against the log's
// own commit counter.
func TestCountsFromTheLog(t *testing.T) {
	a, m := startAgent(t)
	runTasks(t, a, m, "what time is it?", "hello", "what time is it?", "?")

	byType := map[string]float64{}
	var calls, prompt, completion, tools float64
	it := m.l.Scan(1, eventlog.Forward)
	for it.Next() {
		ev := it.Event()
		byType[ev.Type]++
		fe, err := replay.Decode(ev)
		if err != nil {
			continue
		}
		switch b := fe.Body.(type) {
		case *fsm.ModelCalledBody:
			calls++
			prompt += float64(b.PromptTokens)
			completion += float64(b.CompletionTokens)
		case *fsm.ToolCallResultBody:
			tools++
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	it.Close()
	for typ, n := range byType {
		if got := testutil.ToFloat64(m.events.WithLabelValues(typ)); got != n {
			t.Errorf("events_appended_total{type=%q} = %v, want %v", typ, got, n)
		}
	}
	if calls == 0 || tools == 0 {
		t.Fatalf("the workload made %v model calls and %v tool calls; want some of each", calls, tools)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("prompt")); got != prompt {
		t.Errorf("prompt tokens = %v, want %v", got, prompt)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("completion")); got != completion {
		t.Errorf("completion tokens = %v, want %v", got, completion)
	}
	if got := counterSum(t, m, "pegasus_model_calls_total"); got != calls {
		t.Errorf("model calls = %v, want %v", got, calls)
	}
	if got := counterSum(t, m, "pegasus_tool_calls_total"); got != tools {
		t.Errorf("tool calls = %v, want %v", got, tools)
	}

	// Every commit group is one histogram sample, and the samples add up
	// to every event: the groups were told apart exactly.
	var h dto.Metric
	if err := m.commits.Write(&h); err != nil {
		t.Fatal(err)
	}
	st := m.l.Stats()
	if h.Histogram.GetSampleCount() != st.Commits || uint64(h.Histogram.GetSampleSum()) != m.l.Head() {
		t.Errorf("commit groups: %d samples summing to %v; the log made %d commits of %d events",
			h.Histogram.GetSampleCount(), h.Histogram.GetSampleSum(), st.Commits, m.l.Head())
	}
}

func counterSum(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, x := range mf.GetMetric() {
				s += x.GetCounter().GetValue()
			}
		}
	}
	return s
}

// TestBoundedLabels: a log naming more tools than MaxLabelValues counts
// the rest under OtherLabel.
func TestBoundedLabels(t *testing.T) {
	m := New(nil, nil, Options{})
	for i := range MaxLabelValues + 10 {
		body, err := fsm.Encode(&fsm.ToolCallResultBody{Tool: fmt.Sprintf("tool%d", i), DurationMS: 5})
		if err != nil {
			t.Fatal(err)
		}
		m.observe(eventlog.Event{Seq: uint64(i + 1), Stream: "01M80RCFV3281HRSKQBDEXQ948", Type: string(fsm.ToolCallCompleted),
			Schema: fsm.SchemaVersion, Body: body})
	}
	if n := testutil.CollectAndCount(m.toolCalls); n != MaxLabelValues+1 {
		t.Errorf("%d tool series, want %d", n, MaxLabelValues+1)
	}
	if got := testutil.ToFloat64(m.toolCalls.WithLabelValues(OtherLabel, "ok")); got != 10 {
		t.Errorf("(other) = %v, want 10", got)
	}
}

// TestRetentionCounts: the archived tasks and events are counted from the
// EVENTS_ARCHIVED event a retention run appends.
func TestRetentionCounts(t *testing.T) {
	a, m := startAgent(t)
	runTasks(t, a, m, "what time is it?", "hello")
	ctx := testCtx(t)
	res, err := retention.Run(ctx, m.l, &retention.Options{Window: time.Nanosecond, ArchiveDir: "archive", FS: vfs.NewMem(),
		Checkpoint: a.View().Checkpoint, Clock: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil || res.Manifest == nil {
		t.Fatalf("retention: %+v, %v", res, err)
	}
	if err := m.WaitFor(ctx, m.l.Head()); err != nil {
		t.Fatal(err)
	}
	for what, want := range map[string]int{"tasks": res.Manifest.Tasks, "events": res.Manifest.Events} {
		if got := testutil.ToFloat64(m.archived.WithLabelValues(what)); got != float64(want) || want == 0 {
			t.Errorf("retention_archived_total{what=%q} = %v, want %d", what, got, want)
		}
	}
}

// blockingModel answers no call until released, and reports each call.
type blockingModel struct {
	called  chan struct{}
	release chan struct{}
}

func (blockingModel) Name() string { return "blocking" }

func (m blockingModel) Complete(ctx context.Context, _ llm.Request, _ func(llm.Attempt)) (llm.Response, error) {
	m.called <- struct{}{}
	select {
	case <-m.release:
		return llm.Response{Content: "done"}, nil
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
}

// startBlocked runs an agent with one admission slot over an in-memory
// log and a model that answers no call until the test ends (ropts
// configures the fold; nil: the defaults).
func startBlocked(tb testing.TB, ropts *replay.Options) (*agent.Agent, *eventlog.Log, blockingModel) {
	tb.Helper()
	l, err := eventlog.Open("data", &eventlog.Options{FS: vfs.NewMem()})
	if err != nil {
		tb.Fatal(err)
	}
	model := blockingModel{called: make(chan struct{}, 4), release: make(chan struct{})}
	a, err := agent.New(l, agent.Options{Model: model, MaxActiveTasks: 1, DisableReflection: true, Replay: ropts})
	if err != nil {
		tb.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		close(model.release)
		if err := a.Stop(context.Background()); err != nil {
			tb.Errorf("Stop: %v", err)
		}
	})
	return a, l, model
}

// TestActiveAndQueueAge: with the one admission slot held by a task whose
// model call blocks (a task of the legacy machine, in one of its own
// states), the next two wait for it. A scrape counts the three by state
// and machine, and gives the age of the oldest waiting one from its
// creation, by the metrics' clock.
func TestActiveAndQueueAge(t *testing.T) {
	ctx := testCtx(t)
	a, l, model := startBlocked(t, nil)
	var ids []string
	legacy, err := fsm.ParseMachineRef("pegasus.task@0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		in := agent.Input{Text: fmt.Sprint("task ", i), Source: "test"}
		if i == 0 {
			in.Machine = legacy
		}
		id, err := a.SubmitInput(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if i == 0 {
			<-model.called // the first holds the slot
		}
	}
	for _, id := range ids[1:] {
		// The hook queues a task before it wakes its waiters.
		if _, err := a.WaitUntil(ctx, id, func(*fsm.Task) bool { return a.Queued(id) }); err != nil {
			t.Fatal(err)
		}
	}
	first, err := a.Task(ids[1])
	if err != nil {
		t.Fatal(err)
	}
	now := first.CreatedAt.Add(90 * time.Second)
	m := New(a, l, Options{Now: func() time.Time { return now }})
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	active, age := map[string]float64{}, -1.0
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			switch mf.GetName() {
			case "pegasus_tasks_active":
				lv := map[string]string{}
				for _, p := range x.GetLabel() {
					lv[p.GetName()] = p.GetValue()
				}
				active[lv["state"]+" "+lv["machine"]] += x.GetGauge().GetValue()
			case "pegasus_queue_oldest_age_seconds":
				age = x.GetGauge().GetValue()
			}
		}
	}
	want := map[string]float64{}
	for _, id := range ids {
		tk, err := a.Task(id)
		if err != nil {
			t.Fatal(err)
		}
		machine := "none"
		if tk.Machine != (fsm.MachineRef{}) {
			machine = tk.Machine.String()
		}
		want[string(tk.State)+" "+machine]++
	}
	if first, _ := a.Task(ids[0]); first.Machine != legacy || !slices.Contains([]fsm.State{fsm.StatePerceiving, fsm.StateThinking, fsm.StatePlanning, fsm.StateReflecting}, first.State) {
		t.Fatalf("the first task is %s under %s; want a state of the legacy machine's own", first.State, first.Machine)
	}
	if fmt.Sprint(active) != fmt.Sprint(want) {
		t.Errorf("pegasus_tasks_active %v, want %v", active, want)
	}
	if age != 90 {
		t.Errorf("pegasus_queue_oldest_age_seconds = %v, want 90 (the oldest waiting task's)", age)
	}
}
