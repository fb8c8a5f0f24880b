package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files and the recorded histories under testdata/")

func TestMain(m *testing.M) {
	// The CLI reads PEGASUS_* variables; the developer's own must not leak
	// into the tests.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "PEGASUS_") || k == "NO_COLOR" {
			os.Unsetenv(k)
		}
	}
	code := m.Run()
	if fixtureRoot != "" {
		os.RemoveAll(fixtureRoot)
	}
	os.Exit(code)
}

// result is one run of the CLI.
type result struct {
	stdout, stderr string
	code           int
}

// term pretends stdout is a terminal of the given width (0: not a terminal).
type termOpts struct {
	tty   bool
	width int
	env   map[string]string
	stdin string
}

// runCLI runs the CLI in-process with the golden clock.
func runCLI(t testing.TB, o termOpts, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	std := &stdio{
		in: strings.NewReader(o.stdin), out: &out, err: &errb,
		getenv: func(k string) string { return o.env[k] },
		outTTY: o.tty, now: func() time.Time { return goldenNow },
		width: func() int { return o.width },
	}
	code := run(context.Background(), std, append([]string{"pegasus-replay"}, args...))
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// fixtures are the recorded histories imported once per test binary into
// data directories (through the CLI's own import).
var (
	fixtureOnce sync.Once
	fixtureRoot string
	fixtureErr  error
	fixtureIDs  historyTasks
)

type fixture struct {
	history, corrupt string // data directories
	ids              historyTasks
	broker           string // the task of broker.ndjson
}

func loadFixtures(t testing.TB) fixture {
	t.Helper()
	fixtureOnce.Do(func() {
		_, fixtureIDs = genHistory(t)
		fixtureRoot, fixtureErr = os.MkdirTemp("", "pegasus-replay-test")
		if fixtureErr != nil {
			return
		}
		for _, name := range []string{"history", "corrupt"} {
			r := runCLI(t, termOpts{}, "--file", filepath.Join("testdata", name+".ndjson"), "import", filepath.Join(fixtureRoot, name))
			if r.code != 0 {
				fixtureErr = fmt.Errorf("import %s: exit %d: %s", name, r.code, r.stderr)
				return
			}
		}
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	_, broker := genBroker(t)
	return fixture{history: filepath.Join(fixtureRoot, "history"), corrupt: filepath.Join(fixtureRoot, "corrupt"), ids: fixtureIDs, broker: broker}
}

// expand replaces {D} {C} {S} {R} {F} {T} {B} in args.
func (f fixture) expand(args []string) []string {
	r := strings.NewReplacer("{D}", f.history, "{C}", f.corrupt, "{S}", f.ids.success, "{R}", f.ids.resumed,
		"{F}", f.ids.failed, "{T}", f.ids.toolFailed, "{B}", f.broker)
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = r.Replace(a)
	}
	return out
}

// masks hide what legitimately changes between runs: temporary paths and
// measured durations.
var masks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`[0-9.]+(ns|µs|ms|s|m[0-9.]*s?) \([0-9,]+ events/s\)`), "<duration> (<rate> events/s)"},
	{regexp.MustCompile(`"duration_ns": [0-9]+`), `"duration_ns": 0`},
	{regexp.MustCompile(`"events_per_second": [0-9.e+]+`), `"events_per_second": 0`},
}

func (f fixture) normalise(s string) string {
	s = strings.ReplaceAll(s, f.history, "$DATA")
	s = strings.ReplaceAll(s, f.corrupt, "$CORRUPT")
	for _, m := range masks {
		s = m.re.ReplaceAllString(s, m.with)
	}
	return s
}

// golden compares (or with -update writes) testdata/golden/name.txt.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		writeFile(t, path, []byte(got))
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// transcript renders a run the way the golden files hold it.
func transcript(args []string, r result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ pegasus-replay %s\n", strings.Join(args, " "))
	fmt.Fprintf(&b, "exit %d\n", r.code)
	if r.stdout != "" {
		fmt.Fprintf(&b, "--- stdout\n%s", r.stdout)
		if !strings.HasSuffix(r.stdout, "\n") {
			b.WriteString("\n")
		}
	}
	if r.stderr != "" {
		fmt.Fprintf(&b, "--- stderr\n%s", r.stderr)
	}
	return b.String()
}

// goldenCases are the outputs users and scripts rely on: every command,
// human and JSON, over the recorded histories.
var goldenCases = []struct {
	name string
	args []string
	code int
}{
	{"tasks", []string{"-d", "{D}", "tasks"}, 0},
	{"tasks.json", []string{"-d", "{D}", "tasks", "--json"}, 0},
	{"tasks-filtered", []string{"-d", "{D}", "tasks", "--state", "failed,suspended", "--type", "plan"}, 0},
	{"tasks-since", []string{"-d", "{D}", "tasks", "--since", "2025-03-14T14:00:30Z", "--desc"}, 0},
	{"tasks-page", []string{"-d", "{D}", "tasks", "--limit", "2"}, 0},
	{"tasks-queue", []string{"-d", "{D}", "tasks", "--queue", "--limit", "4"}, 0},
	{"tasks-machine", []string{"-d", "{D}", "tasks", "--machine", "pegasus.task@1", "--type", "plan"}, 0},
	{"tasks-machine-other", []string{"-d", "{D}", "tasks", "--machine", "pegasus.task@0"}, 0},
	{"show-success", []string{"-d", "{D}", "show", "{S}"}, 0},
	{"show-resumed", []string{"-d", "{D}", "show", "{R}"}, 0},
	{"show-failed", []string{"-d", "{D}", "show", "{F}"}, 0},
	{"show-failed.json", []string{"-d", "{D}", "show", "{F}", "--json"}, 0},
	{"show-at", []string{"-d", "{D}", "show", "{R}", "--at", "21"}, 0},
	{"state-suspended", []string{"-d", "{D}", "state", "{R}", "--at", "19"}, 0},
	{"state-at-time", []string{"-d", "{D}", "state", "{R}", "--at", "2025-03-14T14:15:00Z"}, 0},
	{"state-failed.json", []string{"-d", "{D}", "state", "{F}", "--json"}, 0},
	{"why-success", []string{"-d", "{D}", "why", "{S}"}, 0},
	{"why-resumed.json", []string{"-d", "{D}", "why", "{R}", "--json"}, 0},
	{"why-broker", []string{"-f", "testdata/broker.ndjson", "why", "{B}"}, 0},
	{"why-broker.json", []string{"-f", "testdata/broker.ndjson", "why", "{B}", "--json"}, 0},
	{"show-broker", []string{"-f", "testdata/broker.ndjson", "show", "{B}"}, 0},
	{"trace", []string{"-d", "{D}", "trace", "{T}"}, 0},
	{"verify-ok", []string{"-d", "{D}", "verify"}, 0},
	{"verify-corrupt", []string{"-d", "{C}", "verify"}, 1},
	{"verify-corrupt.json", []string{"-d", "{C}", "verify", "--json"}, 1},
	{"verify-file", []string{"-f", "testdata/corrupt.ndjson", "verify"}, 1},
	{"fork-inject", []string{"-d", "{D}", "fork", "{F}", "--at", "38", "--inject", "testdata/inject-respond.ndjson"}, 0},
	{"fork-inject.json", []string{"-d", "{D}", "fork", "{F}", "--at", "38", "--inject", "testdata/inject-respond.ndjson", "--json"}, 0},
	{"fork-plain", []string{"-d", "{D}", "fork", "{R}", "--at", "24"}, 0},
	{"stats", []string{"-d", "{D}", "stats"}, 0},
	{"stats.json", []string{"-d", "{D}", "stats", "--json"}, 0},
	{"export-task", []string{"-d", "{D}", "export", "--task", "{F}"}, 0},
	{"diff-machines", []string{"-d", "{D}", "diff-machines", "--from", "pegasus.task@0", "--to", "pegasus.task@1"}, 0},
	{"diff-machines-same.json", []string{"-d", "{D}", "diff-machines", "--from", "pegasus.task@1", "--to", "pegasus.task@1", "{S}", "--json"}, 0},
	{"completion-bash", []string{"completion", "bash"}, 0},
	{"help", []string{"--help"}, 0},

	// Errors and their exit codes.
	{"err-no-source", []string{"tasks"}, exitUsage},
	{"err-two-sources", []string{"-d", "{D}", "-f", "testdata/history.ndjson", "tasks"}, exitUsage},
	{"err-unknown-command", []string{"-d", "{D}", "shwo", "{S}"}, exitUsage},
	{"err-bad-flag", []string{"-d", "{D}", "tasks", "--colour"}, exitUsage},
	{"err-bad-at", []string{"-d", "{D}", "state", "{S}", "--at", "yesterday"}, exitUsage},
	{"err-fork-no-at", []string{"-d", "{D}", "fork", "{S}"}, exitUsage},
	{"err-missing-arg", []string{"-d", "{D}", "show"}, exitUsage},
	{"err-unknown-task", []string{"-d", "{D}", "show", "01JPAF8WNT0000000001FET0ZZ"}, exitNotFound},
	{"err-not-yet", []string{"-d", "{D}", "state", "{F}", "--at", "5"}, exitNotFound},
	{"err-unknown-event", []string{"-d", "{D}", "trace", "01JPAF8WNT0000000001FET0ZZ"}, exitNotFound},
	{"err-unknown-bound", []string{"-d", "{D}", "state", "{S}", "--at", "01JPAF8WNT0000000001FET0ZZ"}, exitNotFound},
	{"err-not-a-log", []string{"-d", "testdata", "tasks"}, exitSource},
	{"err-no-dir", []string{"-d", "testdata/nonexistent", "tasks"}, exitSource},
	{"err-not-an-export", []string{"-f", "testdata/inject-respond.ndjson", "tasks"}, exitSource},
	{"err-unknown-machine", []string{"-d", "{D}", "diff-machines", "--from", "pegasus.task@7", "--to", "pegasus.task@1"}, exitUsage},
}

func TestGolden(t *testing.T) {
	f := loadFixtures(t)
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, termOpts{}, f.expand(c.args)...)
			if r.code != c.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, c.code, r.stdout, r.stderr)
			}
			golden(t, c.name, f.normalise(transcript(c.args, r)))
		})
	}
}
