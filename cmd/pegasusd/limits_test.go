package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	cfgfile "github.com/pegasus-engine/pegasus/config"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/server"
)

// TestBudgetWhy: a daemon whose configuration gives key acme a budget of
// one token: a task of that key is suspended before its first model
// call, with reason budget_exhausted; its JSON shows the key, why gives
// the budget's figures, GET /v1/spend answers; a task of another key
// completes.
func TestBudgetWhy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pegasus.yaml")
	yaml := "limits:\n  prices:\n    default: {input: 2, output: 8}\n  budgets:\n    keys:\n      acme: {maxTokens: 1}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := cfgfile.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.engine.Config = f
	td := startDaemon(t, cfg)

	r := td.do("POST", "/v1/tasks", `{"input":"what time is it?","concurrency_key":"acme"}`)
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created server.CreatedJSON
	r.json(t, &created)
	task := td.waitTask(created.TaskID)
	if task.State != fsm.StateSuspended || task.ConcurrencyKey != "acme" || !strings.HasPrefix(task.Question, "budget_exhausted: key acme's budget") {
		t.Fatalf("task: %s %q %q", task.State, task.ConcurrencyKey, task.Question)
	}
	var why struct {
		Budget struct {
			Text     string                 `json:"text"`
			Exceeded fsm.BudgetExceededBody `json:"exceeded"`
		} `json:"budget"`
	}
	td.do("GET", "/v1/tasks/"+created.TaskID+"/why", "").json(t, &why)
	if b := why.Budget.Exceeded; b.Key != "acme" || b.MaxTokens != 1 || b.ReservedTokens < 1024 || b.Policy != fsm.BudgetSuspend ||
		!strings.Contains(why.Budget.Text, "spent 0 + this call's") {
		t.Fatalf("why: %+v", why.Budget)
	}

	// The operator raises the budget, reloads the configuration and
	// resumes the task: it completes.
	if err := os.WriteFile(path, []byte(strings.Replace(yaml, "maxTokens: 1}", "maxTokens: 1000000}", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := td.d.reloadLimits(); err != nil {
		t.Fatal(err)
	}
	if r := td.do("POST", "/v1/tasks/"+created.TaskID+"/resume", `{"reason":"budget raised"}`); r.status != 200 {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	if task := td.waitTask(created.TaskID); task.State != fsm.StateCompleted {
		t.Fatalf("after the budget was raised: %s %q", task.State, task.Question)
	}

	other := td.submit("what time is it?")
	if task := td.waitTask(other); task.State != fsm.StateCompleted {
		t.Fatalf("other key: %s", task.State)
	}
	if r := td.do("GET", "/v1/spend", ""); r.status != 200 || !strings.Contains(string(r.body), `"by_key"`) {
		t.Fatalf("spend: %d %s", r.status, r.body)
	}
}
