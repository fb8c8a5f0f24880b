package dashboard

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// TestEventSummary runs the page's eventSummary in Node.js over the
// cases of testdata/tool-summaries.json, which pegasus-replay's
// TestToolCallSummary runs too: the task page and show write a tool
// call's source, broker task, MCP handle and result parts alike. Without
// node it is skipped, except in CI (CI=true), where it fails.
func TestEventSummary(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no node on the PATH")
		}
		t.Skip("no node on the PATH; CI runs this test")
	}
	src, err := assets.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?s)\nfunction eventSummary\(e\) \{.*?\n\}\n`).Find(src)
	if fn == nil {
		t.Fatal("app.js has no function eventSummary")
	}
	in, err := os.ReadFile("testdata/tool-summaries.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct{ Name, Want string }
	if err := json.Unmarshal(in, &cases); err != nil {
		t.Fatal(err)
	}
	script := string(fn) + `
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
console.log(JSON.stringify(cases.map(c => eventSummary(c))));`
	cmd := exec.Command(node, "-e", script)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(cases) {
		t.Fatalf("node printed %s (%v)", out, err)
	}
	for i, c := range cases {
		if got[i] != c.Want {
			t.Errorf("%s: %q, want %q", c.Name, got[i], c.Want)
		}
	}
}
