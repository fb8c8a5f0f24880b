package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/client"
)

func newClient(t *testing.T, opts *client.Options) *client.Client {
	t.Helper()
	c, err := client.New(server, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// unique makes name unique to this run of the test: the daemon is shared
// by every test of the binary, and -count runs them again.
func unique(name string) string { return name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a bound for failures only
	t.Cleanup(cancel)
	return ctx
}

// TestTasks drives the /v1 API of a real daemon: submit with a key, wait,
// get, list with filters and a cursor, events, a question answered with
// reply, the commands and their typed errors.
func TestTasks(t *testing.T) {
	ctx := testContext(t)
	c := newClient(t, nil)
	source, key := unique("client-test"), unique("client-test-tasks")

	first, err := c.Submit(ctx, api.CreateTask{Input: "what time is it?", Source: source, Metadata: map[string]string{"k": "v"}},
		client.WithIdempotencyKey(key))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Submit(ctx, api.CreateTask{Input: "what time is it?", Source: source, Metadata: map[string]string{"k": "v"}},
		client.WithIdempotencyKey(key))
	if err != nil || again.TaskID != first.TaskID {
		t.Fatalf("a keyed submission sent again: %+v, %v; want task %s", again, err, first.TaskID)
	}
	_, err = c.Submit(ctx, api.CreateTask{Input: "another"}, client.WithIdempotencyKey(key))
	if !errors.Is(err, client.ErrKeyReused) {
		t.Fatalf("the key with another request: %v, want ErrKeyReused", err)
	}
	done, err := c.Wait(ctx, first.TaskID)
	if err != nil || done.State != api.StateCompleted || done.Result == "" || len(done.History) == 0 || done.Metadata["k"] != "v" {
		t.Fatalf("Wait: %+v, %v", done, err)
	}
	got, err := c.Get(ctx, first.TaskID)
	if err != nil || got.Version < done.Version || got.State != api.StateCompleted || len(got.Context) == 0 {
		t.Fatalf("Get: %s v%d, %v", got.State, got.Version, err)
	}

	// A question, answered.
	q, err := c.Submit(ctx, api.CreateTask{Input: "?", Source: source})
	if err != nil {
		t.Fatal(err)
	}
	asked, err := c.Wait(ctx, q.TaskID)
	if err != nil || asked.State != api.StateSuspended || asked.Question == "" {
		t.Fatalf("a task that asks: %+v, %v", asked, err)
	}
	if _, err := c.Reply(ctx, q.TaskID, api.Message{Text: "what time is it?"}); err != nil {
		t.Fatal(err)
	}
	if answered, err := c.Wait(ctx, q.TaskID); err != nil || answered.State != api.StateCompleted {
		t.Fatalf("after the reply: %+v, %v", answered, err)
	}

	// Commands, and the typed errors.
	_, err = c.Resume(ctx, q.TaskID, "")
	var e *client.Error
	if !errors.Is(err, client.ErrConflict) || !errors.As(err, &e) || e.Status != 409 || e.Code != api.CodeConflict || e.Message == "" {
		t.Fatalf("resume a completed task: %#v", err)
	}
	if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrKeyReused) {
		t.Fatalf("%v matches other sentinels", err)
	}
	failedSource := unique("client-test-failed")
	c3, err := c.Submit(ctx, api.CreateTask{Input: "?", Source: failedSource})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, c3.TaskID); err != nil {
		t.Fatal(err)
	}
	if cancelled, err := c.Cancel(ctx, c3.TaskID, "not needed"); err != nil || cancelled.State != api.StateFailed {
		t.Fatalf("cancel: %+v, %v", cancelled, err)
	}
	if _, err := c.Suspend(ctx, "01M80RCFV3281HRSKQBDEXQ000", ""); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("suspend an unknown task: %v", err)
	}

	// List: filters, and a cursor.
	var ids []string
	o := client.ListOptions{Sources: []string{source}, Order: "asc", Limit: 1}
	for s, err := range c.All(ctx, o) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.TaskID)
	}
	if want := []string{first.TaskID, q.TaskID}; !slices.Equal(ids, want) {
		t.Fatalf("All source=client-test, one per page: %v, want %v", ids, want)
	}
	page, err := c.List(ctx, client.ListOptions{States: []string{api.StateFailed}, Sources: []string{failedSource}, Limit: 10})
	if err != nil || len(page.Tasks) == 0 || page.Tasks[0].TaskID != c3.TaskID {
		t.Fatalf("List state=failed: %+v, %v", page, err)
	}
	if _, err := c.List(ctx, client.ListOptions{States: []string{"sleeping"}}); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("List state=sleeping: %v", err)
	}

	// Events, and progress.
	evs, err := c.TaskEvents(ctx, first.TaskID, 1, 0)
	if err != nil || len(evs.Events) < int(done.Version)-1 || evs.Events[0].Version != 2 || len(evs.Events[0].Body) == 0 {
		t.Fatalf("TaskEvents after version 1: %d events, %v", len(evs.Events), err)
	}
	if p, err := c.TaskProgress(ctx, first.TaskID); err != nil || !p.Complete {
		t.Fatalf("TaskProgress: %+v, %v", p, err)
	}
}

// TestSubscribe reads the event stream, stops, and resumes after the last
// event it read (Last-Event-ID): nothing lost, nothing twice.
func TestSubscribe(t *testing.T) {
	ctx := testContext(t)
	c := newClient(t, nil)
	head, err := c.Events(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	created, err := c.Submit(ctx, api.CreateTask{Input: "what time is it?"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, created.TaskID); err != nil {
		t.Fatal(err)
	}
	all, err := c.TaskEvents(ctx, created.TaskID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	sub := c.Subscribe(client.StreamOptions{AfterSeq: head.Head, Stream: created.TaskID})
	for range 3 {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Seq)
	}
	sub.Close()
	sub = c.Subscribe(client.StreamOptions{AfterSeq: sub.LastSeq(), Stream: created.TaskID})
	defer sub.Close()
	for len(got) < len(all.Events) {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Seq)
	}
	var want []uint64
	for _, ev := range all.Events {
		want = append(want, ev.Seq)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("streamed %v, want %v", got, want)
	}
	_, err = c.Subscribe(client.StreamOptions{AfterSeq: 1 << 60}).Next(ctx)
	if !errors.Is(err, client.ErrBeyondHead) {
		t.Fatalf("a stream past the head: %v, want ErrBeyondHead", err)
	}
}

// TestDispatch drives /api/v1: create (keyed), list with a cursor, get,
// a worker's reports, the DLQ, requeue, stats, workers and drain.
func TestDispatch(t *testing.T) {
	ctx := testContext(t)
	c := newClient(t, &client.Options{AgentID: "dispatch-test"})
	wid, capability, source := unique("dispatch-test-worker"), unique("dispatch-test"), unique("dispatch-test")
	w := newClient(t, &client.Options{AgentID: wid})
	if _, err := w.Register(ctx, []string{capability}, 1); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, title := range []string{"one", "two"} {
		d, err := c.CreateDispatch(ctx, api.CreateDispatch{Title: title, RequiredCapabilities: []string{capability}, Source: source},
			client.WithIdempotencyKey(source+title))
		if err != nil || d.Owner != "dispatch-test" || d.MaxRetries != 3 || !d.RetryEligible {
			t.Fatalf("create: %+v, %v", d, err)
		}
		ids = append(ids, d.TaskID)
	}
	if d, err := c.CreateDispatch(ctx, api.CreateDispatch{Title: "one", RequiredCapabilities: []string{capability}, Source: source},
		client.WithIdempotencyKey(source+"one")); err != nil || d.TaskID != ids[0] {
		t.Fatalf("a keyed create sent again: %+v, %v", d, err)
	}
	var listed []string
	o := client.DispatchListOptions{Source: source, Limit: 1}
	for {
		page, err := c.ListDispatch(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Tasks {
			listed = append(listed, d.TaskID)
		}
		if page.NextCursor == "" {
			break
		}
		o.Cursor = page.NextCursor
	}
	if !slices.Equal(listed, ids) {
		t.Fatalf("listed %v, want %v", listed, ids)
	}

	// The worker takes both in turn: completes one, fails the other for good.
	for i, id := range ids {
		tasks, err := w.Poll(ctx, 10*time.Second)
		if err != nil || len(tasks) != 1 || tasks[0].TaskID != id {
			t.Fatalf("poll %d: %+v, %v; want %s", i, tasks, err, id)
		}
		if d, err := w.ReportProgress(ctx, id, "working"); err != nil || d.Status != api.StatusInProgress {
			t.Fatalf("progress: %+v, %v", d, err)
		}
		if i == 0 {
			d, err := w.Complete(ctx, id, map[string]int{"pages": 42})
			if err != nil || d.Status != api.StatusCompleted || string(d.Result) != `{"pages":42}` {
				t.Fatalf("complete: %+v, %v", d, err)
			}
			continue
		}
		if _, err := w.Fail(ctx, id, client.Permanent(errors.New("corrupt input"))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ReportProgress(ctx, ids[0], "not mine"); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("a report by another agent: %v, want ErrConflict", err)
	}
	dead := waitDispatch(t, c, ids[1], func(d api.DispatchTask) bool { return d.DeadLettered })
	if dead.DeadLetterReason != "not_retry_eligible" || dead.Error != "corrupt input" {
		t.Fatalf("dead letter: %+v", dead)
	}
	dlq, err := c.DLQ(ctx)
	if err != nil || !slices.ContainsFunc(dlq, func(d api.DispatchTask) bool { return d.TaskID == ids[1] }) {
		t.Fatalf("DLQ: %v, %v", dlq, err)
	}
	if d, err := c.Requeue(ctx, ids[1], "fixed"); err != nil || d.Status != api.StatusPending {
		t.Fatalf("requeue: %+v, %v", d, err)
	}
	if _, err := c.Requeue(ctx, ids[1], "again"); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("requeue a live task: %v", err)
	}
	if n, err := c.RequeueMatching(ctx, api.DLQFilter{Error: "no such error"}, ""); err != nil || n != 0 {
		t.Fatalf("RequeueMatching: %d, %v", n, err)
	}
	if d, err := c.UpdateDispatch(ctx, ids[0], map[string]json.RawMessage{"checked": json.RawMessage(`"yes"`), "n": json.RawMessage(`5`)}); err != nil ||
		string(d.Metadata["checked"]) != `"yes"` || string(d.Metadata["n"]) != `5` {
		t.Fatalf("update: %+v, %v", d, err)
	}
	evs, err := c.DispatchEvents(ctx, ids[0])
	if err != nil || len(evs.Events) == 0 || evs.Events[0].Type != "DISPATCH_CREATED" || evs.Events[0].AgentID != "dispatch-test" {
		t.Fatalf("events: %+v, %v", evs, err)
	}
	if s, err := c.BrokerStats(ctx); err != nil || s.Tasks < 2 || s.ByStatus[api.StatusCompleted] < 1 {
		t.Fatalf("stats: %+v, %v", s, err)
	}
	if wk, err := c.Drain(ctx, wid); err != nil || !wk.Draining || wk.DrainedBy != "dispatch-test" {
		t.Fatalf("drain: %+v, %v", wk, err)
	}
	workers, err := c.Workers(ctx)
	if err != nil || !slices.ContainsFunc(workers, func(wk api.Worker) bool { return wk.ID == wid && wk.Draining }) {
		t.Fatalf("workers: %+v, %v", workers, err)
	}
	if _, err := c.GetDispatch(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get an unknown task: %v", err)
	}
}

// waitDispatch polls a broker task until cond holds (a bound for failures
// only).
func waitDispatch(t *testing.T, c *client.Client, id string, cond func(api.DispatchTask) bool) api.DispatchTask {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := c.GetDispatch(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if cond(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s never got there: %+v", id, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRetries: idempotent and keyed requests are retried on 503 (after
// Retry-After), 502 and connection errors; a POST without a key, and a
// 4xx, never.
func TestRetries(t *testing.T) {
	var mu sync.Mutex
	var seen []string // method path key
	fail := 0         // answers to fail before a success
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Idempotency-Key"))
		failing := fail > 0
		fail--
		mu.Unlock()
		switch {
		case r.URL.Path == "/v1/tasks/bad":
			w.WriteHeader(400)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeBadRequest, Message: "no"}})
		case failing:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeShuttingDown, Message: "stopping"}})
		case r.Method == "POST":
			w.WriteHeader(201)
			_, _ = w.Write([]byte(`{"task_id":"T","state":"idle","queued":false}`))
		default:
			_, _ = w.Write([]byte(`{"task_id":"T","state":"completed"}`))
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, &client.Options{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	reset := func(n int) { mu.Lock(); seen, fail = nil, n; mu.Unlock() }
	attempts := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }

	reset(2)
	if task, err := c.Get(ctx, "T"); err != nil || task.State != "completed" {
		t.Fatalf("GET after two 503: %+v, %v", task, err)
	}
	if n := len(attempts()); n != 3 {
		t.Fatalf("GET: %d attempts, want 3", n)
	}
	reset(5)
	_, err = c.Get(ctx, "T")
	var e *client.Error
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &e) || e.Code != api.CodeShuttingDown || len(attempts()) != 3 {
		t.Fatalf("GET, always 503: %v after %d attempts, want ErrUnavailable after 3", err, len(attempts()))
	}
	reset(2)
	if _, err := c.Submit(ctx, api.CreateTask{Input: "x"}); err != nil {
		t.Fatal(err)
	}
	a := attempts()
	if len(a) != 3 || a[0] != a[1] || a[1] != a[2] || len(a[0]) <= len("POST /v1/tasks ") {
		t.Fatalf("Submit without a key: %q, want 3 attempts with one generated key", a)
	}
	reset(1)
	if err := c.Do(ctx, "POST", "/v1/tasks", nil, api.CreateTask{Input: "x"}, nil); !errors.Is(err, client.ErrUnavailable) || len(attempts()) != 1 {
		t.Fatalf("a POST without a key: %v after %d attempts, want one attempt", err, len(attempts()))
	}
	reset(0)
	if _, err := c.Get(ctx, "bad"); !errors.Is(err, client.ErrBadRequest) || len(attempts()) != 1 {
		t.Fatalf("a 400: %v after %d attempts, want one", err, len(attempts()))
	}
	// Nobody listens: ErrUnreachable, after the retries of a GET.
	dead, err := client.New("127.0.0.1:1", &client.Options{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.Get(ctx, "T"); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("no server: %v, want ErrUnreachable", err)
	}
}

// TestSubscribeReconnects: when the stream drops, the subscription
// reconnects with Last-Event-ID, the last sequence it returned: every
// event once, in order.
func TestSubscribeReconnects(t *testing.T) {
	var mu sync.Mutex
	var resumes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Last-Event-ID")
		mu.Lock()
		resumes = append(resumes, id)
		mu.Unlock()
		after, _ := strconv.Atoi(id)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 2000\n\n: ping\n\n")
		for seq := after + 1; seq <= min(after+3, 10); seq++ { // then the connection drops
			fmt.Fprintf(w, "id: %d\nevent: E\ndata: {\"id\":\"e%d\",\"seq\":%d,\"type\":\"E\"}\n\n", seq, seq, seq)
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, &client.Options{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sub := c.Subscribe(client.StreamOptions{})
	defer sub.Close()
	ctx := testContext(t)
	for want := uint64(1); want <= 10; want++ {
		ev, err := sub.Next(ctx)
		if err != nil || ev.Seq != want {
			t.Fatalf("event %d: seq %d, %v", want, ev.Seq, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(resumes) != "[0 3 6 9]" {
		t.Fatalf("Last-Event-ID per connection: %v, want [0 3 6 9]", resumes)
	}
}
