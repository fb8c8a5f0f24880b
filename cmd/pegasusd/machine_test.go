package main

import (
	"github.com/pegasus-engine/pegasus/server"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

// A task submitted with "machine": "pegasus.task@0" runs the legacy
// machine through the daemon with the offline model, keeps it, and shows
// it; the default stays the current machine; an unknown machine is a 400
// that creates nothing.
func TestHTTPSubmitUnderVersion0(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	r := td.do("POST", "/v1/tasks", `{"input":"what time is it?","machine":"pegasus.task@0"}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created server.CreatedJSON
	r.json(t, &created)
	task := td.waitTask(created.TaskID)
	if task.State != fsm.StateCompleted || task.Machine != "pegasus.task@0" || !strings.HasPrefix(task.Result, "The current time is ") {
		t.Fatalf("task = %+v", task)
	}
	var states []string
	for _, h := range task.History {
		states = append(states, string(h.To))
	}
	if got := strings.Join(states, " "); got != "perceiving thinking planning acting reflecting completed" {
		t.Fatalf("history = %s", got)
	}
	other := td.waitTask(td.submit("hello"))
	if other.Machine != fsm.CurrentMachine.String() {
		t.Fatalf("default machine = %s", other.Machine)
	}
	// The list filters by machine (NAME@VERSION, the NAME/vVERSION form,
	// or NAME for every version), and the stats count tasks by machine.
	for q, want := range map[string]string{
		"machine=pegasus.task@0":                 created.TaskID,
		"machine=pegasus.task/v1":                other.TaskID,
		"machine=pegasus.task@1&state=completed": other.TaskID,
		"machine=pegasus.task@0,pegasus.task@1":  created.TaskID + " " + other.TaskID,
		"machine=pegasus.task@0&type=explore":    "",
		"machine=pegasus.task":                   created.TaskID + " " + other.TaskID,
		"machine=pegasus.task@1&limit=1":         other.TaskID,
		"q=TIME+IS":                              created.TaskID,
		"q=hello&machine=pegasus.task":           other.TaskID,
		"q=" + other.TaskID[20:]:                 other.TaskID,
	} {
		var list struct {
			Tasks []struct {
				ID      string `json:"task_id"`
				Machine string `json:"machine"`
			} `json:"tasks"`
		}
		td.do("GET", "/v1/tasks?order=asc&"+q, "").json(t, &list)
		var ids []string
		for _, x := range list.Tasks {
			ids = append(ids, x.ID)
		}
		if got := strings.Join(ids, " "); got != want {
			t.Errorf("GET /v1/tasks?%s = %q, want %q", q, got, want)
		}
	}
	for _, q := range []string{"machine=pegasus.task@9", "machine=nomachine", "machine=pegasus.task/vx"} {
		if r := td.do("GET", "/v1/tasks?"+q, ""); r.status != 400 || r.errorCode(t) != "bad_request" {
			t.Errorf("GET /v1/tasks?%s: %d %s", q, r.status, r.body)
		}
	}
	var stats struct {
		Tasks struct {
			ByMachine map[string]int64 `json:"by_machine"`
		} `json:"tasks"`
	}
	td.do("GET", "/v1/stats", "").json(t, &stats)
	if m := stats.Tasks.ByMachine; len(m) != 2 || m["pegasus.task@0"] != 1 || m["pegasus.task@1"] != 1 {
		t.Fatalf("stats by_machine = %v", m)
	}
	r = td.do("POST", "/v1/tasks", `{"input":"x","machine":"pegasus.task@9"}`)
	if r.status != 400 || r.errorCode(t) == "" {
		t.Fatalf("unknown machine: %d %s", r.status, r.body)
	}
}
