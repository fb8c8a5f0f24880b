package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cfgfile "github.com/pegasus-engine/pegasus/config"
	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/replay"
)

// docFile is a document whose examples TestDocExamples runs, and what its
// reader has in the working directory before the first one.
type docFile struct {
	path string
	// files are copied into the working directory: name -> source.
	files map[string]string
	// daemonDir is the running daemon's data directory in the working
	// directory; "pegasus-data" unless the document uses that name for
	// something else.
	daemonDir string
	// configFiles: the document's named blocks ("<!-- config-file: NAME
	// -->" before a fence) are files of the working directory, which is
	// the test's too (pegasusd's commands run in-process and read them
	// there), and the variables the document exports are the process's.
	configFiles bool
	// config, if set, is the named block the daemon starts with, as
	// --config (configFiles must be set).
	config string
	// setup, if set, adjusts the daemon's configuration before it starts
	// and returns what the examples' commands name (an address) -> what
	// to run them with instead.
	setup func(t *testing.T, cfg *config) map[string]string
}

// docExampleFiles are the documents whose examples TestDocExamples runs:
// every `$ ` line of their ```sh blocks.
var docExampleFiles = []docFile{
	{path: "../../README.md"},
	{path: "../../docs/cli.md"},
	{path: "../../docs/api.md"},
	{path: "../../docs/operations.md"},
	{path: "../../docs/export.md"},
	{path: "../../docs/metrics.md"},
	{path: "../../docs/broker.md"},
	{path: "../../docs/retention.md"},
	{path: "../../docs/config.md", configFiles: true},
	{path: "../../docs/tracing.md", setup: tracingDocSetup},
	{path: "../../docs/tools.md", configFiles: true, config: "weather.yaml"},
	{path: "../../docs/replay.md", daemonDir: "live-data", files: map[string]string{
		"bundle.ndjson":  "../pegasus-replay/testdata/history.ndjson",
		"corrupt.ndjson": "../pegasus-replay/testdata/corrupt.ndjson",
		"what-if.ndjson": "../pegasus-replay/testdata/inject-respond.ndjson",
	}},
}

// docItem is one `$ command` line of a fenced sh block and the output shown
// under it, or a directive (an HTML comment "<!-- doc-examples: ... -->"
// between blocks) that changes what the examples after it run against.
type docItem struct {
	where     string // file:line
	cmd       string
	want      []string
	directive string
}

var directiveRE = regexp.MustCompile(`^\s*<!-- doc-examples: (.*) -->\s*$`)

// readDocExamples extracts the examples of a Markdown file: in each ```sh
// block (indented or not), a line starting with "$ " is a command and the
// lines up to the next command or the end of the block are its output.
func readDocExamples(t *testing.T, file string) []docItem {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docItem
	fenced, in := false, false // in a fenced block; in an sh one
	indent := ""               // the block's indentation
	cur := -1                  // the example whose output is being read
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		where := fmt.Sprintf("%s:%d", filepath.Base(file), n)
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case strings.HasPrefix(trimmed, "```"):
			fenced = !fenced
			indent = line[:len(line)-len(trimmed)]
			in, cur = fenced && strings.TrimPrefix(trimmed, "```") == "sh", -1
		case !fenced && directiveRE.MatchString(line):
			out = append(out, docItem{where: where, directive: directiveRE.FindStringSubmatch(line)[1]})
		case !in:
		case strings.HasPrefix(line, indent+"$ "):
			out = append(out, docItem{where: where, cmd: line[len(indent)+2:]})
			cur = len(out) - 1
		case cur >= 0:
			out[cur].want = append(out[cur].want, strings.TrimPrefix(line, indent))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// Blank lines that end an output separate it from the next example.
	for i := range out {
		for n := len(out[i].want); n > 0 && strings.TrimSpace(out[i].want[n-1]) == ""; n-- {
			out[i].want = out[i].want[:n-1]
		}
	}
	return out
}

var (
	ulidRE    = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)
	shortRE   = regexp.MustCompile(`…[0-9A-HJKMNP-TV-Z]{8}\b`)
	timeRE    = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?Z?|\b\d{2}:\d{2}:\d{2}\.\d{3}\b|\b\d{8}T\d{6}(\.\d+)?Z`)
	addrRE    = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	ageRE     = regexp.MustCompile(`\s\d+[smhd]\s`)
	durRE     = regexp.MustCompile(`(^|[\s=(])\+?\d+(\.\d+)?(ns|µs|ms|s|m|h)\b`)
	rateRE    = regexp.MustCompile(`[\d,]+ events/s`)
	goVerRE   = regexp.MustCompile(`go1\.\d+(\.\d+)?\S* \S+/\S+`)
	commentRE = regexp.MustCompile(`\s{2,}#.*$`)
	shellRE   = regexp.MustCompile(`[|<>;&$*` + "`" + `]`)
)

// normalize makes a line comparable: times, durations, rates, addresses,
// ages, short ids, the Go version and runs of spaces (column widths) are
// not the documentation's business. Full ids are kept: match binds them.
func normalize(s string) string {
	s = timeRE.ReplaceAllString(s, "TIME")
	s = addrRE.ReplaceAllString(s, "ADDR")
	s = goVerRE.ReplaceAllString(s, "GOVERSION")
	s = shortRE.ReplaceAllString(s, "…SHORTID")
	s = ageRE.ReplaceAllString(" "+s+" ", " AGE ")
	s = ageRE.ReplaceAllString(s, " AGE ") // adjacent columns
	s = durRE.ReplaceAllString(s, "${1}")  // present or not: a tool call under 1 ms shows none
	s = rateRE.ReplaceAllString(s, "RATE")
	return strings.Join(strings.Fields(s), " ")
}

// splitWords splits a command line as sh would for the simple quoting the
// docs use: single and double quotes, no expansions.
func splitWords(s string) []string {
	var words []string
	var cur strings.Builder
	quote, inWord := rune(0), false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// docsGot is where TestDocExamples writes what every example printed, to
// help rewrite a document: go test ./cmd/pegasusd -run TestDocExamples
// -docs-got /tmp/got.txt.
var docsGot = flag.String("docs-got", "", "write what each documentation example printed to `FILE`")

// docBin holds the pegasus-replay binary the examples run, built once.
var docBin struct {
	once sync.Once
	dir  string
	err  error
}

// TestMain removes the binary buildReplay built, if any.
func TestMain(m *testing.M) {
	if mode := os.Getenv(e2eMCPServerEnv); mode != "" { // the MCP server of the tools' end-to-end tests
		if err := runE2EMCPServer(mode); err != nil {
			fmt.Fprintln(os.Stderr, "e2e mcp server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if docBin.dir != "" {
		os.RemoveAll(docBin.dir)
	}
	os.Exit(code)
}

// buildReplay builds pegasus-replay into a directory of its own (once per
// test binary) and returns the directory.
func buildReplay(t *testing.T) string {
	t.Helper()
	docBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "pegasus-doc-bin")
		if err != nil {
			docBin.err = err
			return
		}
		docBin.dir = dir
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "pegasus-replay"), "../pegasus-replay").CombinedOutput()
		if err != nil {
			docBin.err = fmt.Errorf("go build ../pegasus-replay: %v\n%s", err, out)
		}
	})
	if docBin.err != nil {
		t.Fatal(docBin.err)
	}
	return docBin.dir
}

// docRun is the state of one document's run: its working directory, the
// daemons its examples talk to (by the port the document names), the
// variables its examples exported, and the ids bound so far.
type docRun struct {
	t       *testing.T
	dir     string
	bin     string
	cfg     *config                // the daemon on 7070's
	daemons map[string]*testDaemon // "7070" -> daemon
	env     map[string]string
	ids     map[string]string // documented id -> real id
	replace map[string]string // docFile.setup's
}

// TestDocExamples runs every example of the documents (README.md and
// docs/) and compares its output with the documented one: `pegasusd`
// client commands in-process, everything else (curl, pegasus-replay,
// pipes) with sh in a working directory of the document's own, against a
// real daemon (the offline model) listening where the document says
// (127.0.0.1:7070 or localhost:7070). curl and jq must be installed
// (.ci/run installs them).
//
// Before the comparison, times, durations, rates, ages, addresses, short
// ids and column widths are normalised. A task id the documentation shows
// in an output is bound to the real one, and later commands use the real
// one. A documented line "..." stands for any lines; "..." inside a line
// for any text. An example shown without output must exit 0; the output
// of one that never ends (an event stream) is read until it matches.
//
// Directives between blocks, as HTML comments, change the setting:
// "<!-- doc-examples: stop the daemon -->" stops it (its data directory
// stays for the examples that read it), "<!-- doc-examples: port P runs a
// daemon with --token T -->" starts another one, and "<!-- doc-examples:
// restart the daemon with --retain-finished D --retention-interval D and
// wait for a retention run -->" restarts it, once its tasks have settled,
// with retention on, and waits until a run has archived tasks.
func TestDocExamples(t *testing.T) {
	for _, tool := range []string{"sh", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the documentation's examples need %s: install it (.ci/run does)", tool)
		}
	}
	bin := buildReplay(t)
	n := 0
	for _, df := range docExampleFiles {
		t.Run(filepath.Base(df.path), func(t *testing.T) {
			n += runDocFile(t, df, bin)
		})
	}
	if n == 0 {
		t.Fatal("no examples found")
	}
	t.Logf("%d examples run", n)
}

// runDocFile runs one document's examples from a fresh daemon and working
// directory, as its reader would, and returns how many it ran.
func runDocFile(t *testing.T, df docFile, bin string) int {
	dir := t.TempDir()
	abs, err := filepath.Abs(df.path) // the working directory may change (configFiles)
	if err != nil {
		t.Fatal(err)
	}
	df.path = abs
	for name, src := range df.files {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// bin/ holds the binaries, as after the README's build step.
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(bin, "pegasus-replay"), filepath.Join(dir, "bin", "pegasus-replay")); err != nil {
		t.Fatal(err)
	}
	daemonDir := df.daemonDir
	if daemonDir == "" {
		daemonDir = "pegasus-data"
	}
	cfg := testConfig(t)
	if df.configFiles {
		docConfigFiles(t, df, dir, cfg)
	}
	cfg.engine.DataDir = filepath.Join(dir, daemonDir)
	cfg.server.CheckpointDir = cfg.engine.DataDir + "-checkpoints"
	var replace map[string]string
	if df.setup != nil {
		replace = df.setup(t, cfg)
	}
	r := &docRun{t: t, dir: dir, bin: bin, cfg: cfg, daemons: map[string]*testDaemon{"7070": startDaemon(t, cfg)},
		env: map[string]string{}, ids: map[string]string{}, replace: replace}
	t.Setenv("PEGASUS_SERVER", r.daemons["7070"].url)
	n := 0
	for _, it := range readDocExamples(t, df.path) {
		if it.directive != "" {
			r.direct(it)
			continue
		}
		n++
		r.run(it)
	}
	return n
}

var (
	tokenDirectiveRE     = regexp.MustCompile(`^port (\d+) runs a daemon with --token (\S+)$`)
	retentionDirectiveRE = regexp.MustCompile(`^restart the daemon with (.+) and wait for a retention run$`)
)

// direct applies a directive.
func (r *docRun) direct(it docItem) {
	t := r.t
	m := tokenDirectiveRE.FindStringSubmatch(it.directive)
	rm := retentionDirectiveRE.FindStringSubmatch(it.directive)
	switch {
	case it.directive == "stop the daemon":
		r.daemons["7070"].stop()
		delete(r.daemons, "7070")
	case m != nil:
		cfg := testConfig(t)
		cfg.server.Token = m[2]
		r.daemons[m[1]] = startDaemon(t, cfg)
	case rm != nil:
		r.restartRetaining(it, rm[1])
	default:
		t.Fatalf("%s: unknown directive %q", it.where, it.directive)
	}
}

// restartRetaining restarts the daemon on 7070, once its tasks have
// settled, with the retention flags given, and waits (up to testTimeout)
// for the EVENTS_ARCHIVED event of a run that archived tasks.
func (r *docRun) restartRetaining(it docItem, flags string) {
	t := r.t
	fs := flag.NewFlagSet("retention", flag.ContinueOnError)
	window := fs.Duration("retain-finished", 0, "")
	interval := fs.Duration("retention-interval", time.Hour, "")
	if err := fs.Parse(strings.Fields(flags)); err != nil || fs.NArg() > 0 || *window <= 0 {
		t.Fatalf("%s: retention flags %q: want --retain-finished D [--retention-interval D] (%v)", it.where, flags, err)
	}
	td := r.daemons["7070"]
	settle(t, td)
	td.stop()
	r.cfg.engine.Retention = engine.RetentionOptions{Window: *window, Interval: *interval, ArchiveDir: filepath.Join(r.cfg.engine.DataDir, "archive")}
	td = startDaemon(t, r.cfg)
	r.daemons["7070"] = td
	t.Setenv("PEGASUS_SERVER", td.url)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sub := td.d.engine.Log().Subscribe(ctx, 1)
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("%s: no retention run archived tasks: %v", it.where, err)
		}
		if ev.Type == eventlog.TypeEventsArchived {
			return
		}
	}
}

// run runs one example and compares its output.
func (r *docRun) run(ex docItem) {
	t := r.t
	cmd := commentRE.ReplaceAllString(ex.cmd, "")
	for port, td := range r.daemons {
		addr := strings.TrimPrefix(td.url, "http://")
		cmd = strings.ReplaceAll(cmd, "127.0.0.1:"+port, addr)
		cmd = strings.ReplaceAll(cmd, "localhost:"+port, addr)
	}
	for from, to := range r.replace {
		cmd = strings.ReplaceAll(cmd, from, to)
	}
	cmd = ulidRE.ReplaceAllStringFunc(cmd, func(id string) string {
		if real, ok := r.ids[id]; ok {
			return real
		}
		return id // a recorded id (replay.md's bundle), or one not bound yet
	})
	for _, td := range r.daemons {
		if td.d != nil {
			settle(t, td)
		}
	}
	words := splitWords(cmd)
	var got []string
	var code int
	switch {
	case len(words) == 2 && words[0] == "export" && strings.Contains(words[1], "="):
		k, v, _ := strings.Cut(words[1], "=")
		r.env[k] = v
		return
	case len(words) > 0 && strings.TrimPrefix(words[0], "bin/") == "pegasusd" && !shellRE.MatchString(cmd):
		var out bytes.Buffer
		c := &client{stdin: strings.NewReader(""), stdout: &out, stderr: &out, interactive: new(bool)}
		app := newApp(c)
		words[0] = "pegasusd"
		code = exitCode(app.Run(cliconv.Interspersed(app, words)), &out)
		got = strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	default:
		got, code = r.shell(ex, cmd)
	}
	if *docsGot != "" {
		f, err := os.OpenFile(*docsGot, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "%s: exit %d\n$ %s\n%s\n\n", ex.where, code, ex.cmd, strings.Join(got, "\n"))
		f.Close()
	}
	if len(ex.want) == 0 && code != 0 {
		t.Errorf("%s: $ %s: exit %d (an example without output must succeed)\n%s", ex.where, ex.cmd, code, strings.Join(got, "\n"))
	} else if len(ex.want) > 0 && !matchDoc(ex.want, got, r.ids) {
		t.Errorf("%s: $ %s\n--- documented\n%s\n--- got\n%s", ex.where, ex.cmd, strings.Join(ex.want, "\n"), strings.Join(got, "\n"))
	}
}

// endlessRE matches the commands that do not end by themselves: event
// streams.
var endlessRE = regexp.MustCompile(`curl .*-N|tail\b[^|]*$`)

// shell runs cmd with sh in the working directory, with the binaries on
// the PATH and stdout and stderr merged in order. A command that never
// ends is stopped as soon as its output matches the documented one.
func (r *docRun) shell(ex docItem, cmd string) ([]string, int) {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Dir = r.dir
	// sh and what it starts are one process group, stopped together (a
	// curl left behind would hold the output open).
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	c.Env = []string{"PATH=" + r.bin + ":" + os.Getenv("PATH"), "HOME=" + r.dir, "TZ=UTC", "LANG=C.UTF-8"}
	for k, v := range r.env {
		c.Env = append(c.Env, k+"="+v)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stdout, c.Stderr = pw, pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	endless := endlessRE.MatchString(cmd) && !strings.Contains(cmd, "--count")
	var got []string
	sc := bufio.NewScanner(pr)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		got = append(got, strings.TrimRight(sc.Text(), "\r"))
		if endless && matchDoc(ex.want, got, copyIDs(r.ids)) {
			c.Cancel()
			break
		}
	}
	io.Copy(io.Discard, pr)
	pr.Close()
	err = c.Wait()
	if endless {
		return got, 0
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return got, ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %s: %v", ex.where, cmd, err)
	}
	// sh prints nothing for an empty output: compare as one empty line,
	// as the in-process commands do.
	if len(got) == 0 {
		got = []string{""}
	}
	return got, 0
}

func copyIDs(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// settle waits until no task has work due: each is suspended, failed, or
// completed with its reflection recorded, so that counts in the output do
// not depend on how fast the machine is.
func settle(t *testing.T, td *testDaemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	page, err := td.d.engine.Agent().View().Tasks(ctx, replay.Query{Limit: replay.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range page.Tasks {
		last, err := td.d.engine.Agent().WaitUntil(ctx, s.ID, quiet)
		if err != nil {
			t.Fatalf("task %s does not settle: %v (state %s, next %v, machine %v, iteration %d)", s.ID, err, last.State, fsm.Next(&last).Kind, last.Machine, last.Context.Iteration)
		}
	}
}

// matchDoc compares documented lines with real ones (see TestDocExamples),
// binding the documented ids it meets to the real ones.
func matchDoc(want, got []string, ids map[string]string) bool {
	if len(want) == 0 {
		return len(got) == 0 || len(got) == 1 && got[0] == ""
	}
	if strings.TrimSpace(want[0]) == "..." {
		for i := 0; i <= len(got); i++ {
			if matchDoc(want[1:], got[i:], ids) {
				return true
			}
		}
		return false
	}
	if len(got) == 0 {
		return false
	}
	bound, ok := matchLine(want[0], got[0], ids)
	if !ok || !matchDoc(want[1:], got[1:], ids) {
		return false
	}
	for k, v := range bound {
		ids[k] = v
	}
	return true
}

// matchLine compares one documented line with a real one, both
// normalised: "..." in the documented line matches any text, and each id
// in it matches the real id it is bound to, or any id (which it then
// binds, returned in bound).
func matchLine(want, got string, ids map[string]string) (bound map[string]string, ok bool) {
	wn, gn := normalize(want), normalize(got)
	var pat strings.Builder
	var names []string // the documented ids captured, in order
	pat.WriteString("^")
	for i, piece := range strings.Split(wn, "...") {
		if i > 0 {
			pat.WriteString(".*")
		}
		last := 0
		for _, loc := range ulidRE.FindAllStringIndex(piece, -1) {
			pat.WriteString(regexp.QuoteMeta(piece[last:loc[0]]))
			id := piece[loc[0]:loc[1]]
			if real, ok := ids[id]; ok {
				pat.WriteString(regexp.QuoteMeta(real))
			} else {
				pat.WriteString(`([0-9A-HJKMNP-TV-Z]{26})`)
				names = append(names, id)
			}
			last = loc[1]
		}
		pat.WriteString(regexp.QuoteMeta(piece[last:]))
	}
	pat.WriteString("$")
	m := regexp.MustCompile(pat.String()).FindStringSubmatch(gn)
	if m == nil {
		return nil, false
	}
	bound = map[string]string{}
	for i, id := range names {
		if prev, ok := bound[id]; ok && prev != m[i+1] {
			return nil, false // one documented id, two real ones
		}
		bound[id] = m[i+1]
	}
	return bound, true
}

// quiet reports whether nothing more is due for a task: it waits for an
// answer, or it ended and its post-task reflection, if it gets one, is
// recorded. (The agent reflects on a completed task that took more than
// one iteration or called a tool: agent.defaultShouldReflect.) A broker
// task is quiet unless the broker is about to retry or dead-letter it: it
// waits for a worker or is finished.
func quiet(t *fsm.Task) bool {
	if t.Dispatch != nil {
		k := fsm.Next(t).Kind
		return k != fsm.ActRetry && k != fsm.ActDeadLetter
	}
	switch next := fsm.Next(t).Kind; {
	case t.State == fsm.StateSuspended, t.State == fsm.StateFailed:
		return true
	case next == fsm.ActNone:
		return true
	case next != fsm.ActReflect || t.Context.PostReflection != nil:
		return false
	}
	if t.Context.Iteration > 1 {
		return false
	}
	for _, a := range t.Context.ActionsDone {
		if a.ActionType == fsm.ActionToolCall {
			return false
		}
	}
	return true
}

// docConfigFiles writes a document's named blocks into dir, its working
// directory, makes it the test's, sets the variables the document exports
// and, with df.config, has the daemon start with that file.
func docConfigFiles(t *testing.T, df docFile, dir string, cfg *config) {
	t.Helper()
	files := writeDocFiles(t, df.path, dir)
	for _, it := range readDocExamples(t, df.path) {
		if w := splitWords(it.cmd); len(w) > 1 && w[0] == "export" {
			for _, kv := range w[1:] {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
		}
	}
	t.Chdir(dir)
	if df.config == "" {
		return
	}
	p, ok := files[df.config]
	if !ok {
		t.Fatalf("%s has no block named %s", df.path, df.config)
	}
	f, err := cfgfile.Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.engine.Config = f
}
