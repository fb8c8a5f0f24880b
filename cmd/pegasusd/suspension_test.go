package main

import (
	"encoding/json"
	"github.com/pegasus-engine/pegasus/server"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	papi "github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/fsm"
)

// suspendedTask is the JSON of a task suspended through event via (an
// operator's TASK_SUSPENDED or the model's NEED_MORE_INFO), as GET
// /v1/tasks/{id} writes it.
func suspendedTask(id string, via fsm.EventType, why string) server.TaskJSON {
	c := &fsm.Context{SuspendedState: fsm.StateReasoning, SuspendReason: why}
	if via == fsm.NeedMoreInfo {
		c.Reasoning = &fsm.Reasoning{NeedsClarification: true, Question: why}
	}
	return server.TaskJSON{TaskID: id, State: fsm.StateSuspended, Machine: fsm.CurrentMachine.String(), Question: why, Context: c,
		History: []fsm.Transition{
			{From: fsm.StateIdle, To: fsm.StateReasoning, Event: fsm.TaskCreated},
			{From: fsm.StateReasoning, To: fsm.StateSuspended, Event: via},
		}}
}

// TestSubmitOperatorSuspend: a task an operator suspended is not taken for
// a question: submit says to resume it and exits 7, with or without a
// terminal, and asks nothing; a task whose model asked still exits 6 with
// the way to reply.
func TestSubmitOperatorSuspend(t *testing.T) {
	tasks := map[string]server.TaskJSON{
		"OPERATOR": suspendedTask("OPERATOR", fsm.TaskSuspended, "operator pause"),
		"ASKING":   suspendedTask("ASKING", fsm.NeedMoreInfo, "Which city?"),
	}
	var next string // the task the next POST /v1/tasks creates
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == "POST" && r.URL.Path == "/v1/tasks" {
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]string{"task_id": next, "state": "idle"})
			return
		}
		task, ok := tasks[strings.TrimPrefix(r.URL.Path, "/v1/tasks/")]
		if r.Method != "GET" || !ok {
			http.Error(w, `{"error":{"code":"not_found","message":"no such route"}}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(task)
	}))
	defer srv.Close()

	next = "OPERATOR"
	for _, interactive := range []bool{false, true} {
		code, _, errs := runClient(t, "an answer nobody should be asked for\n", interactive, "submit", "--server", srv.URL, "work")
		if code != exitSuspended || !strings.Contains(errs, "suspended by an operator (reason: operator pause)") ||
			!strings.Contains(errs, "pegasusd resume OPERATOR") || strings.Contains(errs, "asks") || strings.Contains(errs, "reply") {
			t.Errorf("operator's suspend, interactive=%t: exit %d, stderr %q", interactive, code, errs)
		}
	}
	next = "ASKING"
	code, _, errs := runClient(t, "", false, "submit", "--server", srv.URL, "work")
	if code != exitNeedInput || !strings.Contains(errs, "asks: Which city?") || !strings.Contains(errs, "pegasusd reply ASKING") {
		t.Errorf("question: exit %d, stderr %q", code, errs)
	}
}

// TestSuspension: what a suspended task waits for, from its history first,
// else its context.
func TestSuspension(t *testing.T) {
	noHistory := func(j server.TaskJSON) server.TaskJSON { j.History = j.History[:1]; return j }
	resumedThenAsked := suspendedTask("T", fsm.NeedMoreInfo, "Which city?")
	resumedThenAsked.History = append([]fsm.Transition{
		{From: fsm.StateReasoning, To: fsm.StateSuspended, Event: fsm.TaskSuspended},
		{From: fsm.StateSuspended, To: fsm.StateReasoning, Event: fsm.TaskResumed},
	}, resumedThenAsked.History...)
	for _, c := range []struct {
		name string
		task server.TaskJSON
		want string
	}{
		{"operator", suspendedTask("T", fsm.TaskSuspended, "operator pause"), waitsForResume},
		{"operator, no reason", suspendedTask("T", fsm.TaskSuspended, ""), waitsForResume},
		{"question", suspendedTask("T", fsm.NeedMoreInfo, "Which city?"), waitsForAnswer},
		{"the last suspension counts", resumedThenAsked, waitsForAnswer},
		{"operator, from the context", noHistory(suspendedTask("T", fsm.TaskSuspended, "operator pause")), waitsForResume},
		{"question, from the context", noHistory(suspendedTask("T", fsm.NeedMoreInfo, "Which city?")), waitsForAnswer},
		{"nothing to go by", server.TaskJSON{State: fsm.StateSuspended}, waitsForAnswer},
	} {
		if got := suspension(asAPITask(t, c.task)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// asAPITask is the task as a client reads it from the server's JSON.
func asAPITask(t *testing.T, j server.TaskJSON) *papi.Task {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	var task papi.Task
	if err := json.Unmarshal(b, &task); err != nil {
		t.Fatal(err)
	}
	return &task
}
