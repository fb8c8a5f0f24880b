package main

import (
	"fmt"
	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/server"
	"strings"
	"testing"
)

// brokerDaemon starts a daemon with an admin token.
func brokerDaemon(t *testing.T) *testDaemon {
	cfg := testConfig(t)
	cfg.server.AdminToken = "admin-secret"
	return startDaemon(t, cfg)
}

// as sends a request as agent id (X-Agent-ID), with extra headers.
func (td *testDaemon) as(id, method, path, body string, header ...string) response {
	td.t.Helper()
	return td.do(method, path, body, append([]string{"X-Agent-ID", id}, header...)...)
}

func (td *testDaemon) admin(method, path, body string) response {
	td.t.Helper()
	return td.as("ops", method, path, body, "Authorization", "Bearer admin-secret")
}

func mustStatus(t *testing.T, r response, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d: %s", r.status, want, r.body)
	}
}

func dtask(t *testing.T, r response) server.DispatchJSON {
	t.Helper()
	var j server.DispatchJSON
	r.json(t, &j)
	return j
}

// poll is a worker's long poll for its assignments.
func (td *testDaemon) poll(worker string) []server.DispatchJSON {
	td.t.Helper()
	return td.dispatchTasks(worker, "agent="+worker+"&status=assigned&wait=20s")
}

// dispatchTasks lists dispatch tasks as agent: GET /api/v1/tasks?query.
func (td *testDaemon) dispatchTasks(agent, query string) []server.DispatchJSON {
	td.t.Helper()
	r := td.as(agent, "GET", "/api/v1/tasks?"+query, "")
	if r.status != 200 {
		td.t.Fatalf("list ?%s: %d %s", query, r.status, r.body)
	}
	var page struct {
		Tasks []server.DispatchJSON `json:"tasks"`
	}
	r.json(td.t, &page)
	return page.Tasks
}

// waitDLQ returns the DLQ once it holds n tasks (the broker dead-letters a
// task right after its last failure), or after five seconds of long polls.
func (td *testDaemon) waitDLQ(n int) []server.DispatchJSON {
	td.t.Helper()
	var dlq struct {
		Tasks []server.DispatchJSON `json:"tasks"`
	}
	for range 50 {
		td.admin("GET", "/api/v1/dlq", "").json(td.t, &dlq)
		if len(dlq.Tasks) == n {
			break
		}
		td.as("ops", "GET", "/api/v1/tasks?agent=nobody&wait=100ms", "")
	}
	return dlq.Tasks
}

// TestBrokerAPI drives the seed's endpoints over real HTTP against a real
// daemon: headers and tokens, defaults, idempotent create, capability
// routing and priority order, long polls, reports only from the assigned
// worker, a repeated report, a retried failure, the DLQ and its requeue
// (one and by filter), drain, stats, events with their agent.
func TestBrokerAPI(t *testing.T) {
	td := brokerDaemon(t)

	// Every route needs X-Agent-ID; admin routes the admin token.
	if r := td.do("POST", "/api/v1/tasks", `{"title":"x"}`); r.status != 400 || r.errorCode(t) != api.CodeBadRequest {
		t.Fatalf("without X-Agent-ID: %d %s", r.status, r.body)
	}
	mustStatus(t, td.as("mike", "GET", "/api/v1/stats", ""), 401)
	mustStatus(t, td.as("mike", "GET", "/api/v1/stats", "", "Authorization", "Bearer wrong"), 401)
	mustStatus(t, td.as("mike", "POST", "/api/v1/tasks", `{"description":"no title"}`), 400)

	// Defaults from the seed.
	r := td.as("mike", "POST", "/api/v1/tasks", `{"title":"research topic X","required_capabilities":["Research"],"priority":2}`, "Idempotency-Key", "k1")
	mustStatus(t, r, 201)
	research := dtask(t, r)
	if research.Owner != "mike" || research.Source != "agent" || research.TimeoutSeconds != 300 || research.MaxRetries != 3 ||
		!research.RetryEligible || research.Status != "pending" || research.DeadLettered {
		t.Fatalf("defaults: %+v", research)
	}
	again := dtask(t, td.as("mike", "POST", "/api/v1/tasks", `{"title":"research topic X","required_capabilities":["Research"],"priority":2}`, "Idempotency-Key", "k1"))
	if again.TaskID != research.TaskID {
		t.Fatalf("Idempotency-Key: %s then %s", research.TaskID, again.TaskID)
	}
	urgent := dtask(t, td.as("mike", "POST", "/api/v1/tasks", `{"title":"urgent","priority":9}`))
	child := dtask(t, td.as("mike", "POST", "/api/v1/tasks", fmt.Sprintf(`{"title":"child","parent_task_id":%q,"max_retries":0,"required_capabilities":["GENERAL"]}`, urgent.TaskID)))
	mustStatus(t, td.as("mike", "POST", "/api/v1/tasks", `{"title":"orphan","parent_task_id":"nope"}`), 400)

	// Two workers with different capabilities.
	mustStatus(t, td.as("gen", "PUT", "/api/v1/agents/gen", `{"capabilities":["general"],"max_tasks":1}`), 200)
	mustStatus(t, td.as("gen", "PUT", "/api/v1/agents/other", `{}`), 409) // only itself
	// gen takes the highest priority first; it cannot run research.
	got := td.poll("gen")
	if len(got) != 1 || got[0].TaskID != urgent.TaskID {
		t.Fatalf("gen got %+v, want urgent", got)
	}
	mustStatus(t, td.as("sci", "PUT", "/api/v1/agents/sci", `{"capabilities":["research","analysis"]}`), 200)
	got = td.poll("sci")
	if len(got) != 1 || got[0].TaskID != research.TaskID {
		t.Fatalf("sci got %+v, want research", got)
	}

	// A report from the wrong worker changes nothing.
	before := dtask(t, td.as("gen", "GET", "/api/v1/tasks/"+research.TaskID, ""))
	if r := td.as("gen", "POST", "/api/v1/tasks/"+research.TaskID+"/complete", `{"result":{"x":1}}`); r.status != 409 || r.errorCode(t) != api.CodeConflict {
		t.Fatalf("wrong worker: %d %s", r.status, r.body)
	}
	if after := dtask(t, td.as("gen", "GET", "/api/v1/tasks/"+research.TaskID, "")); after.Version != before.Version {
		t.Fatal("a refused report changed the task")
	}

	// Progress, then a retryable failure: the task comes back and succeeds.
	p := dtask(t, td.as("sci", "POST", "/api/v1/tasks/"+research.TaskID+"/progress", `{"message":"reading"}`))
	if p.Status != "in_progress" || p.StartedAt.IsZero() {
		t.Fatalf("progress: %+v", p)
	}
	mustStatus(t, td.as("sci", "POST", "/api/v1/tasks/"+research.TaskID+"/fail", `{"error":"connection refused","retry_eligible":true}`), 200)
	got = td.poll("sci")
	if len(got) != 1 || got[0].TaskID != research.TaskID || got[0].RetryCount != 1 {
		t.Fatalf("after the failure sci got %+v", got)
	}
	done := td.as("sci", "POST", "/api/v1/tasks/"+research.TaskID+"/complete", `{"result": {"pages": 42}}`)
	mustStatus(t, done, 200)
	first := dtask(t, done)
	if first.Status != "completed" || string(first.Result) != `{"pages":42}` {
		t.Fatalf("complete: %+v %s", first, first.Result)
	}
	repeat := td.as("sci", "POST", "/api/v1/tasks/"+research.TaskID+"/complete", `{"result": {"pages": 42}}`)
	mustStatus(t, repeat, 200)
	if dtask(t, repeat).Version != first.Version || repeat.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("repeated complete: %s", repeat.body)
	}

	// gen finishes urgent; the child (max_retries 0) fails into the DLQ.
	mustStatus(t, td.as("gen", "POST", "/api/v1/tasks/"+urgent.TaskID+"/complete", `{}`), 200)
	got = td.poll("gen")
	if len(got) != 1 || got[0].TaskID != child.TaskID {
		t.Fatalf("gen got %+v, want child", got)
	}
	mustStatus(t, td.as("gen", "POST", "/api/v1/tasks/"+child.TaskID+"/fail", `{"error":"bad input"}`), 200)
	dlq := td.waitDLQ(1)
	if len(dlq) != 1 || dlq[0].TaskID != child.TaskID || dlq[0].DeadLetterReason != "retries_exhausted" {
		t.Fatalf("dlq: %+v", dlq)
	}
	parent := dtask(t, td.as("mike", "GET", "/api/v1/tasks/"+urgent.TaskID, ""))
	if len(parent.Children) != 1 || parent.Children[0] != child.TaskID {
		t.Fatalf("children: %v", parent.Children)
	}

	// Drain gen, then requeue the dead letter: it waits in pending, since
	// gen is draining and sci lacks "general"; gen registering again ends
	// the drain and takes it.
	mustStatus(t, td.admin("POST", "/api/v1/agents/gen/drain", ""), 200)
	mustStatus(t, td.admin("POST", "/api/v1/dlq/"+urgent.TaskID+"/requeue", ""), 409)
	rq := dtask(t, td.admin("POST", "/api/v1/dlq/"+child.TaskID+"/requeue", `{"reason":"fixed"}`))
	if rq.DeadLettered || rq.RetryCount != 0 {
		t.Fatalf("requeued: %+v", rq)
	}
	if got := td.as("gen", "GET", "/api/v1/tasks?agent=gen&status=assigned&wait=300ms", ""); strings.Contains(string(got.body), child.TaskID) {
		t.Fatal("a draining worker got a new task")
	}
	var agents struct {
		Agents []struct {
			ID       string `json:"id"`
			Draining bool   `json:"draining"`
			Alive    bool   `json:"alive"`
		} `json:"agents"`
	}
	td.admin("GET", "/api/v1/agents", "").json(t, &agents)
	if len(agents.Agents) != 2 || agents.Agents[0].ID != "gen" || !agents.Agents[0].Draining || !agents.Agents[1].Alive {
		t.Fatalf("agents: %+v", agents)
	}
	mustStatus(t, td.as("gen", "PUT", "/api/v1/agents/gen", `{"capabilities":["general"]}`), 200)
	got = td.poll("gen")
	if len(got) != 1 || got[0].TaskID != child.TaskID {
		t.Fatalf("after requeue gen got %+v", got)
	}
	mustStatus(t, td.as("gen", "POST", "/api/v1/tasks/"+child.TaskID+"/fail", `{"error":"still bad","retry_eligible":false}`), 200)
	var n struct {
		Requeued int `json:"requeued"`
	}
	for range 50 {
		td.admin("POST", "/api/v1/dlq/requeue", `{"error":"still","reason":"bulk"}`).json(t, &n)
		if n.Requeued == 1 {
			break
		}
		td.as("gen", "GET", "/api/v1/tasks?agent=nobody&wait=100ms", "")
	}
	if n.Requeued != 1 {
		t.Fatal("bulk requeue matched nothing")
	}

	// Admin views.
	var stats struct {
		Tasks    int            `json:"tasks"`
		ByStatus map[string]int `json:"by_status"`
		Retries  int            `json:"retries"`
	}
	td.admin("GET", "/api/v1/stats", "").json(t, &stats)
	if stats.Tasks != 3 || stats.ByStatus["completed"] != 2 || stats.Retries < 1 {
		t.Fatalf("stats: %+v", stats)
	}

	// The task's events, in the one event form, each with its agent.
	want := "DISPATCH_CREATED/mike DISPATCH_ASSIGNED/$broker DISPATCH_STARTED/sci DISPATCH_FAILED/sci DISPATCH_RETRIED/$broker " +
		"DISPATCH_ASSIGNED/$broker DISPATCH_STARTED/sci DISPATCH_COMPLETED/sci"
	if got := td.eventAgents(research.TaskID); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
}

// TestBrokerAPISilentWorker: a worker that goes silent makes the task time
// out at its deadline, retry, and after max_retries land in the DLQ.
func TestBrokerAPISilentWorker(t *testing.T) {
	td := brokerDaemon(t)
	mustStatus(t, td.as("w", "PUT", "/api/v1/agents/w", `{}`), 200)
	task := dtask(t, td.as("w", "POST", "/api/v1/tasks", `{"title":"slow","timeout_seconds":1,"max_retries":1}`))
	for range 100 {
		cur := dtask(t, td.as("w", "GET", "/api/v1/tasks/"+task.TaskID, ""))
		if cur.DeadLettered {
			if cur.Status != "timed_out" || cur.RetryCount != 1 || cur.DeadLetterReason != "retries_exhausted" {
				t.Fatalf("dead letter: %+v", cur)
			}
			return
		}
		td.as("w", "GET", "/api/v1/tasks?agent=nobody&wait=200ms", "") // a bounded wait, and a sign of life
	}
	t.Fatal("the silent worker's task never reached the DLQ")
}
