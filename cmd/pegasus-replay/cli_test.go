package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// TestSourcesAgree runs the same commands against the data directory (with
// the projections import persisted) and against the NDJSON export it came
// from (folded from zero in memory): the CLI only asks replay, so the
// answers must be identical.
func TestSourcesAgree(t *testing.T) {
	f := loadFixtures(t)
	for _, args := range [][]string{
		{"tasks", "--json"},
		{"stats", "--json"},
		{"show", "{R}", "--json"},
		{"state", "{F}", "--at", "36", "--json"},
		{"why", "{S}", "--json"},
		{"trace", "{T}", "--json"},
		{"fork", "{F}", "--at", "38", "--inject", "testdata/inject-respond.ndjson", "--json"},
	} {
		t.Run(args[0], func(t *testing.T) {
			dir := runCLI(t, termOpts{}, f.expand(append([]string{"-d", "{D}"}, args...))...)
			file := runCLI(t, termOpts{}, f.expand(append([]string{"-f", "testdata/history.ndjson"}, args...))...)
			if dir.code != 0 || file.code != 0 {
				t.Fatalf("exit codes %d and %d: %s %s", dir.code, file.code, dir.stderr, file.stderr)
			}
			if dir.stdout != file.stdout {
				t.Errorf("--data-dir and --file disagree on %v:\n%s\n---\n%s", args, dir.stdout, file.stdout)
			}
		})
	}
}

// TestFlagsAnywhere: global flags work before or after the command, and
// command flags before or after the arguments.
func TestFlagsAnywhere(t *testing.T) {
	f := loadFixtures(t)
	want := runCLI(t, termOpts{}, f.expand([]string{"--json", "-d", "{D}", "show", "--at", "20", "{R}"})...)
	if want.code != 0 || !strings.HasPrefix(want.stdout, "{") {
		t.Fatalf("baseline: exit %d, %q", want.code, want.stderr)
	}
	for _, args := range [][]string{
		{"show", "{R}", "--json", "-d", "{D}", "--at", "20"},
		{"-d", "{D}", "show", "{R}", "--at=20", "--json"},
		{"--json", "show", "-d", "{D}", "{R}", "--at", "20"},
	} {
		got := runCLI(t, termOpts{}, f.expand(args)...)
		if got.code != 0 || got.stdout != want.stdout {
			t.Errorf("%v: exit %d, stderr %q, output differs: %v", args, got.code, got.stderr, got.stdout != want.stdout)
		}
	}
	// After "--" everything is an argument.
	if r := runCLI(t, termOpts{}, f.expand([]string{"-d", "{D}", "show", "--", "--json"})...); r.code != exitNotFound {
		t.Errorf(`show -- --json: exit %d, want %d (task "--json" unknown)`, r.code, exitNotFound)
	}
}

// TestEnvironment: every flag has a PEGASUS_* variable; a flag on the
// command line wins over it.
func TestEnvironment(t *testing.T) {
	f := loadFixtures(t)
	t.Setenv("PEGASUS_DATA_DIR", f.history)
	t.Setenv("PEGASUS_JSON", "true")
	t.Setenv("PEGASUS_TASKS_STATE", "failed")
	r := runCLI(t, termOpts{}, "tasks")
	var page replay.Page
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if len(page.Tasks) != 1 || page.Tasks[0].ID != f.ids.failed {
		t.Errorf("PEGASUS_TASKS_STATE=failed listed %+v", page.Tasks)
	}
	r = runCLI(t, termOpts{}, "tasks", "--state", "completed")
	if json.Unmarshal([]byte(r.stdout), &page) != nil || len(page.Tasks) != 2 {
		t.Errorf("--state completed over PEGASUS_TASKS_STATE=failed: %s", r.stdout)
	}
	t.Setenv("PEGASUS_DATA_DIR", filepath.Join(t.TempDir(), "missing"))
	if r := runCLI(t, termOpts{}, "-d", f.history, "tasks"); r.code != 0 {
		t.Errorf("-d should win over PEGASUS_DATA_DIR: exit %d %s", r.code, r.stderr)
	}
	// A source flag of another kind wins too (the walkthrough of
	// docs/replay.md: -f after export PEGASUS_DATA_DIR=...).
	if r := runCLI(t, termOpts{}, "-f", "testdata/history.ndjson", "verify"); r.code != 0 {
		t.Errorf("-f should win over PEGASUS_DATA_DIR: exit %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, termOpts{}, "verify", "--file", "testdata/history.ndjson"); r.code != 0 {
		t.Errorf("--file after the command should win over PEGASUS_DATA_DIR: exit %d %s", r.code, r.stderr)
	}
	// Two variables and no flag: which one is meant is unclear.
	t.Setenv("PEGASUS_FILE", "testdata/history.ndjson")
	if r := runCLI(t, termOpts{}, "verify"); r.code != exitUsage || !strings.Contains(r.stderr, "give only one of PEGASUS_DATA_DIR, PEGASUS_FILE") {
		t.Errorf("two source variables: exit %d %s", r.code, r.stderr)
	}
	t.Setenv("PEGASUS_FILE", "")

	// Every flag of every command has its variable.
	app := newApp(&stdio{})
	check := func(where string, fl []string, envs []string) {
		if len(envs) == 0 || !strings.HasPrefix(envs[0], "PEGASUS_") {
			t.Errorf("%s flag %v has no PEGASUS_* variable", where, fl)
		}
	}
	for _, fl := range app.Flags {
		check("global", fl.Names(), envVars(fl))
	}
	for _, cmd := range app.Commands {
		for _, fl := range cmd.Flags {
			if v, ok := fl.(cli.VisibleFlag); ok && !v.IsVisible() {
				continue // the hidden copies of the global flags
			}
			check(cmd.Name, fl.Names(), envVars(fl))
		}
	}
}

func envVars(f any) []string {
	type withEnv interface{ GetEnvVars() []string }
	if e, ok := f.(withEnv); ok {
		return e.GetEnvVars()
	}
	return nil
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// TestColour: colour only on a terminal, never with NO_COLOR, --no-color,
// TERM=dumb or --json, and colour never breaks the column alignment.
func TestColour(t *testing.T) {
	f := loadFixtures(t)
	for _, args := range [][]string{{"show", "{F}"}, {"tasks"}, {"stats"}, {"verify"}} {
		args = f.expand(append([]string{"-d", "{D}"}, args...))
		plain := runCLI(t, termOpts{}, args...)
		coloured := runCLI(t, termOpts{tty: true}, args...)
		if !ansi.MatchString(coloured.stdout) {
			t.Errorf("%v on a terminal: no colour", args)
		}
		if got := f.normalise(ansi.ReplaceAllString(coloured.stdout, "")); got != f.normalise(plain.stdout) {
			t.Errorf("%v: colour changes the text or its alignment:\n%s\n---\n%s", args, got, plain.stdout)
		}
		if ansi.MatchString(plain.stdout) {
			t.Errorf("%v to a pipe: coloured", args)
		}
		for _, o := range []termOpts{
			{tty: true, env: map[string]string{"NO_COLOR": "1"}},
			{tty: true, env: map[string]string{"TERM": "dumb"}},
		} {
			if r := runCLI(t, o, args...); ansi.MatchString(r.stdout) {
				t.Errorf("%v with %v: coloured", args, o.env)
			}
		}
		if r := runCLI(t, termOpts{tty: true}, append(args, "--no-color")...); ansi.MatchString(r.stdout) {
			t.Errorf("%v --no-color: coloured", args)
		}
		if r := runCLI(t, termOpts{tty: true}, append(args, "--json")...); ansi.MatchString(r.stdout) {
			t.Errorf("%v --json: coloured", args)
		}
	}
}

// TestFitsTerminal: on a terminal, table rows are cut to its width; to a
// pipe, nothing is cut.
func TestFitsTerminal(t *testing.T) {
	f := loadFixtures(t)
	args := f.expand([]string{"-d", "{D}", "show", "{F}"})
	r := runCLI(t, termOpts{tty: true, width: 120}, args...)
	for _, line := range strings.Split(ansi.ReplaceAllString(r.stdout, ""), "\n") {
		if n := utf8.RuneCountInString(line); n > 120 {
			t.Errorf("line of %d columns on a 120-column terminal: %q", n, line)
		}
	}
	if !strings.Contains(r.stdout, "…") {
		t.Errorf("nothing was cut on a narrow terminal")
	}
	if p := runCLI(t, termOpts{}, args...); !strings.Contains(p.stdout, `error="500 Internal Server Error"`) {
		t.Errorf("output to a pipe was cut:\n%s", p.stdout)
	}
}

// TestExportImportRoundTrip: export everything, import it into a new data
// directory, and every answer is the same; a one-task bundle imports into
// a log of its own that verifies clean.
func TestExportImportRoundTrip(t *testing.T) {
	f := loadFixtures(t)
	dir := t.TempDir()
	bundle := filepath.Join(dir, "all.ndjson")
	if r := runCLI(t, termOpts{}, "-d", f.history, "export", "-o", bundle); r.code != 0 || !strings.Contains(r.stdout, "exported 43 events") {
		t.Fatalf("export: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, termOpts{}, "-d", f.history, "export", "-o", bundle); r.code != exitUsage {
		t.Errorf("export over an existing file: exit %d, want %d", r.code, exitUsage)
	}
	got, _ := os.ReadFile(bundle)
	want, _ := os.ReadFile("testdata/history.ndjson")
	if string(got) != string(want) {
		t.Errorf("export of the imported history differs from the file it was imported from")
	}
	copyDir := filepath.Join(dir, "copy")
	r := runCLI(t, termOpts{}, "--json", "-f", bundle, "import", copyDir)
	var ij importJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ij) != nil || ij.Events != 43 || ij.Renumbered != 0 {
		t.Fatalf("import: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, termOpts{}, "-f", bundle, "import", copyDir); r.code != exitUsage {
		t.Errorf("import into a non-empty directory: exit %d, want %d", r.code, exitUsage)
	}
	for _, args := range [][]string{{"tasks", "--json"}, {"stats", "--json"}, {"show", f.ids.resumed, "--json"}} {
		a := runCLI(t, termOpts{}, append([]string{"-d", f.history}, args...)...)
		b := runCLI(t, termOpts{}, append([]string{"-d", copyDir}, args...)...)
		if a.stdout != b.stdout {
			t.Errorf("%v differs after export and import", args)
		}
	}

	// One task, piped: export --task | import.
	one := runCLI(t, termOpts{}, "-d", f.history, "export", "--task", f.ids.failed)
	oneDir := filepath.Join(dir, "one")
	r = runCLI(t, termOpts{stdin: one.stdout}, "--json", "-f", "-", "import", oneDir)
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ij) != nil || ij.Events != 13 || ij.Renumbered != 13 {
		t.Fatalf("import of one task: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, termOpts{}, "-d", oneDir, "verify"); r.code != 0 {
		t.Errorf("verify of the one-task log: exit %d\n%s", r.code, r.stdout)
	}
	if r := runCLI(t, termOpts{stdin: one.stdout}, "-f", "-", "verify"); r.code != 0 {
		t.Errorf("verify of the filtered export (gaps expected): exit %d\n%s", r.code, r.stdout)
	}
	r = runCLI(t, termOpts{}, "-d", oneDir, "tasks", "--json")
	var page replay.Page
	if json.Unmarshal([]byte(r.stdout), &page) != nil || len(page.Tasks) != 1 || page.Tasks[0].ID != f.ids.failed {
		t.Errorf("one-task log lists %s", r.stdout)
	}
	if r := runCLI(t, termOpts{}, "-d", f.history, "export", "--task", "01JPAF8WNT0000000001FET0ZZ"); r.code != exitNotFound {
		t.Errorf("export of an unknown task: exit %d, want %d", r.code, exitNotFound)
	}
}

// TestReadOnly: no command that reads a data directory changes a byte of it.
func TestReadOnly(t *testing.T) {
	f := loadFixtures(t)
	dir := filepath.Join(t.TempDir(), "data")
	if r := runCLI(t, termOpts{}, "-f", "testdata/history.ndjson", "import", dir); r.code != 0 {
		t.Fatal(r.stderr)
	}
	before := hashTree(t, dir)
	for _, args := range [][]string{
		{"tasks"}, {"stats"}, {"show", f.ids.success}, {"state", f.ids.resumed, "--at", "20"},
		{"why", f.ids.failed}, {"trace", f.ids.toolFailed}, {"verify"},
		{"fork", f.ids.failed, "--at", "38", "--inject", "testdata/inject-respond.ndjson"},
		{"export", "--task", f.ids.success},
	} {
		if r := runCLI(t, termOpts{}, append([]string{"-d", dir}, args...)...); r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
	}
	if after := hashTree(t, dir); after != before {
		t.Errorf("the data directory changed:\nbefore %s\nafter  %s", before, after)
	}
}

// hashTree hashes the names, modes and contents of every file under dir.
func hashTree(t testing.TB, dir string) string {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %d\n", strings.TrimPrefix(path, dir), info.Mode(), info.Size())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestLockedDirectory: a directory a running daemon holds is refused with
// exit code 4 and the advice to use a checkpoint or --server; the
// checkpoint then works while the daemon still runs.
func TestLockedDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if r := runCLI(t, termOpts{}, "-f", "testdata/history.ndjson", "import", dir); r.code != 0 {
		t.Fatal(r.stderr)
	}
	l, err := eventlog.Open(dir, nil) // the "daemon"
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := runCLI(t, termOpts{}, "-d", dir, "tasks")
	if r.code != exitSource || !strings.Contains(r.stderr, "POST /v1/admin/checkpoint") || !strings.Contains(r.stderr, "--server") ||
		strings.Contains(r.stderr, "Log.Checkpoint") || strings.Contains(r.stderr, "eventlog:") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("locked directory: exit %d, stderr %q", r.code, r.stderr)
	}
	cp := filepath.Join(t.TempDir(), "checkpoint")
	if err := l.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, termOpts{}, "-d", cp, "verify"); r.code != 0 {
		t.Errorf("checkpoint copy: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
}

// TestExitCodes: errors from every layer map to the documented codes, only
// in main.
func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		code int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitFailed},
		{errProblems, exitFailed},
		{usagef("bad"), exitUsage},
		{fmt.Errorf("x: %w", projection.ErrTaskNotFound), exitNotFound},
		{fmt.Errorf("x: %w", eventlog.ErrNotFound), exitNotFound},
		{replay.ErrBoundNotFound, exitNotFound},
		{fmt.Errorf("open: %w", eventlog.ErrLocked), exitSource},
		{fmt.Errorf("open: %w", eventlog.ErrFormat), exitSource},
		{fmt.Errorf("read: %w", replay.ErrExportFormat), exitSource},
		{sourceErr(errors.New("connection refused")), exitSource},
		// A usage error wins over what it wraps.
		{usagef("--at: %w", replay.ErrBoundNotFound), exitUsage},
		{context.Canceled, exitFailed},
	} {
		if got := exitCode(c.err); got != c.code {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.code)
		}
	}
}

// TestInjectFormat: --inject lines may give the body decoded ("data") or
// stored ("body", as export writes it), skip the export header, and are
// checked strictly.
func TestInjectFormat(t *testing.T) {
	f := loadFixtures(t)
	// An export of a task's events injected into a fork of another point of
	// the same task is refused event by event by the machine, not by the
	// parser: the stored bodies parse.
	exp := runCLI(t, termOpts{}, "-d", f.history, "export", "--task", f.ids.failed, "--from", "39")
	r := runCLI(t, termOpts{stdin: exp.stdout}, "-d", f.history, "fork", f.ids.failed, "--at", "38", "--inject", "-", "--json")
	var fj struct {
		InjectedEvents int `json:"injected_events"`
		Task           struct {
			State string `json:"state"`
		} `json:"task"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &fj) != nil {
		t.Fatalf("exit %d %q", r.code, r.stderr)
	}
	if fj.InjectedEvents != 4 || fj.Task.State != "failed" {
		t.Errorf("re-injecting the recorded tail: %d events, state %s; want 4, failed", fj.InjectedEvents, fj.Task.State)
	}
	for _, bad := range []string{
		`{"type":"REASON_DONE","data":{"plan":{"stepz":[]}}}`, // unknown field
		`{"data":{}}`,                            // no type
		`{"type":"NO_SUCH_EVENT","data":{}}`,     // unknown type with data
		`{"type":"REASON_DONE","causation":"x"}`, // bad id
		`not json`,
	} {
		r := runCLI(t, termOpts{stdin: bad + "\n"}, "-d", f.history, "fork", f.ids.failed, "--at", "38", "--inject", "-")
		if r.code != exitUsage {
			t.Errorf("inject %s: exit %d, want %d (%s)", bad, r.code, exitUsage, r.stderr)
		}
	}
	// An injected event the machine refuses is shown as refused.
	r = runCLI(t, termOpts{stdin: `{"type":"STEP_COMPLETED","data":{"step_index":0,"result":"x"}}` + "\n"},
		"-d", f.history, "fork", f.ids.failed, "--at", "38", "--inject", "-")
	if r.code != 0 || !strings.Contains(r.stdout, "REFUSED") || !strings.Contains(r.stdout, "1 refused by the machine") {
		t.Errorf("refused injection not reported:\n%s%s", r.stdout, r.stderr)
	}
}

// TestCompletion: the shell asks the binary for candidates; TASK arguments
// complete with task ids from the configured source.
func TestCompletion(t *testing.T) {
	f := loadFixtures(t)
	r := runCLI(t, termOpts{}, "-d", f.history, "show", "--generate-bash-completion")
	for _, id := range []string{f.ids.success, f.ids.resumed, f.ids.failed} {
		if !strings.Contains(r.stdout, id) {
			t.Errorf("completion of show lacks %s:\n%s", id, r.stdout)
		}
	}
	// urfave/cli looks at os.Args to decide between flags and commands.
	defer func(a []string) { os.Args = a }(os.Args)
	os.Args = []string{"pegasus-replay", "--generate-bash-completion"}
	r = runCLI(t, termOpts{}, "--generate-bash-completion")
	for _, cmd := range []string{"tasks", "show", "why", "fork", "verify", "tail"} {
		if !strings.Contains(r.stdout, cmd+"\n") {
			t.Errorf("completion of commands lacks %s", cmd)
		}
	}
	if r := runCLI(t, termOpts{}, "completion", "zsh"); r.code != 0 || !strings.Contains(r.stdout, "compdef _pegasus_replay_complete pegasus-replay") {
		t.Errorf("zsh completion: %d %q", r.code, r.stdout)
	}
	if r := runCLI(t, termOpts{}, "completion", "fish"); r.code != exitUsage {
		t.Errorf("completion fish: exit %d, want %d", r.code, exitUsage)
	}
}
