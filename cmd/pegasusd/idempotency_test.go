package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/server"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// restart stops td's daemon and starts another on the same data directory.
func (td *testDaemon) restart(cfg *config) *testDaemon {
	td.t.Helper()
	td.stop()
	return startDaemon(td.t, cfg)
}

// idemKeys counts the reservations in the log's aux space.
func (td *testDaemon) idemKeys() int {
	td.t.Helper()
	it := td.d.engine.Log().ScanAux([]byte(eventlog.IdempotencyPrefix))
	defer it.Close()
	n := 0
	for it.Next() {
		n++
	}
	if err := it.Err(); err != nil {
		td.t.Fatal(err)
	}
	return n
}

func (td *testDaemon) taskCount() int {
	td.t.Helper()
	var list struct {
		Tasks []struct{} `json:"tasks"`
	}
	td.do("GET", "/v1/tasks?limit=1000", "").json(td.t, &list)
	return len(list.Tasks)
}

// inputs counts the inputs (MESSAGE_RECEIVED, WEBHOOK_TRIGGERED) in task
// id's stream: what a retry must not add to. (The log's head is no
// measure: the agent appends while the tasks run.)
func (td *testDaemon) inputs(id string) int {
	td.t.Helper()
	var evs struct {
		Events []replay.EventJSON `json:"events"`
	}
	td.do("GET", "/v1/tasks/"+id+"/events", "").json(td.t, &evs)
	n := 0
	for _, e := range evs.Events {
		if e.Type == string(fsm.MessageReceived) || e.Type == string(fsm.WebhookTriggered) {
			n++
		}
	}
	return n
}

// keyedCall is one request with an Idempotency-Key and what it must answer.
type keyedCall struct {
	method, path, body, key string
	status                  int
	replayed                bool
	code                    string // for errors
}

func (td *testDaemon) keyed(c keyedCall) response {
	td.t.Helper()
	r := td.do(c.method, c.path, c.body, "Idempotency-Key", c.key)
	if r.status != c.status {
		td.t.Fatalf("%s %s %q (key %q): %d %s, want %d", c.method, c.path, c.body, c.key, r.status, r.body, c.status)
	}
	if c.code != "" && r.errorCode(td.t) != c.code {
		td.t.Fatalf("%s %s (key %q): %s, want code %s", c.method, c.path, c.key, r.body, c.code)
	}
	if got := r.header.Get("Idempotent-Replayed") == "true"; got != c.replayed {
		td.t.Fatalf("%s %s (key %q): Idempotent-Replayed %v, want %v", c.method, c.path, c.key, got, c.replayed)
	}
	return r
}

func (td *testDaemon) keyedTask(c keyedCall) string {
	td.t.Helper()
	var created server.CreatedJSON
	td.keyed(c).json(td.t, &created)
	return created.TaskID
}

// TestIdempotencyKeySurvivesRestarts: a task creation, a webhook and a
// message sent again with their key, before and after a restart, are
// answered as the first time and append nothing; the same key with another
// request is a 409.
func TestIdempotencyKeySurvivesRestarts(t *testing.T) {
	cfg := testConfig(t)
	td := startDaemon(t, cfg)

	create := keyedCall{method: "POST", path: "/v1/tasks", body: `{"input":"hello","metadata":{"a":"1","b":"2"}}`, key: "order-42", status: 201}
	taskID := td.keyedTask(create)
	// The same request, even with its fields in another order and a
	// default spelt out: the same input, the same task.
	again := create
	again.body, again.replayed = `{"metadata":{"b":"2","a":"1"},"type":"general","input":"hello"}`, true
	if id := td.keyedTask(again); id != taskID {
		t.Fatalf("retry created task %s, first was %s", id, taskID)
	}
	other := create
	other.body, other.status, other.code = `{"input":"hello!"}`, 409, api.CodeKeyReused
	if r := td.keyed(other); !strings.Contains(string(r.body), "order-42") {
		t.Fatalf("conflict does not name the key: %s", r.body)
	}

	hook := keyedCall{method: "POST", path: "/v1/webhooks/deploy?type=explore", body: `{"status":"red"}`, key: "delivery-7", status: 201}
	hookID := td.keyedTask(hook)
	hookAgain := hook
	hookAgain.replayed = true
	if id := td.keyedTask(hookAgain); id != hookID {
		t.Fatalf("webhook retry created %s, first was %s", id, hookID)
	}
	hookOther := hook
	hookOther.path, hookOther.status, hookOther.code = "/v1/webhooks/deploy?type=general", 409, api.CodeKeyReused
	td.keyed(hookOther)

	// A message to a suspended task; its retry comes when the task has
	// moved on (completed), which without the key would be a 409.
	asking := td.submit("?")
	if tj := td.waitTask(asking); tj.State != fsm.StateSuspended {
		t.Fatalf("task = %+v", tj)
	}
	msg := keyedCall{method: "POST", path: "/v1/tasks/" + asking + "/messages", body: `{"text":"say hi"}`, key: "reply-1", status: 200}
	td.keyed(msg)
	if tj := td.waitTask(asking); tj.State != fsm.StateCompleted {
		t.Fatalf("after the message: %+v", tj)
	}
	msgAgain := msg
	msgAgain.replayed = true
	var tj server.TaskJSON
	td.keyed(msgAgain).json(t, &tj)
	if tj.TaskID != asking || tj.State != fsm.StateCompleted {
		t.Fatalf("message retry answered %+v", tj)
	}
	msgOther := msg
	msgOther.body, msgOther.status, msgOther.code = `{"text":"say bye"}`, 409, api.CodeKeyReused
	td.keyed(msgOther)
	// Keys share one namespace: a task's key is not a message's.
	cross := msg
	cross.key, cross.status, cross.code = "order-42", 409, api.CodeKeyReused
	td.keyed(cross)
	crossTask := create
	crossTask.key, crossTask.status, crossTask.code = "reply-1", 409, api.CodeKeyReused
	td.keyed(crossTask)

	check := func() {
		t.Helper()
		if n := td.taskCount(); n != 3 {
			t.Fatalf("%d tasks, want 3", n)
		}
		for id, want := range map[string]int{taskID: 1, hookID: 1, asking: 2} {
			if n := td.inputs(id); n != want {
				t.Fatalf("task %s has %d inputs, want %d", id, n, want)
			}
		}
	}
	check()
	// Across a restart (and once more, after the fold recovered from the
	// persisted projections rather than from zero).
	for range 2 {
		td = td.restart(cfg)
		if id := td.keyedTask(again); id != taskID {
			t.Fatalf("after a restart the retry created %s, first was %s", id, taskID)
		}
		if id := td.keyedTask(hookAgain); id != hookID {
			t.Fatalf("after a restart the webhook retry created %s, first was %s", id, hookID)
		}
		td.keyed(msgAgain)
		td.keyed(other)
		td.keyed(hookOther)
		td.keyed(msgOther)
		check()
	}
	// A new key is a new task.
	fresh := create
	fresh.key = "order-43"
	if id := td.keyedTask(fresh); id == taskID {
		t.Fatal("a new key returned the old task")
	}
}

// postKeyed creates a task with a key (if not "") from any goroutine: the status and
// the task id, or 0 and "" when the request failed.
func postKeyed(ctx context.Context, url, body, key string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		return 0, ""
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var c server.CreatedJSON
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &c)
	return resp.StatusCode, c.TaskID
}

// TestIdempotencyKeyConcurrentRetries: requests racing with one key make one
// task, and every one of them is told its id.
func TestIdempotencyKeyConcurrentRetries(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	const n = 8
	ids := make([]string, n)
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], ids[i] = postKeyed(context.Background(), td.url+"/v1/tasks", `{"input":"race"}`, "same-key")
		}()
	}
	wg.Wait()
	for i := range n {
		if statuses[i] != 201 || ids[i] == "" || ids[i] != ids[0] {
			t.Fatalf("answers: %v %v", statuses, ids)
		}
	}
	if c := td.taskCount(); c != 1 {
		t.Fatalf("%d tasks from one key", c)
	}
}

// TestIdempotencyKeyCrashBetweenReserveAndAppend: a daemon that died after
// binding a key but before appending its event left a binding whose id no
// event carries: the retry creates the task under that id, once.
func TestIdempotencyKeyCrashBetweenReserveAndAppend(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	log := td.d.engine.Log()
	bound := log.NewID()
	if _, _, err := log.ReserveKey(context.Background(), "lost-answer", bound); err != nil {
		t.Fatal(err)
	}
	c := keyedCall{method: "POST", path: "/v1/tasks", body: `{"input":"x"}`, key: "lost-answer", status: 201}
	if id := td.keyedTask(c); id != bound.String() {
		t.Fatalf("the retry created task %s, not under the bound id %s", id, bound)
	}
	c.replayed = true
	if again := td.keyedTask(c); again != bound.String() {
		t.Fatalf("retry created %s, first was %s", again, bound)
	}
	if n := td.taskCount(); n != 1 {
		t.Fatalf("%d tasks", n)
	}
}

// TestIdempotencyKeyRefusals: malformed keys are refused, and a refused
// request leaves its key usable: no event carries its id, so a later
// request under the key (a corrected body) creates its task.
func TestIdempotencyKeyRefusals(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	for _, key := range []string{"   ", strings.Repeat("k", 256), "caf\u00e9"} {
		td.keyed(keyedCall{method: "POST", path: "/v1/tasks", body: `{"input":"x"}`, key: key, status: 400, code: api.CodeBadRequest})
	}
	if n := td.idemKeys(); n != 0 {
		t.Fatalf("malformed keys left %d bindings", n)
	}
	td.keyed(keyedCall{method: "POST", path: "/v1/tasks", body: `{"input":"x","type":"nope"}`, key: "k1", status: 400, code: api.CodeBadRequest})
	done := td.submit("hello")
	td.waitTask(done)
	td.keyed(keyedCall{method: "POST", path: "/v1/tasks/" + done + "/messages", body: `{"text":"x"}`, key: "k2", status: 409, code: api.CodeConflict})
	// k1 is usable: with a valid body, it creates a task; its retry
	// replays it.
	c := keyedCall{method: "POST", path: "/v1/tasks", body: `{"input":"y"}`, key: "k1", status: 201}
	id := td.keyedTask(c)
	c.replayed = true
	if again := td.keyedTask(c); again != id {
		t.Fatalf("retry created %s, first was %s", again, id)
	}
	if n := td.taskCount(); n != 2 {
		t.Fatalf("%d tasks, want 2", n)
	}
}

// TestIdempotencyKeyClientsThatGiveUp: clients that give up on their first
// attempt at a random point (before, during or after the commit) and retry
// with the key get one task each, never two, never none.
func TestIdempotencyKeyClientsThatGiveUp(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	const n = 20
	var wg sync.WaitGroup
	ids := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("impatient-%d", i)
			body := fmt.Sprintf(`{"input":"task %d"}`, i)
			// The first attempt: abandoned after 50µs * 1.5^i (up to
			// 110 ms, past a commit), whatever happened by then.
			wait := 50 * time.Microsecond
			for range i {
				wait = wait * 3 / 2
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			postKeyed(ctx, td.url+"/v1/tasks", body, key)
			cancel()
			// The retry, which waits for the answer.
			if status, id := postKeyed(context.Background(), td.url+"/v1/tasks", body, key); status == 201 {
				ids[i] = id
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, id := range ids {
		if id == "" || seen[id] {
			t.Fatalf("client %d: task %q (all: %v)", i, id, ids)
		}
		seen[id] = true
	}
	if c := td.taskCount(); c != n {
		t.Fatalf("%d tasks from %d keys", c, n)
	}
}

// BenchmarkSubmit measures POST /v1/tasks without and with an
// Idempotency-Key: the key costs one more synced write (the reservation).
func BenchmarkSubmit(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		b.Run(fmt.Sprintf("keyed=%v", keyed), func(b *testing.B) {
			td := startDaemon(b, testConfig(b))
			i := 0
			for b.Loop() {
				key := ""
				if keyed {
					key = fmt.Sprintf("bench-%d", i)
				}
				i++
				if status, _ := postKeyed(context.Background(), td.url+"/v1/tasks", `{"input":"hello"}`, key); status != 201 {
					b.Fatalf("status %d", status)
				}
			}
		})
	}
}
