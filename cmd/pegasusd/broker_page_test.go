package main

import (
	"fmt"
	"github.com/pegasus-engine/pegasus/server"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrokerPageInBrowser drives the dashboard's Broker page against a
// real pegasusd whose broker has an admin token (and the daemon none): the
// page asks for the admin token once, shows the worker and the stats,
// requeues a dead letter by its button and another by a filter, and shows
// the API's error for a requeue the broker refuses.
func TestBrokerPageInBrowser(t *testing.T) {
	exe := findChromium(t)
	bin := buildDaemon(t)
	const admin = "broker-admin-s3cret"
	p := startProc(t, bin, filepath.Join(t.TempDir(), "data"), "--admin-token", admin, "--no-reflection")
	defer p.stop(t)
	c := &testDaemon{t: t, url: p.url}

	// A worker takes two tasks that allow no retry and fails both: they
	// land in the DLQ.
	mustStatus(t, c.as("w1", "PUT", "/api/v1/agents/w1", `{"capabilities":["gpu"],"max_tasks":2}`), 200)
	oom := dtask(t, c.as("client", "POST", "/api/v1/tasks", `{"title":"render frame","required_capabilities":["gpu"],"max_retries":0}`))
	disk := dtask(t, c.as("client", "POST", "/api/v1/tasks", `{"title":"encode video","required_capabilities":["gpu"],"max_retries":0}`))
	assigned := map[string]bool{}
	for len(assigned) < 2 {
		for _, tj := range c.poll("w1") {
			assigned[tj.TaskID] = true
		}
	}
	mustStatus(t, c.as("w1", "POST", "/api/v1/tasks/"+oom.TaskID+"/fail", `{"error":"out of memory","retry_eligible":false}`), 200)
	mustStatus(t, c.as("w1", "POST", "/api/v1/tasks/"+disk.TaskID+"/fail", `{"error":"disk full","retry_eligible":false}`), 200)

	b := newBrowser(t, exe)
	b.do("open the broker page", chromedp.Navigate(p.url+"/#/broker"))
	b.until("the admin token dialog", `document.getElementById("token-dialog").open && document.getElementById("token-title").textContent.includes("admin")`)
	b.shot("broker-token")
	b.do("a wrong admin token", chromedp.SendKeys(chromedp.ID("token-input"), "wrong"), chromedp.Click(chromedp.ID("token-ok")))
	b.until("the admin token refused", `document.getElementById("token-dialog").open && document.getElementById("token-error").textContent.includes("refused")`)
	b.do("the admin token", chromedp.SendKeys(chromedp.ID("token-input"), admin), chromedp.Click(chromedp.ID("token-ok")))

	row := func(id string) string { return fmt.Sprintf(`document.querySelector('#dlq tr[data-id=%q]')`, id) }
	b.until("both dead letters", row(oom.TaskID)+` !== null && `+row(disk.TaskID)+` !== null`)
	b.until("the worker", `document.querySelector('#workers tr[data-id="w1"] [data-load="0/2"]') !== null`)
	if got := eval[string](b, `document.querySelector('#workers tr[data-id="w1"]').textContent`); !strings.Contains(got, "gpu") || !strings.Contains(got, "alive") {
		t.Errorf("the worker's row: %q", got)
	}
	if got := eval[string](b, `document.querySelector('[data-figure="dead_letters"]').textContent`); got != "2" {
		t.Errorf("dead letters = %s, want 2", got)
	}
	if got := eval[string](b, `document.querySelector('#broker-counts [data-count="failed"]').textContent`); got != "2" {
		t.Errorf("failed = %s, want 2", got)
	}
	if got := eval[string](b, row(disk.TaskID)+`.textContent`); !strings.Contains(got, "disk full") || !strings.Contains(got, "encode video") {
		t.Errorf("the dead letter's row: %q", got)
	}
	b.tokenKept("pegasus.admin-token", admin)
	b.shot("broker")

	// Requeue one from its row: it leaves the DLQ.
	b.do("requeue one", chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-requeue=%q]`, oom.TaskID))))
	b.until("it left the DLQ", row(oom.TaskID)+` === null && document.getElementById("dlq-status").textContent.includes("Requeued")`)
	if tj := dtask(t, c.as("client", "GET", "/api/v1/tasks/"+oom.TaskID, "")); tj.DeadLettered || tj.Status == "failed" {
		t.Errorf("after the requeue: %s dead_lettered=%v", tj.Status, tj.DeadLettered)
	}

	// A requeue the broker refuses (the task is no dead letter any more)
	// shows the API's error.
	eval[bool](b, fmt.Sprintf(`(() => { document.querySelector('button[data-requeue=%q]').dataset.requeue = %q; return true; })()`, disk.TaskID, oom.TaskID))
	b.do("requeue a task that is no dead letter", chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-requeue=%q]`, oom.TaskID))))
	b.until("the API's error", `document.getElementById("dlq-error").textContent.includes("not a dead letter")`)
	if got := eval[string](b, `document.getElementById("dlq-error").textContent`); !strings.HasPrefix(got, "conflict") {
		t.Errorf("the error shown: %q", got)
	}
	b.shot("broker-error")

	// Requeue every dead letter matching a filter: "out" matches none.
	b.do("filter by error text", chromedp.SendKeys(chromedp.ID("dlq-error-text"), "out"), chromedp.Click(chromedp.ID("dlq-filter-btn")))
	b.until("nothing matches", `location.hash === "#/broker?error=out" && document.querySelector("#dlq tbody").textContent.includes("No dead letter matches")`)
	b.do("filter by capability", chromedp.Navigate(p.url+"/#/broker?capability=GPU"))
	b.until("the disk-full letter", row(disk.TaskID)+` !== null && !document.getElementById("dlq-requeue-all").disabled`)
	b.do("requeue all matching", chromedp.Click(chromedp.ID("dlq-requeue-all")))
	b.until("the DLQ is empty", `document.getElementById("dlq-status").textContent === "Requeued 1 task." && document.querySelector("#dlq tbody").textContent.includes("empty")`)
	var dlq struct {
		Tasks []server.DispatchJSON `json:"tasks"`
	}
	c.as("ops", "GET", "/api/v1/dlq", "", "Authorization", "Bearer "+admin).json(t, &dlq)
	if len(dlq.Tasks) != 0 {
		t.Errorf("the DLQ after the requeues: %+v", dlq.Tasks)
	}
	b.shot("broker-requeued")
}
