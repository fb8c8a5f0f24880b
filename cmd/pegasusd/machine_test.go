package main

import (
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
	var created createdJSON
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
	if other := td.waitTask(td.submit("hello")); other.Machine != fsm.CurrentMachine.String() {
		t.Fatalf("default machine = %s", other.Machine)
	}
	r = td.do("POST", "/v1/tasks", `{"input":"x","machine":"pegasus.task@9"}`)
	if r.status != 400 || r.errorCode(t) == "" {
		t.Fatalf("unknown machine: %d %s", r.status, r.body)
	}
}
