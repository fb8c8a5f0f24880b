package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// axeTags are the rules the dashboard keeps: WCAG 2.1 A and AA, and axe's
// best practices.
var axeTags = []string{"wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"}

// axeSource returns axe-core's axe.min.js, installed at its pinned version
// by `npm ci` in server/testdata/npm, or "" with the reason it is missing.
// In CI (CI=true: .ci/run runs npm ci) a missing axe-core fails the test.
func axeSource(t *testing.T) (string, string) {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", "server", "testdata", "npm", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(path)
	switch {
	case err == nil:
		return string(src), ""
	case os.Getenv("CI") == "true":
		t.Fatalf("axe-core is not installed (%v): run `npm ci` in server/testdata/npm", err)
	}
	return "", "axe-core is not installed: run `npm ci` in server/testdata/npm; CI runs this check"
}

// axeViolation is one rule a page breaks, as axe.run reports it.
type axeViolation struct {
	ID    string `json:"id"`
	Help  string `json:"help"`
	Nodes []struct {
		Target  []any  `json:"target"`
		Summary string `json:"failureSummary"`
	} `json:"nodes"`
}

// accessible runs axe-core on the page the browser shows now and fails
// the test on any violation of axeTags; page names the page in the
// report. The script is injected through the DevTools protocol (the
// dashboard's Content-Security-Policy admits no script but its own), once
// per document. Without axe-core (outside CI) the check is a skipped
// subtest.
func (b *browser) accessible(page string) {
	b.t.Helper()
	b.t.Run("axe "+page, func(t *testing.T) {
		parent := b.t
		b.t = t
		defer func() { b.t = parent }()
		if b.axe == "" {
			src, why := axeSource(t)
			if src == "" {
				t.Skip(why)
			}
			b.axe = src
		}
		if !eval[bool](b, `typeof window.axe === "object"`) {
			eval[bool](b, b.axe+"\n;true")
		}
		tags, err := json.Marshal(axeTags)
		if err != nil {
			t.Fatal(err)
		}
		out := eval[string](b, fmt.Sprintf(`axe.run(document, {runOnly: {type: "tag", values: %s}, resultTypes: ["violations"]})
			.then(r => JSON.stringify(r.violations))`, tags))
		var vs []axeViolation
		if err := json.Unmarshal([]byte(out), &vs); err != nil {
			t.Fatalf("axe's answer: %v: %s", err, out)
		}
		for _, v := range vs {
			var where []string
			for _, n := range v.Nodes {
				where = append(where, fmt.Sprintf("%v: %s", n.Target, strings.ReplaceAll(n.Summary, "\n", " ")))
			}
			t.Errorf("%s: %s (%s):\n\t%s", page, v.ID, v.Help, strings.Join(where, "\n\t"))
		}
		if len(vs) > 0 {
			b.shot("axe-" + page)
		}
	})
}
