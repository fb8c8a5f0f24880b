package main

import (
	"encoding/json"
	"fmt"
	"github.com/pegasus-engine/pegasus/api"
	"slices"
	"strings"
	"testing"
)

// errorMessage returns the code and the message of an error answer.
func errorMessage(t *testing.T, r response) (string, string) {
	t.Helper()
	var env struct {
		Error api.ErrorDetail `json:"error"`
	}
	r.json(t, &env)
	return env.Error.Code, env.Error.Message
}

// TestAPIsRefuseUnknownFilterValues: an unknown filter value is a 400 on
// both task lists, not an empty page.
func TestAPIsRefuseUnknownFilterValues(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	for _, c := range []struct{ path, want string }{
		{"/v1/tasks?state=bogus", `state "bogus"`},
		{"/v1/tasks?order=sideways", `order "sideways"`},
		{"/api/v1/tasks?status=bogus", `status "bogus": give one of pending, assigned, in_progress, completed, failed, timed_out`},
		{"/api/v1/tasks?status=reasoning", `status "reasoning"`}, // a state of the other machine
		{"/api/v1/tasks?order=sideways", `order "sideways": give asc or desc`},
	} {
		r := td.as("client", "GET", c.path, "")
		if r.status != 400 {
			t.Errorf("GET %s: %d, want 400: %s", c.path, r.status, r.body)
			continue
		}
		if code, msg := errorMessage(t, r); code != api.CodeBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("GET %s: %s %q, want bad_request with %q", c.path, code, msg, c.want)
		}
	}
}

// TestAPIsListOldestFirst: both task lists are oldest first by default,
// newest first with order=desc, and page the same way in both orders.
func TestAPIsListOldestFirst(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	var v1, api []string
	for i := range 3 {
		id := td.submit(fmt.Sprintf("what time is it? %d", i))
		td.waitTask(id)
		v1 = append(v1, id)
		r := td.as("client", "POST", "/api/v1/tasks", fmt.Sprintf(`{"title":"t%d","required_capabilities":["nobody"]}`, i))
		mustStatus(t, r, 201)
		api = append(api, dtask(t, r).TaskID)
	}
	ids := func(path string) ([]string, string) {
		t.Helper()
		r := td.as("client", "GET", path, "")
		mustStatus(t, r, 200)
		var page struct {
			Tasks []struct {
				TaskID string `json:"task_id"`
			} `json:"tasks"`
			NextCursor string `json:"next_cursor"`
		}
		r.json(t, &page)
		var out []string
		for _, tk := range page.Tasks {
			out = append(out, tk.TaskID)
		}
		return out, page.NextCursor
	}
	reversed := func(s []string) []string {
		out := make([]string, len(s))
		for i, v := range s {
			out[len(s)-1-i] = v
		}
		return out
	}
	same := func(what string, got, want []string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	got, _ := ids("/v1/tasks?machine=pegasus.task")
	same("/v1/tasks", got, v1)
	got, _ = ids("/api/v1/tasks")
	same("/api/v1/tasks", got, api)
	got, _ = ids("/v1/tasks?machine=pegasus.task&order=desc")
	same("/v1/tasks?order=desc", got, reversed(v1))
	got, _ = ids("/api/v1/tasks?order=desc")
	same("/api/v1/tasks?order=desc", got, reversed(api))

	// Pages of two, newest first: the cursor continues in the same order.
	first, cursor := ids("/api/v1/tasks?order=desc&limit=2")
	rest, next := ids("/api/v1/tasks?order=desc&limit=2&cursor=" + cursor)
	same("/api/v1/tasks?order=desc, two pages", append(first, rest...), reversed(api))
	if cursor == "" || next != "" {
		t.Errorf("cursors %q then %q, want one then none", cursor, next)
	}
}

// TestAPIsEmptyValues: the fields both APIs have are always present, with
// the same empty values: "error": "" and "metadata": {} on a task of either
// API, in a list and alone; a task's events carry its "task_id" on both.
func TestAPIsEmptyValues(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	id := td.submit("what time is it?")
	td.waitTask(id)
	r := td.as("client", "POST", "/api/v1/tasks", `{"title":"t","required_capabilities":["nobody"]}`)
	mustStatus(t, r, 201)
	did := dtask(t, r).TaskID

	check := func(path, pointer string, want map[string]string) {
		t.Helper()
		r := td.as("client", "GET", path, "")
		mustStatus(t, r, 200)
		var v any
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Fatal(err)
		}
		if pointer == "tasks/0" {
			v = v.(map[string]any)["tasks"].([]any)[0]
		}
		obj := v.(map[string]any)
		for field, empty := range want {
			got, ok := obj[field]
			js, _ := json.Marshal(got)
			if !ok || string(js) != empty {
				t.Errorf("GET %s: %q is %s (present %v), want %s", path, field, js, ok, empty)
			}
		}
	}
	check("/v1/tasks/"+id, "", map[string]string{"error": `""`, "metadata": `{}`})
	check("/v1/tasks?limit=1", "tasks/0", map[string]string{"error": `""`})
	check("/api/v1/tasks/"+did, "", map[string]string{"error": `""`, "metadata": `{}`})
	check("/api/v1/tasks?limit=1", "tasks/0", map[string]string{"error": `""`, "metadata": `{}`})
	// A task's events name the task on both.
	check("/v1/tasks/"+id+"/events?limit=1", "", map[string]string{"task_id": `"` + id + `"`})
	check("/api/v1/tasks/"+did+"/events", "", map[string]string{"task_id": `"` + did + `"`})
}

// TestBrokerReportMessages: a refused report says what stands in the way,
// in words built from the broker's typed error; the text of the Go error
// (with its "broker: " prefix) is not cut up into one.
func TestBrokerReportMessages(t *testing.T) {
	td := brokerDaemon(t)
	mustStatus(t, td.as("sci", "PUT", "/api/v1/agents/sci", `{"capabilities":["research"],"max_tasks":1}`), 200)
	r := td.as("mike", "POST", "/api/v1/tasks", `{"title":"Research topic X","required_capabilities":["research"]}`)
	mustStatus(t, r, 201)
	id := dtask(t, r).TaskID
	if got := td.poll("sci"); len(got) != 1 || got[0].TaskID != id {
		t.Fatalf("sci's poll: %v", got)
	}
	refused := func(agent, path, body, want string) {
		t.Helper()
		r := td.as(agent, "POST", "/api/v1/tasks/"+id+path, body)
		mustStatus(t, r, 409)
		if code, msg := errorMessage(t, r); code != api.CodeConflict || msg != want {
			t.Errorf("%s %s: %s %q,\nwant conflict %q", agent, path, code, msg, want)
		}
	}
	// Another worker: the task is assigned to sci (the old message read
	// "the task is not assigned to this task ...": "agent: " was taken for
	// a package prefix).
	refused("bob", "/complete", `{"result":1}`,
		fmt.Sprintf(`task %q is assigned to "sci", not to "bob": only the assigned worker reports`, id))
	mustStatus(t, td.as("sci", "POST", "/api/v1/tasks/"+id+"/complete", `{"result":{"pages":42}}`), 200)
	// The assigned worker, with another result: the task is completed (it
	// used to be told that it is not assigned).
	refused("sci", "/complete", `{"result":{"pages":43}}`, fmt.Sprintf(`task %q is already completed: it takes no more reports`, id))
	refused("sci", "/fail", `{"error":"late"}`, fmt.Sprintf(`task %q is already completed: it takes no more reports`, id))

	// The other refusals of the broker speak the same way.
	r = td.as("sci", "GET", "/api/v1/tasks/01JABCDEFGHJKMNPQRSTVWXYZ0", "")
	if code, msg := errorMessage(t, r); r.status != 404 || code != api.CodeNotFound || msg != `no such task "01JABCDEFGHJKMNPQRSTVWXYZ0"` {
		t.Errorf("unknown task: %d %s %q", r.status, code, msg)
	}
	r = td.admin("POST", "/api/v1/dlq/"+id+"/requeue", "")
	if code, msg := errorMessage(t, r); r.status != 409 || code != api.CodeConflict || msg != fmt.Sprintf(`task %q is not a dead letter`, id) {
		t.Errorf("requeue of a completed task: %d %s %q", r.status, code, msg)
	}
	r = td.as("client", "POST", "/v1/tasks", `{"input":"x","type":"nope"}`)
	if code, msg := errorMessage(t, r); r.status != 400 || code != api.CodeBadRequest || !strings.HasPrefix(msg, `unknown task type "nope" (known: `) {
		t.Errorf("unknown task type: %d %s %q", r.status, code, msg)
	}
}

// TestAPIsAgreeOnTaskTypes: GET /v1/task-types lists the types POST
// /v1/tasks takes (each one is accepted; an unknown one is refused with
// a message naming every listed type), and GET /v1/tools agrees with it:
// each tool a type offers is listed, and names that type among its
// task_types. A daemon that serves no catalog lists nothing: the test
// skips.
func TestAPIsAgreeOnTaskTypes(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	var types api.TaskTypeList
	var tools api.ToolList
	td.do("GET", "/v1/task-types", "").json(t, &types)
	td.do("GET", "/v1/tools", "").json(t, &tools)
	if len(types.TaskTypes) == 0 {
		t.Skip("the daemon lists no task type: it serves no catalog (server.Deps.Catalog)")
	}
	r := td.do("POST", "/v1/tasks", `{"input":"x","type":"no-such-type"}`)
	_, msg := errorMessage(t, r)
	if r.status != 400 {
		t.Errorf("an unknown type: %d %s, want 400", r.status, r.body)
	}
	offered := map[string][]string{}
	for _, tl := range tools.Tools {
		offered[tl.Name] = tl.TaskTypes
	}
	for _, ty := range types.TaskTypes {
		if !strings.Contains(msg, ty.Name) {
			t.Errorf("the refusal of an unknown type does not name %q: %s", ty.Name, msg)
		}
		r := td.do("POST", "/v1/tasks", fmt.Sprintf(`{"input":"hello","type":%q}`, ty.Name))
		if r.status != 201 {
			t.Errorf("POST /v1/tasks type %q: %d %s", ty.Name, r.status, r.body)
		}
		for _, name := range ty.Tools {
			in, ok := offered[name]
			if !ok {
				t.Errorf("type %s offers %s, which GET /v1/tools does not list", ty.Name, name)
			} else if !slices.Contains(in, ty.Name) {
				t.Errorf("type %s offers %s, whose task_types are %v", ty.Name, name, in)
			}
		}
	}
}
