package main

import (
	"encoding/json"
	"fmt"
	"github.com/pegasus-engine/pegasus/server"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/broker"
	"github.com/pegasus-engine/pegasus/fsm"
)

// waitDispatch returns broker task id once cond holds, looking again
// after each bounded long poll (at most five seconds in all).
func (td *testDaemon) waitDispatch(id, what string, cond func(*server.DispatchJSON) bool) server.DispatchJSON {
	td.t.Helper()
	var j server.DispatchJSON
	for range 50 {
		td.as("mike", "GET", "/api/v1/tasks/"+id, "").json(td.t, &j)
		if cond(&j) {
			return j
		}
		td.as("mike", "GET", "/api/v1/tasks?agent=nobody&wait=100ms", "")
	}
	td.t.Fatalf("task %s never %s: %+v", id, what, j)
	return j
}

// TestBrokerAgentWorker runs broker tasks on the built-in agent (the
// offline model) over real HTTP against a real daemon: it is registered as
// worker "pegasus"; beside an external worker, tasks go by capability (a
// task asking for nothing never to the agent); a task asking for
// "general" runs as a pegasus.task
// child whose result completes it; a child that fails (cancelled while it
// waits for an answer) fails the attempt, retryable, and the retry's child
// completes; the children are listed on the broker task.
func TestBrokerAgentWorker(t *testing.T) {
	cfg := testConfig(t)
	cfg.server.AdminToken, cfg.engine.Broker.AgentWorker = "admin-secret", true
	td := startDaemon(t, cfg)

	var agents struct {
		Agents []broker.WorkerInfo `json:"agents"`
	}
	td.admin("GET", "/api/v1/agents", "").json(t, &agents)
	if len(agents.Agents) != 1 || agents.Agents[0].ID != "pegasus" || !slices.Equal(agents.Agents[0].Capabilities, broker.AgentCapabilities) {
		t.Fatalf("agents: %+v", agents.Agents)
	}

	// Routing beside an external worker: research goes to sci, a task
	// asking for nothing too (never to the agent), plan to the agent.
	mustStatus(t, td.as("sci", "PUT", "/api/v1/agents/sci", `{"capabilities":["research"],"max_tasks":2}`), 200)
	research := dtask(t, td.as("mike", "POST", "/api/v1/tasks", `{"title":"dig","required_capabilities":["research"]}`))
	plain := dtask(t, td.as("mike", "POST", "/api/v1/tasks", `{"title":"anything"}`))
	plan := dtask(t, td.as("mike", "POST", "/api/v1/tasks", `{"title":"plan a trip","required_capabilities":["plan"]}`))
	for _, c := range []struct {
		id, worker string
	}{{research.TaskID, "sci"}, {plain.TaskID, "sci"}, {plan.TaskID, "pegasus"}} {
		if j := td.waitDispatch(c.id, "assigned", func(j *server.DispatchJSON) bool { return j.AssignedAgent != "" }); j.AssignedAgent != c.worker {
			t.Fatalf("%s went to %s, want %s", j.Title, j.AssignedAgent, c.worker)
		}
	}
	td.waitDispatch(plan.TaskID, "completed", func(j *server.DispatchJSON) bool { return j.Status == "completed" })

	// A task for the agent completes with the child's result.
	task := dtask(t, td.as("mike", "POST", "/api/v1/tasks", `{"title":"what is event sourcing?","required_capabilities":["General"]}`))
	done := td.waitDispatch(task.TaskID, "completed", func(j *server.DispatchJSON) bool { return j.Status == "completed" })
	var res struct {
		Child  string `json:"pegasus_task_id"`
		Result string `json:"result"`
	}
	if err := json.Unmarshal(done.Result, &res); err != nil || !strings.Contains(res.Result, "what is event sourcing?") ||
		done.AssignedAgent != "pegasus" || len(done.Children) != 1 || done.Children[0] != res.Child {
		t.Fatalf("completed: %+v %s (%v)", done, done.Result, err)
	}
	var child server.TaskJSON
	td.do("GET", "/v1/tasks/"+res.Child, "").json(t, &child)
	if child.State != fsm.StateCompleted || child.Source != broker.AgentSource || child.Type != "general" || child.Result != res.Result {
		t.Fatalf("child: %+v", child)
	}

	// The retry path: "?" makes the offline model ask a question, so the
	// child waits; cancelling it fails the attempt; the retry runs a new
	// child, which is answered and completes the broker task.
	ask, second, end := retryThroughAChild(t, td, "agent", "what is event sourcing?")
	if end.RetryCount != 1 || !strings.Contains(string(end.Result), second) {
		t.Fatalf("after the retry: %+v %s", end, end.Result)
	}
	want := "DISPATCH_CREATED/mike DISPATCH_ASSIGNED/$broker DISPATCH_STARTED/pegasus DISPATCH_FAILED/pegasus DISPATCH_RETRIED/$broker " +
		"DISPATCH_ASSIGNED/$broker DISPATCH_STARTED/pegasus DISPATCH_COMPLETED/pegasus"
	if got := td.eventAgents(ask.TaskID); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}

	// why words the broker's decisions.
	var why struct {
		Decisions []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"decisions"`
	}
	td.do("GET", "/v1/tasks/"+ask.TaskID+"/why", "").json(t, &why)
	if len(why.Decisions) != 8 || !strings.HasPrefix(why.Decisions[3].Text, "failed by pegasus") || !strings.HasPrefix(why.Decisions[4].Text, "retried (1 of 2)") {
		t.Fatalf("why: %+v", why.Decisions)
	}

	// A restart changes nothing (no second report, no second child), and
	// verify finds the linked machines' histories clean.
	td = td.restart(cfg)
	if again := dtask(t, td.as("mike", "GET", "/api/v1/tasks/"+ask.TaskID, "")); again.Version != end.Version || len(again.Children) != 2 {
		t.Fatalf("after a restart: %+v", again)
	}
	if got := td.eventAgents(ask.TaskID); got != want {
		t.Fatalf("events after a restart:\n got %s\nwant %s", got, want)
	}
	td.stop()
	openVerified(t, cfg.engine.DataDir)
}

// eventAgents is a broker task's events as TYPE/AGENT, space-separated.
func (td *testDaemon) eventAgents(id string) string {
	td.t.Helper()
	var evs struct {
		Events []struct {
			Type    string `json:"type"`
			AgentID string `json:"agent_id"`
		} `json:"events"`
	}
	td.as("mike", "GET", "/api/v1/tasks/"+id+"/events", "").json(td.t, &evs)
	var line []string
	for _, e := range evs.Events {
		line = append(line, e.Type+"/"+e.AgentID)
	}
	return strings.Join(line, " ")
}

// TestBrokerAgentWorkerCrash kills the daemon (SIGKILL) while broker tasks
// run on the built-in agent as children waiting for an answer, restarts
// it, and checks: no child is created twice, each child answered
// completes its broker task, and verify is clean.
func TestBrokerAgentWorkerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon binary")
	}
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	flags := []string{"--admin-token", "admin-secret"}
	p := startProc(t, bin, data, flags...)
	td := &testDaemon{t: t, url: p.url}
	children := map[string]string{} // broker task -> its child
	for i := range 3 {
		j := dtask(t, td.as("mike", "POST", "/api/v1/tasks", `{"title":"?","required_capabilities":["agent"]}`, "Idempotency-Key", fmt.Sprint("ask-", i)))
		running := td.waitDispatch(j.TaskID, "running a child", func(j *server.DispatchJSON) bool { return len(j.Children) == 1 })
		if c := td.waitTask(running.Children[0]); c.State != fsm.StateSuspended {
			t.Fatalf("child %s: %s", c.TaskID, c.State)
		}
		children[j.TaskID] = running.Children[0]
	}
	p.kill(t)

	p = startProc(t, bin, data, flags...)
	td = &testDaemon{t: t, url: p.url}
	for id, child := range children {
		j := dtask(t, td.as("mike", "GET", "/api/v1/tasks/"+id, ""))
		if j.Status != "in_progress" || len(j.Children) != 1 || j.Children[0] != child {
			t.Fatalf("after the restart %s: %+v", id, j)
		}
		mustStatus(t, td.do("POST", "/v1/tasks/"+child+"/messages", `{"text":"what is event sourcing?"}`), 200)
		done := td.waitDispatch(id, "completed", func(j *server.DispatchJSON) bool { return j.Status == "completed" })
		if done.RetryCount != 0 || !strings.Contains(string(done.Result), child) {
			t.Fatalf("completed: %+v %s", done, done.Result)
		}
		if got := td.eventAgents(id); got != "DISPATCH_CREATED/mike DISPATCH_ASSIGNED/$broker DISPATCH_STARTED/pegasus DISPATCH_COMPLETED/pegasus" {
			t.Fatalf("events: %s", got)
		}
	}
	p.stop(t)
	openVerified(t, data)
}

// retryThroughAChild runs a broker task's retry through the built-in
// agent: "?" makes the offline model ask a question, so the task's child
// waits; cancelling that child fails the attempt; the retry runs a new
// child, which is answered with answer, and the broker task completes. It
// returns the broker task, the retry's child and the task at its end.
func retryThroughAChild(t *testing.T, td *testDaemon, capability, answer string) (ask server.DispatchJSON, second string, end server.DispatchJSON) {
	t.Helper()
	ask = dtask(t, td.as("mike", "POST", "/api/v1/tasks", `{"title":"?","required_capabilities":["`+capability+`"],"max_retries":2}`))
	first := td.waitDispatch(ask.TaskID, "running a child", func(j *server.DispatchJSON) bool { return len(j.Children) == 1 })
	if c := td.waitTask(first.Children[0]); c.State != fsm.StateSuspended {
		t.Fatalf("first child: %s", c.State)
	}
	mustStatus(t, td.do("POST", "/v1/tasks/"+first.Children[0]+"/cancel", `{"reason":"test"}`), 200)
	retried := td.waitDispatch(ask.TaskID, "retried with a new child", func(j *server.DispatchJSON) bool {
		return j.RetryCount == 1 && len(j.Children) == 2 && j.Status == "in_progress"
	})
	second = retried.Children[0]
	if second == first.Children[0] {
		second = retried.Children[1]
	}
	if c := td.waitTask(second); c.State != fsm.StateSuspended {
		t.Fatalf("second child: %s", c.State)
	}
	mustStatus(t, td.do("POST", "/v1/tasks/"+second+"/messages", `{"text":`+strconv.Quote(answer)+`}`), 200)
	end = td.waitDispatch(ask.TaskID, "completed", func(j *server.DispatchJSON) bool { return j.Status == "completed" })
	return ask, second, end
}
