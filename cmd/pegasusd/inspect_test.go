package main

import (
	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/server"
	"strconv"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

func TestTaskStateAndWhy(t *testing.T) {
	cfg := testConfig(t)
	cfg.engine.DisableReflection = true // nothing is appended once the task is done
	td := startDaemon(t, cfg)
	id := td.submit("what time is it?")
	final := td.waitTask(id)

	var evs struct {
		Events []replay.EventJSON `json:"events"`
	}
	td.do("GET", "/v1/tasks/"+id+"/events", "").json(t, &evs)
	if len(evs.Events) < 3 || evs.Events[1].Type != string(fsm.TaskCreated) {
		t.Fatalf("events: %+v", evs.Events)
	}

	// At its second event (TASK_CREATED) the task was reasoning; by seq,
	// by event id and now.
	for _, at := range []string{strconv.FormatUint(evs.Events[1].Seq, 10), evs.Events[1].ID} {
		var r struct {
			At   string          `json:"at"`
			Task server.TaskJSON `json:"task"`
		}
		res := td.do("GET", "/v1/tasks/"+id+"/state?at="+at, "")
		res.json(t, &r)
		if res.status != 200 || r.Task.State != fsm.StateReasoning || r.Task.Version != 2 || r.At == "" {
			t.Errorf("state at %s: %d %+v", at, res.status, r)
		}
	}
	var now struct {
		Task server.TaskJSON `json:"task"`
	}
	td.do("GET", "/v1/tasks/"+id+"/state", "").json(t, &now)
	if now.Task.State != final.State || now.Task.Version != final.Version {
		t.Errorf("state now: %s v%d, want %s v%d", now.Task.State, now.Task.Version, final.State, final.Version)
	}
	// Before the task existed: not found. A malformed bound: bad request.
	if r := td.do("GET", "/v1/tasks/"+id+"/state?at=1", ""); r.status != 404 {
		t.Errorf("state before the task: %d %s", r.status, r.body)
	}
	if r := td.do("GET", "/v1/tasks/"+id+"/state?at=yesterday", ""); r.status != 400 || r.errorCode(t) != api.CodeBadRequest {
		t.Errorf("state at a bad bound: %d %s", r.status, r.body)
	}

	var why struct {
		TaskID string             `json:"task_id"`
		Chain  []replay.EventJSON `json:"chain"`
		Tree   *server.WhyNode    `json:"tree"`
	}
	td.do("GET", "/v1/tasks/"+id+"/why", "").json(t, &why)
	if len(why.Chain) == 0 || why.Chain[len(why.Chain)-1].Type != string(fsm.MessageReceived) || why.Tree == nil {
		t.Fatalf("why: %+v", why)
	}
	var count func(n *server.WhyNode) int
	count = func(n *server.WhyNode) int {
		c := 1
		for _, k := range n.Children {
			c += count(k)
		}
		return c
	}
	if n := count(why.Tree); n < len(evs.Events) {
		t.Errorf("the tree has %d events, the task's stream %d", n, len(evs.Events))
	}
	if r := td.do("GET", "/v1/tasks/"+id+"/why?max_nodes=0", ""); r.status != 400 {
		t.Errorf("max_nodes=0: %d", r.status)
	}
	if r := td.do("GET", "/v1/tasks/01M80RCFV3281HRSKQBDEXQ948/why", ""); r.status != 404 {
		t.Errorf("why of an unknown task: %d", r.status)
	}
}
