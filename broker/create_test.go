package broker

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/batcherr"
)

func intp(n int) *int    { return &n }
func boolp(b bool) *bool { return &b }

// TestCreateRules: the broker's defaults and checks of a new task, the
// same for a Go caller as for POST /api/v1/tasks. A refused request
// records nothing.
func TestCreateRules(t *testing.T) {
	h := newHarnessRun(t, false)
	id := ulid.MustNew(ulid.Timestamp(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)), strings.NewReader(strings.Repeat("x", 16)))
	runAt := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	defaults := fsm.DispatchCreatedBody{AgentID: "alice", Title: "t", Owner: "alice", Source: "agent",
		TimeoutSeconds: fsm.DefaultTimeoutSeconds, MaxRetries: fsm.DefaultMaxRetries, RetryEligible: true}
	with := func(f func(*fsm.DispatchCreatedBody)) fsm.DispatchCreatedBody { b := defaults; f(&b); return b }
	for _, c := range []struct {
		name string
		req  CreateRequest
		want fsm.DispatchCreatedBody
		bad  string // the refusal, else ""
	}{
		{name: "the seed's defaults", req: CreateRequest{AgentID: "alice", Title: "t"}, want: defaults},
		{name: "given values kept", req: CreateRequest{AgentID: "alice", Title: "t", Owner: "bob", Source: "manual", Priority: 7,
			TimeoutSeconds: intp(600), MaxRetries: intp(5), RetryEligible: boolp(false), HeartbeatSeconds: 20, RetryBackoffSeconds: 2},
			want: with(func(b *fsm.DispatchCreatedBody) {
				b.Owner, b.Source, b.Priority, b.TimeoutSeconds, b.MaxRetries, b.RetryEligible = "bob", "manual", 7, 600, 5, false
				b.HeartbeatSeconds, b.RetryBackoffSeconds = 20, 2
			})},
		{name: "max_retries 0 is no retry", req: CreateRequest{AgentID: "alice", Title: "t", MaxRetries: intp(0)},
			want: with(func(b *fsm.DispatchCreatedBody) { b.MaxRetries = 0 })},
		{name: "run_at", req: CreateRequest{AgentID: "alice", Title: "t", RunAt: runAt}, want: with(func(b *fsm.DispatchCreatedBody) { b.RunAt = runAt })},
		{name: "delay_seconds counts from the id's time", req: CreateRequest{AgentID: "alice", Title: "t", DelaySeconds: 90},
			want: with(func(b *fsm.DispatchCreatedBody) { b.RunAt = time.Date(2026, 3, 4, 5, 7, 37, 0, time.UTC) })},
		{name: "metadata of any JSON", req: CreateRequest{AgentID: "alice", Title: "t",
			Metadata: map[string]json.RawMessage{"n": json.RawMessage(`5`), "s": json.RawMessage(`"5"`), "o": json.RawMessage(`{ "a" : [1, null] }`), "z": json.RawMessage(`null`)}},
			want: with(func(b *fsm.DispatchCreatedBody) {
				b.Metadata = map[string]string{"n": "5", "s": "5", "o": `{"a":[1,null]}`, "z": "null"}
				b.MetadataJSON = []string{"n", "o", "z"}
			})},
		{name: "timeout_seconds 0", req: CreateRequest{AgentID: "alice", Title: "t", TimeoutSeconds: intp(0)}, bad: "timeout_seconds 0: want at least 1"},
		{name: "timeout_seconds -1", req: CreateRequest{AgentID: "alice", Title: "t", TimeoutSeconds: intp(-1)}, bad: "timeout_seconds -1: want at least 1"},
		{name: "max_retries -1", req: CreateRequest{AgentID: "alice", Title: "t", MaxRetries: intp(-1)}, bad: "max_retries -1"},
		{name: "no title", req: CreateRequest{AgentID: "alice", Title: " "}, bad: "title is required"},
		{name: "no agent", req: CreateRequest{Title: "t"}, bad: "no agent"},
		{name: "priority 11", req: CreateRequest{AgentID: "alice", Title: "t", Priority: 11}, bad: "priority 11"},
		{name: "delay_seconds -1", req: CreateRequest{AgentID: "alice", Title: "t", DelaySeconds: -1}, bad: "delay_seconds -1"},
		{name: "delay_seconds and run_at", req: CreateRequest{AgentID: "alice", Title: "t", DelaySeconds: 1, RunAt: runAt}, bad: "not both"},
		{name: "heartbeat_seconds -1", req: CreateRequest{AgentID: "alice", Title: "t", HeartbeatSeconds: -1}, bad: "heartbeat_seconds -1"},
		{name: "an empty capability", req: CreateRequest{AgentID: "alice", Title: "t", RequiredCapabilities: []string{""}}, bad: "empty required capability"},
		{name: "metadata not JSON", req: CreateRequest{AgentID: "alice", Title: "t", Metadata: map[string]json.RawMessage{"k": json.RawMessage(`{`)}}, bad: `metadata "k"`},
		{name: "no such parent", req: CreateRequest{AgentID: "alice", Title: "t", ParentTaskID: "01M8B3R0KQ1F6W3H2Y9ZP4C7DX"}, bad: "no such task"},
	} {
		t.Run(c.name, func(t *testing.T) {
			head := h.log.Head()
			task, err := h.b.Create(h.ctx, ulid.ULID{}, c.req)
			if c.bad != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.bad) {
					t.Fatalf("got %v, want ErrInvalid: %s", err, c.bad)
				}
				if h.log.Head() != head {
					t.Fatal("a refused create recorded something")
				}
				return
			}
			if err != nil || task.Dispatch == nil {
				t.Fatalf("create: %v", err)
			}
			body, err := createdBody(id, &c.req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(body, c.want) {
				t.Fatalf("body\n got %+v\nwant %+v", body, c.want)
			}
		})
	}
}

// TestKeyedCreateSameRunAt: a create sent again with the same id (an
// Idempotency-Key retry) and delay_seconds resolves to the same run_at
// however late it comes, so it is recognised: one task.
func TestKeyedCreateSameRunAt(t *testing.T) {
	h := newHarnessRun(t, false)
	id := h.b.newID()
	req := CreateRequest{AgentID: "alice", Title: "later", DelaySeconds: 60}
	first, err := h.b.Create(h.ctx, id, req)
	if err != nil {
		t.Fatal(err)
	}
	h.advance(time.Hour)
	again, err := h.b.Create(h.ctx, id, req)
	if err != nil || again.ID != first.ID || !again.Dispatch.RunAt.Equal(first.Dispatch.RunAt) || again.Version != 1 {
		t.Fatalf("sent again: %v %+v (first %+v)", err, again.Dispatch, first.Dispatch)
	}
	if want := ulid.Time(id.Time()).Add(time.Minute); !first.Dispatch.RunAt.Equal(want) {
		t.Fatalf("run_at %s, want %s", first.Dispatch.RunAt, want)
	}
}

// TestReportRules: the checks of a worker's report before anything is
// recorded: its kind, its body for that kind, and who sends it.
func TestReportRules(t *testing.T) {
	h := newHarness(t)
	h.register("w1", 1)
	task := h.create("t", 0)
	h.waitTask(task.ID, "assigned", assignedTo("w1"))
	for _, c := range []struct {
		name  string
		agent string
		kind  fsm.EventType
		rep   fsm.DispatchReportBody
		err   error
		bad   string
	}{
		{"no worker", "", fsm.DispatchProgress, fsm.DispatchReportBody{}, ErrInvalid, "names its worker"},
		{"not a report", "w1", fsm.DispatchRetried, fsm.DispatchReportBody{}, ErrInvalid, "not a report"},
		{"progress with a result", "w1", fsm.DispatchProgress, fsm.DispatchReportBody{Result: `1`}, ErrInvalid, "message only"},
		{"progress with an error", "w1", fsm.DispatchProgress, fsm.DispatchReportBody{Error: "x"}, ErrInvalid, "message only"},
		{"fail without an error", "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "  "}, ErrInvalid, "error is required"},
		{"fail with a result", "w1", fsm.DispatchFailed, fsm.DispatchReportBody{Error: "x", Result: `1`}, ErrInvalid, "not a result"},
		{"complete with bad JSON", "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{"a":`}, ErrInvalid, "result"},
		{"complete with an error", "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Error: "x"}, ErrInvalid, "not an error"},
		{"another worker", "w2", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: `{}`}, ErrNotAssigned, "assigned to \"w1\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			head := h.log.Head()
			_, _, err := h.b.Report(h.ctx, task.ID, c.agent, c.kind, c.rep)
			if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.bad) {
				t.Fatalf("got %v, want %v: %s", err, c.err, c.bad)
			}
			if h.log.Head() != head {
				t.Fatal("a refused report recorded something")
			}
		})
	}
	done, _, err := h.b.Report(h.ctx, task.ID, "w1", fsm.DispatchCompleted, fsm.DispatchReportBody{Result: "{ \"pages\" : 42 }"})
	if err != nil || done.State != fsm.StateCompleted || done.Dispatch.Result != `{"pages":42}` {
		t.Fatalf("complete: %v %s %q", err, done.State, done.Dispatch.Result)
	}
}

// TestMetadataAsGiven: metadata of any JSON value is given back as given
// after a create and after updates; null or "" in an update deletes a
// key, and a key changes kind with its value.
func TestMetadataAsGiven(t *testing.T) {
	h := newHarnessRun(t, false)
	raw := func(m map[string]string) map[string]json.RawMessage {
		out := map[string]json.RawMessage{}
		for k, v := range m {
			out[k] = json.RawMessage(v)
		}
		return out
	}
	task, err := h.b.Create(h.ctx, ulid.ULID{}, CreateRequest{AgentID: "alice", Title: "t",
		Metadata: raw(map[string]string{"n": `5`, "s": `"5"`, "o": `{"a":[true]}`, "gone": `"x"`, "html": `"<b>"`})})
	if err != nil {
		t.Fatal(err)
	}
	want := raw(map[string]string{"n": `5`, "s": `"5"`, "o": `{"a":[true]}`, "gone": `"x"`, "html": `"<b>"`})
	if got := TaskMetadata(&task); !reflect.DeepEqual(got, want) {
		t.Fatalf("created: %s", got)
	}
	task, err = h.b.Update(h.ctx, task.ID, "bob", raw(map[string]string{"n": `"five"`, "s": `6`, "gone": `null`, "html": `""`, "new": `[1]`}))
	if err != nil {
		t.Fatal(err)
	}
	want = raw(map[string]string{"n": `"five"`, "s": `6`, "o": `{"a":[true]}`, "new": `[1]`})
	if got := TaskMetadata(&task); !reflect.DeepEqual(got, want) {
		t.Fatalf("updated: %s", got)
	}
	if task.Dispatch.LastAgent != "bob" || !reflect.DeepEqual(task.Dispatch.MetadataJSON, []string{"new", "o", "s"}) {
		t.Fatalf("updated: last agent %q, JSON keys %v", task.Dispatch.LastAgent, task.Dispatch.MetadataJSON)
	}
	if _, err := h.b.Update(h.ctx, task.ID, "bob", raw(map[string]string{"k": `{`})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("not JSON: %v", err)
	}
}

// TestTaskError: a timed-out attempt says which deadline passed; a
// failure keeps the worker's words.
func TestTaskError(t *testing.T) {
	base := fsm.Task{State: fsm.StateTimedOut, Dispatch: &fsm.Dispatch{AssignedAgent: "w1", TimeoutSeconds: 300, HeartbeatSeconds: 20}}
	for _, c := range []struct {
		name string
		edit func(*fsm.Task)
		want string
	}{
		{"deadline", func(t *fsm.Task) { t.Dispatch.TimeoutReason = fsm.TimeoutDeadline }, "timed out: no outcome from worker w1 within timeout_seconds=300"},
		{"heartbeat", func(t *fsm.Task) { t.Dispatch.TimeoutReason = fsm.TimeoutHeartbeat }, "timed out: no report from worker w1 within heartbeat_seconds=20"},
		{"failed", func(t *fsm.Task) { t.State, t.Dispatch.Error = fsm.StateFailed, "disk full" }, "disk full"},
		{"pending again", func(t *fsm.Task) { t.State, t.Dispatch.TimeoutReason = fsm.StatePending, "" }, ""},
		{"not a broker task", func(t *fsm.Task) { t.Dispatch = nil }, ""},
	} {
		task := base
		d := *base.Dispatch
		task.Dispatch = &d
		c.edit(&task)
		if got := TaskError(&task); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestCreateManyAnswers: a batch answers each task as folded, in order,
// whether the broker runs (from its index) or not (from the view); a
// caller's id given twice refuses the batch at the second; the same batch
// sent again is answered as replayed, creating nothing twice.
func TestCreateManyAnswers(t *testing.T) {
	for _, run := range []bool{true, false} {
		h := newHarnessRun(t, run)
		key := h.b.newID()
		reqs := []CreateRequest{
			{AgentID: "alice", Title: "a", RequiredCapabilities: []string{"nobody"}},
			{AgentID: "alice", Title: "b", Priority: 3, RequiredCapabilities: []string{"nobody"}},
			{AgentID: "alice", Title: "c", RequiredCapabilities: []string{"nobody"}},
		}
		ids := []ulid.ULID{{}, key, {}}
		made, err := h.b.CreateMany(h.ctx, ids, reqs)
		if err != nil || len(made) != 3 {
			t.Fatalf("run %v: %v, %d tasks", run, err, len(made))
		}
		for i, c := range made {
			want, err := h.b.Task(c.Task.ID)
			if err != nil || c.Replayed || c.Task.Dispatch.Title != reqs[i].Title || c.Task.Version != want.Version ||
				c.Task.State != fsm.StatePending || c.Task.Priority != reqs[i].Priority {
				t.Fatalf("run %v, task %d: %+v (%v), view %+v", run, i, c.Task, err, want)
			}
		}
		if made[1].Task.ID != key.String() {
			t.Fatalf("run %v: the keyed task is %s, want %s", run, made[1].Task.ID, key)
		}
		again, err := h.b.CreateMany(h.ctx, []ulid.ULID{key}, reqs[1:2])
		if err != nil || !again[0].Replayed || again[0].Task.ID != key.String() {
			t.Fatalf("run %v: sent again: %v %+v", run, err, again)
		}
		_, err = h.b.CreateMany(h.ctx, []ulid.ULID{{}, key, key}, reqs)
		var be *batcherr.Error
		if !errors.As(err, &be) || !strings.Contains(err.Error(), "tasks[1]") {
			t.Fatalf("run %v: the same id twice: %v", run, err)
		}
	}
}
