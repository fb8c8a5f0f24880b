package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// npmTools returns the directory of the pinned npm project of the OpenAPI
// checks (server/testdata/npm: Redocly CLI, openapi-typescript, openapi-fetch and
// TypeScript at exact versions, with their lock file) once `npm ci` has
// installed it. Without node or the installed packages the test fails in
// CI (CI=true: .ci/run runs npm ci there) and is skipped elsewhere.
func npmTools(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "server", "testdata", "npm"))
	if err != nil {
		t.Fatal(err)
	}
	missing := ""
	if _, err := exec.LookPath("node"); err != nil {
		missing = "no node on the PATH (install Node.js 20 or newer)"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err != nil {
		missing = "the npm packages are not installed: run `npm ci` in server/testdata/npm"
	}
	switch {
	case missing == "":
		return dir
	case os.Getenv("CI") == "true":
		t.Fatal(missing)
	default:
		t.Skip(missing + "; CI runs this test")
	}
	return ""
}

// npmExec runs one of the npm project's programs (node_modules/.bin) in
// dir, without telemetry or update notices, and returns its standard
// output; it fails the test with both outputs if the program fails.
func npmExec(t *testing.T, dir, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "node_modules", ".bin", name), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_NOTIFICATIONS=true", "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s\n%s", name, args, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

// TestOpenAPILint lints openapi.json with Redocly CLI's recommended rules
// (the version pinned in server/testdata/npm): no error and no warning, so that
// a generator finds every operation's responses, errors included.
func TestOpenAPILint(t *testing.T) {
	dir := npmTools(t)
	doc, err := filepath.Abs(filepath.Join("..", "..", "server", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := npmExec(t, dir, "redocly", "lint", "--extends=recommended", "--format=json", doc)
	var report struct {
		Totals struct {
			Errors   int `json:"errors"`
			Warnings int `json:"warnings"`
		} `json:"totals"`
		Problems []struct {
			RuleID   string `json:"ruleId"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Location []struct {
				Pointer string `json:"pointer"`
			} `json:"location"`
		} `json:"problems"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("redocly lint --format=json: %v\n%s", err, out)
	}
	for _, p := range report.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		t.Errorf("%s %s at %s: %s", p.Severity, p.RuleID, where, p.Message)
	}
	if report.Totals.Errors != 0 || report.Totals.Warnings != 0 {
		t.Errorf("redocly lint: %d errors, %d warnings, want none", report.Totals.Errors, report.Totals.Warnings)
	}
}
