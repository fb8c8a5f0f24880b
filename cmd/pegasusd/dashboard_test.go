package main

import (
	"context"
	"fmt"
	"github.com/pegasus-engine/pegasus/server"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pegasus-engine/pegasus/projection"
)

// findChromium returns the browser of the dashboard test: $PEGASUS_CHROMIUM,
// /usr/bin/chromium, or chromium, chromium-browser or google-chrome on the
// PATH. Without one the test fails in CI (CI=true: .ci/run installs
// Debian's chromium) and is skipped elsewhere.
func findChromium(t *testing.T) string {
	t.Helper()
	cands := []string{os.Getenv("PEGASUS_CHROMIUM"), "/usr/bin/chromium"}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			cands = append(cands, p)
		}
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium: install Debian's chromium (.ci/run does) or set PEGASUS_CHROMIUM")
	}
	t.Skip("no Chromium (set PEGASUS_CHROMIUM or install chromium); CI runs this test")
	return ""
}

// browser is one headless Chromium tab.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
	n     int
	axe   string // axe-core's script, once read (dashboard_axe_test.go)
}

func newBrowser(t *testing.T, exe string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	shots := os.Getenv("PEGASUS_SCREENSHOTS")
	if shots == "" {
		var err error
		if shots, err = os.MkdirTemp("", "pegasus-dashboard-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	// The first action starts the browser: no timeout on it (a timeout
	// would stop the browser with it).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	return &browser{t: t, ctx: ctx, shots: shots}
}

// do runs actions within the test timeout.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.fail(what, err)
	}
}

// until waits for a JavaScript predicate to hold in the page.
func (b *browser) until(what, predicate string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	b.do(what, chromedp.Steps(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for {
			_, err := chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingTimeout(time.Until(deadline)))(ctx, t)
			if !contextLost(err) || time.Now().After(deadline) {
				return chromedp.Void{}, err
			}
		}
	}))
}

// contextLost reports the race between a navigation and an evaluation:
// the browser dropped the page's JavaScript context that chromedp had
// recorded, and a new one is on its way. Evaluating again uses it.
func contextLost(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") ||
		strings.Contains(msg, "Execution context was destroyed")
}

func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testTimeout)
	defer cancel()
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
		if contextLost(err) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			b.fail(expr, err)
		}
		return v
	}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	path := b.shot("failure")
	b.t.Fatalf("%s: %v\npage text:\n%s\nscreenshot: %s", what, err, text, path)
}

// tokenKept checks that token lives in the tab's sessionStorage under key,
// never in the URL.
func (b *browser) tokenKept(key, token string) {
	b.t.Helper()
	if got := eval[string](b, fmt.Sprintf(`sessionStorage.getItem(%q) || ""`, key)); got != token {
		b.t.Errorf("sessionStorage %s = %q, want %q", key, got, token)
	}
	if u := eval[string](b, `location.href`); strings.Contains(u, token) {
		b.t.Errorf("the token is in the URL %s", u)
	}
}

// shot saves a full-page screenshot and prints its path.
func (b *browser) shot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testTimeout)
	defer cancel()
	// From the top, so that the sticky header is where a reader expects it.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.scrollTo(0, 0), true`)); err != nil {
		b.t.Errorf("scroll: %v", err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return ""
	}
	b.n++
	path := filepath.Join(b.shots, fmt.Sprintf("%02d-%s.png", b.n, name))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", path)
	return path
}

// TestDashboardInBrowser drives the dashboard of a real, token-protected
// pegasusd in headless Chromium.
func TestDashboardInBrowser(t *testing.T) {
	exe := findChromium(t)
	bin := buildDaemon(t)
	const token = "dashboard-s3cret"
	p := startProc(t, bin, filepath.Join(t.TempDir(), "data"), "--token", token, "--no-reflection")
	defer p.stop(t)
	c := &testDaemon{t: t, url: p.url, token: token}
	for _, in := range []string{"what time is it?", "hello", "what time is it?"} {
		c.waitTask(c.submit(in))
	}
	suspended := c.submit("?") // the offline model asks what to do
	if tj := c.waitTask(suspended); tj.State != "suspended" {
		t.Fatalf("the task %q is %s, want suspended", "?", tj.State)
	}

	b := newBrowser(t, exe)
	b.do("open the dashboard", chromedp.Navigate(p.url+"/"))

	// Without the token the page's API calls are refused: it asks for it.
	b.until("the token dialog", `document.getElementById("token-dialog").open`)
	if st := eval[int](b, `fetch("/v1/stats").then(r => r.status)`); st != http.StatusUnauthorized {
		t.Errorf("the page's API call without the token answered %d, want 401", st)
	}
	if n := eval[int](b, `document.querySelectorAll("#counts .count").length`); n != 0 {
		t.Errorf("the overview shows %d counts before the token", n)
	}
	b.shot("token")
	b.accessible("token")
	b.do("a wrong token", chromedp.SendKeys(chromedp.ID("token-input"), "wrong"), chromedp.Click(chromedp.ID("token-ok")))
	b.until("the token refused", `document.getElementById("token-dialog").open && document.getElementById("token-error").textContent.includes("refused")`)
	b.do("the token", chromedp.SendKeys(chromedp.ID("token-input"), token), chromedp.Click(chromedp.ID("token-ok")))

	// The overview's counts are the stats'.
	var stats struct {
		Tasks struct {
			Tasks   int64            `json:"tasks"`
			ByState map[string]int64 `json:"by_state"`
		} `json:"tasks"`
	}
	c.do("GET", "/v1/stats", "").json(t, &stats)
	b.until("the counts", `document.querySelector('#counts [data-count="completed"]') !== null && document.getElementById("live").classList.contains("on")`)
	for _, st := range []string{"idle", "reasoning", "acting", "suspended", "completed", "failed"} {
		got := eval[string](b, fmt.Sprintf(`document.querySelector('#counts [data-count=%q]').textContent`, st))
		if want := fmt.Sprint(stats.Tasks.ByState[st]); got != want {
			t.Errorf("overview: %s = %s, want %s", st, got, want)
		}
	}
	if got := eval[string](b, `document.querySelector('#counts [data-count="all tasks"]').textContent`); got != "4" {
		t.Errorf("overview: all tasks = %s, want 4", got)
	}
	if got := eval[string](b, `document.querySelector('#by-machine [data-key="pegasus.task@1"]').textContent`); got != "4" {
		t.Errorf("overview: tasks by machine pegasus.task@1 = %s, want 4", got)
	}
	b.tokenKept("pegasus.token", token)
	b.shot("overview")
	b.accessible("overview")

	// A task submitted elsewhere appears live and completes without a
	// reload.
	eval[bool](b, `window.noReload = true`)
	id := c.submit("what time is it?")
	b.until("the new task completes on the overview", fmt.Sprintf(`document.querySelector('#recent tr[data-id=%q][data-state="completed"]') !== null`, id))
	if !eval[bool](b, `window.noReload === true`) {
		t.Error("the page reloaded")
	}
	b.until("the completed count moves", `document.querySelector('#counts [data-count="completed"]').textContent === "4"`)

	// The task's detail: timeline and causation tree.
	tj := c.waitTask(id)
	b.do("open the task", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#recent a[href="#/tasks/%s"]`, id))))
	b.until("the timeline", fmt.Sprintf(`document.querySelectorAll("#timeline > li").length === %d`, tj.Version))
	b.until("the causation tree", `document.querySelector('#tree > li[data-type="MESSAGE_RECEIVED"] + li[data-type="TASK_CREATED"]') !== null`)
	if got := eval[string](b, `document.querySelector("#task-state .state").textContent`); got != "completed" {
		t.Errorf("detail state = %q", got)
	}
	if got := eval[string](b, `document.querySelector("#task-machine").textContent`); got != "pegasus.task@1" {
		t.Errorf("detail machine = %q, want pegasus.task@1 (NAME@VERSION, as the API and the CLIs say)", got)
	}
	if got := eval[int](b, `document.querySelectorAll("#tree li[data-type]").length`); got < int(tj.Version) {
		t.Errorf("the causation tree has %d events, the task %d", got, tj.Version)
	}
	// Each event's one-line summary, as the CLIs print it.
	if got := eval[string](b, `document.querySelector('#timeline > li[data-type="TOOL_CALL_STARTED"] .esum').textContent`); !strings.Contains(got, "tool=current_time") {
		t.Errorf("the tool call's summary on the timeline: %q", got)
	}
	// The waterfall: a row and a bar for every span of the task's trace,
	// among them its model calls and its tool call.
	var trace struct {
		Spans []struct {
			SpanID string `json:"span_id"`
			Kind   string `json:"kind"`
			Name   string `json:"name"`
		} `json:"spans"`
	}
	c.do("GET", "/v1/tasks/"+id+"/trace", "").json(t, &trace)
	kinds := map[string]int{}
	for _, sp := range trace.Spans {
		kinds[sp.Kind]++
	}
	if kinds["model"] == 0 || kinds["tool"] == 0 || kinds["admission"] != 1 || kinds["task"] != 1 {
		t.Errorf("the task's trace: spans by kind %v, want a task, an admission, model and tool calls", kinds)
	}
	b.until("the waterfall", fmt.Sprintf(`document.querySelectorAll("#waterfall > li.wf-row").length === %d`, len(trace.Spans)))
	for _, k := range []string{"model", "tool", "admission"} {
		if got := eval[int](b, fmt.Sprintf(`document.querySelectorAll('#waterfall > li[data-kind=%q] .wf-bar').length`, k)); got != kinds[k] {
			t.Errorf("the waterfall draws %d %s bars, the trace has %d", got, k, kinds[k])
		}
	}
	if w := eval[float64](b, `document.querySelector('#waterfall > li[data-kind="task"] .wf-bar').getBoundingClientRect().width`); w < 50 {
		t.Errorf("the task's bar is %.0f px wide, want the whole track", w)
	}
	if got := eval[string](b, `document.querySelector('#waterfall > li[data-kind="tool"] .sr-only').textContent`); !strings.Contains(got, "current_time") {
		t.Errorf("the tool call's row says %q", got)
	}
	b.until("the state-at view", `document.getElementById("at-state-value") !== null`)
	b.shot("task")
	b.accessible("task")

	// The "state at" slider folds to an earlier event: at the task's
	// second event (TASK_CREATED) it was reasoning.
	b.do("move the slider", chromedp.Focus(chromedp.ID("at-slider")))
	eval[bool](b, `(() => { const s = document.getElementById("at-slider"); s.value = 2; s.dispatchEvent(new Event("input")); return true; })()`)
	b.until("the earlier state", `document.querySelector('#at-state-value .state').textContent === "reasoning" && document.getElementById("at-label").textContent.includes("TASK_CREATED")`)
	if got := eval[string](b, `document.querySelector("#task-state .state").textContent`); got != "completed" {
		t.Errorf("the header changed with the slider: %q", got)
	}
	b.shot("state-at")

	// Cancel the suspended task.
	b.do("open the suspended task", chromedp.Navigate(p.url+"/#/tasks/"+suspended))
	b.until("the question", `document.getElementById("task-question") !== null && document.getElementById("cancel-btn") !== null && document.getElementById("at-state-value") !== null`)
	b.shot("suspended")
	b.accessible("suspended task")
	b.do("cancel", chromedp.Click(chromedp.ID("cancel-btn")))
	b.until("armed", `document.getElementById("cancel-btn").textContent.includes("again")`)
	b.do("confirm", chromedp.Click(chromedp.ID("cancel-btn")))
	b.until("cancelled", `document.querySelector("#task-state .state").textContent === "failed"`)
	var after server.TaskJSON
	c.do("GET", "/v1/tasks/"+suspended, "").json(t, &after)
	if after.State != "failed" || !strings.HasPrefix(after.Error, "cancelled") {
		t.Errorf("after cancel: %s %q", after.State, after.Error)
	}
	b.shot("cancelled")

	// An action the state refuses shows the API's error: the task page
	// has no cancel button once finished, so call it from the page.
	if st := eval[int](b, fmt.Sprintf(`fetch("/v1/tasks/%s/cancel", {method: "POST", headers: {Authorization: "Bearer " + sessionStorage.getItem("pegasus.token")}}).then(r => r.status)`, suspended)); st != http.StatusConflict {
		t.Errorf("cancelling a failed task: %d, want 409", st)
	}

	// The task list, filtered.
	b.do("the list", chromedp.Navigate(p.url+"/#/tasks?state=completed"))
	b.until("completed tasks", `document.querySelectorAll('#tasks tbody tr[data-state="completed"]').length === 4`)
	b.shot("tasks")
	b.accessible("tasks")
	// By machine: the select offers the machines the stats count.
	b.do("the list by machine", chromedp.Navigate(p.url+"/#/tasks?machine=pegasus.task%400"))
	b.until("no task of version 0", `document.getElementById("list-status").textContent.startsWith("0 tasks") &&
		document.querySelector('#f-machine option[value="pegasus.task@1"]') !== null`)
	eval[bool](b, `(() => { const s = document.getElementById("f-machine"); s.value = "pegasus.task@1"; s.dispatchEvent(new Event("change")); return true; })()`)
	b.until("the tasks of version 1", `location.hash === "#/tasks?machine=pegasus.task%401" && document.querySelectorAll('#tasks tbody tr[data-id]').length === 5`)

	// A Dispatch task on the overview (its type and source are counted
	// too), which a worker fails into the dead-letter queue.
	mustStatus(t, c.as("w1", "PUT", "/api/v1/agents/w1", `{"capabilities":["gpu"],"max_tasks":1}`), http.StatusOK)
	job := dtask(t, c.as("client", "POST", "/api/v1/tasks", `{"title":"render","required_capabilities":["gpu"],"max_retries":0}`))
	for len(c.poll("w1")) == 0 {
	}
	mustStatus(t, c.as("w1", "POST", "/api/v1/tasks/"+job.TaskID+"/fail", `{"error":"out of memory","retry_eligible":false}`), http.StatusOK)
	b.do("the overview again", chromedp.Navigate(p.url+"/#/"))
	b.until("the dispatch task counted", `document.querySelector('#by-machine [data-key^="dispatch.task"]') !== null`)
	b.accessible("overview with a dispatch task")

	// The broker's page (its admin routes are open: the daemon listens
	// on loopback without an admin token).
	b.do("the broker", chromedp.Navigate(p.url+"/#/broker"))
	b.until("the worker and the dead letter", fmt.Sprintf(`document.querySelector('#workers tr[data-id="w1"]') !== null && document.querySelector('#dlq tr[data-id=%q]') !== null`, job.TaskID))
	b.shot("broker")
	b.accessible("broker")

	// The tools page, from the navigation: what /v1/tools, /v1/models and
	// /v1/task-types answer (TestDashboardToolsInBrowser shows each kind).
	var tools struct{ Tools []struct{ Name string } }
	var models struct{ Models []struct{ Name string } }
	var types struct {
		TaskTypes []struct{ Name string } `json:"task_types"`
	}
	c.do("GET", "/v1/tools", "").json(t, &tools)
	c.do("GET", "/v1/models", "").json(t, &models)
	c.do("GET", "/v1/task-types", "").json(t, &types)
	b.do("the tools page", chromedp.Click(chromedp.CSS(`nav a[data-nav="tools"]`)))
	b.until("the tools", `location.hash === "#/tools" && document.getElementById("tools-status") !== null && document.getElementById("tools-status").textContent !== ""`)
	for what, n := range map[string]int{"#tools tr[data-tool]": len(tools.Tools), "#models tr[data-model]": len(models.Models),
		"#task-types tr[data-type]": len(types.TaskTypes)} {
		if got := eval[int](b, fmt.Sprintf(`document.querySelectorAll(%q).length`, what)); got != n {
			t.Errorf("the tools page shows %d %s, the API %d", got, what, n)
		}
	}
	if got := eval[string](b, `document.querySelector('nav a[aria-current="page"]').dataset.nav`); got != "tools" {
		t.Errorf("the navigation marks %q, want tools", got)
	}
	b.shot("tools")
	b.accessible("tools")

	// A phone's width.
	b.do("narrow", chromedp.EmulateViewport(390, 844), chromedp.Navigate(p.url+"/#/"))
	b.until("the narrow overview", `document.querySelector('#counts [data-count="failed"]') !== null && document.querySelector('#counts [data-count="failed"]').textContent === "1"`)
	b.shot("phone")
}

// TestTasksQueueOrderInBrowser: the Tasks page in queue order shows, page
// after page, the server's queue order over both machines (pegasus.task
// lower priority value first, dispatch.task higher first, then oldest):
// the order projection.QueueCompare gives the whole list, not a page
// sorted in the browser.
func TestTasksQueueOrderInBrowser(t *testing.T) {
	exe := findChromium(t)
	bin := buildDaemon(t)
	p := startProc(t, bin, filepath.Join(t.TempDir(), "data"), "--no-reflection")
	defer p.stop(t)
	c := &testDaemon{t: t, url: p.url}
	for _, prio := range []int{2, 0, -3, 0, 1} {
		var created server.CreatedJSON
		r := c.do("POST", "/v1/tasks", fmt.Sprintf(`{"input":"hello","priority":%d}`, prio))
		mustStatus(t, r, http.StatusCreated)
		r.json(t, &created)
		c.waitTask(created.TaskID)
	}
	for _, prio := range []int{5, 0, 10, 3} {
		mustStatus(t, c.as("client", "POST", "/api/v1/tasks", fmt.Sprintf(`{"title":"job","priority":%d}`, prio)), http.StatusCreated)
	}

	// The whole list, sorted here by the documented rule.
	var all struct{ Tasks []projection.Summary }
	c.do("GET", "/v1/tasks?order=asc&limit=1000", "").json(t, &all)
	if len(all.Tasks) != 9 {
		t.Fatalf("%d tasks, want 9", len(all.Tasks))
	}
	slices.SortFunc(all.Tasks, func(a, b projection.Summary) int { return projection.QueueCompare(&a, &b) })
	var want []string
	for _, s := range all.Tasks {
		want = append(want, s.ID)
	}
	if first := all.Tasks[0]; first.Priority != 10 || !strings.HasPrefix(first.Machine, "dispatch.task") {
		t.Fatalf("the most urgent task is %s priority %d, want the dispatch task of priority 10", first.Machine, first.Priority)
	}

	b := newBrowser(t, exe)
	b.do("the list in queue order", chromedp.Navigate(p.url+"/#/tasks?order=queue&limit=4"))
	var got []string
	for page := 1; ; page++ {
		b.until(fmt.Sprintf("page %d", page), fmt.Sprintf(`document.getElementById("page-no") !== null &&
			document.getElementById("page-no").textContent === "page %d" && document.querySelector("#tasks tbody tr[data-id]") !== null`, page))
		ids := eval[string](b, `[...document.querySelectorAll("#tasks tbody tr[data-id]")].map(r => r.dataset.id).join(",")`)
		got = append(got, strings.Split(ids, ",")...)
		if page == 2 {
			b.shot("tasks-queue-order")
		}
		if eval[bool](b, `document.getElementById("next-page").disabled`) {
			if page != 3 {
				t.Errorf("%d pages of 4 for 9 tasks", page)
			}
			break
		}
		b.do("next page", chromedp.Click(chromedp.ID("next-page")))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the Tasks page in queue order:\n got %v\nwant %v", got, want)
	}
}
