package main

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDashboardShowsLiveText: the task page shows the model's text as it
// streams, says when an attempt failed and the model starts over, and
// hides the live text once the answer is in the log.
func TestDashboardShowsLiveText(t *testing.T) {
	exe := findChromium(t)
	m := &streamingModel{gate: make(chan struct{}), replies: [][]string{{"Hel", "lo", "!"}, {"Hel", "lo", " there"}}}
	fake := httptest.NewServer(m)
	defer fake.Close()
	defer close(m.gate)
	bin := buildDaemon(t)
	p := startProc(t, bin, filepath.Join(t.TempDir(), "data"), "--no-reflection",
		"--llm-base-url", fake.URL+"/v1", "--llm-model", "fake-s", "--llm-max-attempts", "2")
	defer p.stop(t)
	c := &testDaemon{t: t, url: p.url}
	id := c.submit("hi")

	b := newBrowser(t, exe)
	b.do("open the task", chromedp.Navigate(p.url+"/#/tasks/"+id))
	b.until("the page", `document.getElementById("live-card") !== null && document.getElementById("live").classList.contains("on")`)
	gate := func() { m.release(t) }
	gate()
	b.until("the first piece", `!document.getElementById("live-card").hidden && document.getElementById("live-text").textContent === "Hel"`)
	gate()
	b.until("the second piece", `document.getElementById("live-text").textContent === "Hello"`)
	gate() // the connection drops
	b.until("the restart", `document.getElementById("live-note").textContent.includes("attempt 2 starts over") && document.getElementById("live-text").textContent === ""`)
	gate()
	gate()
	b.until("the new attempt", `document.getElementById("live-text").textContent === "Hello"`)
	b.shot("task-live")
	b.accessible("task with live text")
	gate()
	b.until("the answer in the log", fmt.Sprintf(`document.getElementById("live-card").hidden && document.getElementById("task-result") !== null && document.getElementById("task-result").textContent === %q`, "Hello there"))
}
