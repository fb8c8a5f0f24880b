package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/cliconv"
	"github.com/pegasus-engine/pegasus/replay"
)

// docExampleFiles are the documents whose `$ pegasusd ...` examples
// TestDocExamples runs. The curl examples of api.md and metrics.md and
// the pegasus-replay examples of replay.md are not run yet.
var docExampleFiles = []string{"../../README.md", "../../docs/cli.md", "../../docs/api.md"}

// docExample is one `$ command` line of a fenced sh block and the output
// shown under it.
type docExample struct {
	where string // file:line
	cmd   string
	want  []string
}

// readDocExamples extracts the examples of a Markdown file: in each ```sh
// block, a line starting with "$ " is a command and the lines up to the
// next command or the end of the block are its output.
func readDocExamples(t *testing.T, file string) []docExample {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []docExample
	fenced, in := false, false // in a fenced block; in an sh one
	cur := -1                  // the example whose output is being read
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			fenced = !fenced
			in, cur = fenced && strings.TrimPrefix(line, "```") == "sh", -1
		case !in:
		case strings.HasPrefix(line, "$ "):
			out = append(out, docExample{where: fmt.Sprintf("%s:%d", filepath.Base(file), n), cmd: line[2:]})
			cur = len(out) - 1
		case cur >= 0:
			out[cur].want = append(out[cur].want, line)
		}
	}
	return out
}

var (
	ulidRE    = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)
	timeRE    = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?Z?|\b\d{2}:\d{2}:\d{2}\.\d{3}\b`)
	addrRE    = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	ageRE     = regexp.MustCompile(`\s\d+[smhd]\s`)
	goVerRE   = regexp.MustCompile(`go1\.\d+(\.\d+)?\S* \S+/\S+`)
	commentRE = regexp.MustCompile(`\s{2,}#.*$`)
)

// normalize makes a line comparable: times, addresses, ages, the Go
// version and runs of spaces (column widths) are not the documentation's
// business; ids are compared through bindings (see match).
func normalize(s string) string {
	s = timeRE.ReplaceAllString(s, "TIME")
	s = addrRE.ReplaceAllString(s, "ADDR")
	s = goVerRE.ReplaceAllString(s, "GOVERSION")
	s = ageRE.ReplaceAllString(" "+s+" ", " AGE ")
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

// TestDocExamples runs every `$ pegasusd ...` example of the documents
// against a real daemon (the offline model) and compares its output with
// the documented one, after normalising times, ages, addresses and column
// widths. A task id the documentation shows in an output is bound to the
// real one, and later commands use the real one. A documented line "..."
// stands for any lines; a line ending in "..." for any line with that
// beginning. An example shown without output must exit 0.
func TestDocExamples(t *testing.T) {
	n := 0
	for _, file := range docExampleFiles {
		// Each document starts from a fresh daemon, as its reader would.
		td := startDaemon(t, testConfig(t))
		addr := strings.TrimPrefix(td.url, "http://")
		t.Setenv("PEGASUS_SERVER", td.url)
		ids := map[string]string{} // documented id -> real id, in this file
		for _, ex := range readDocExamples(t, file) {
			cmd := commentRE.ReplaceAllString(ex.cmd, "")
			if w := strings.Fields(cmd); len(w) == 0 || strings.TrimPrefix(w[0], "bin/") != "pegasusd" {
				continue
			}
			cmd = strings.ReplaceAll(cmd, "127.0.0.1:7070", addr)
			cmd = ulidRE.ReplaceAllStringFunc(cmd, func(id string) string {
				if real, ok := ids[id]; ok {
					return real
				}
				t.Errorf("%s: %q uses task %s, which no earlier example printed", ex.where, ex.cmd, id)
				return id
			})
			args := splitWords(cmd)
			n++
			settle(t, td)
			var out bytes.Buffer
			c := &client{stdin: strings.NewReader(""), stdout: &out, stderr: &out, interactive: new(bool)}
			app := newApp(c)
			args[0] = "pegasusd"
			code := exitCode(app.Run(cliconv.Interspersed(app, args)), &out)
			got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			if len(ex.want) == 0 && code != 0 {
				t.Errorf("%s: $ %s: exit %d (an example without output must succeed)\n%s", ex.where, ex.cmd, code, out.String())
			} else if !matchDoc(ex.want, got, ids) {
				t.Errorf("%s: $ %s\n--- documented\n%s\n--- got\n%s", ex.where, ex.cmd, strings.Join(ex.want, "\n"), out.String())
			}
		}
	}
	if n == 0 {
		t.Fatal("no examples found")
	}
	t.Logf("%d examples run", n)
}

// settle waits until no task has work due: each is suspended, failed, or
// completed with its reflection recorded, so that counts in the output do
// not depend on how fast the machine is.
func settle(t *testing.T, td *testDaemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	page, err := td.d.agent.View().Tasks(ctx, replay.Query{Limit: replay.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range page.Tasks {
		last, err := td.d.agent.WaitUntil(ctx, s.ID, quiet)
		if err != nil {
			t.Fatalf("task %s does not settle: %v (state %s, next %v, machine %v, iteration %d)", s.ID, err, last.State, fsm.Next(&last).Kind, last.Machine, last.Context.Iteration)
		}
	}
}

// matchDoc compares documented lines with real ones (see TestDocExamples),
// binding the documented ids it meets to the real ones.
func matchDoc(want, got []string, ids map[string]string) bool {
	if len(want) == 0 {
		return true
	}
	w := strings.TrimSpace(want[0])
	if w == "..." {
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
	wl, gl := want[0], got[0]
	wIDs, gIDs := ulidRE.FindAllString(wl, -1), ulidRE.FindAllString(gl, -1)
	if len(wIDs) != len(gIDs) {
		return false
	}
	for i, id := range wIDs {
		if real, ok := ids[id]; ok && real != gIDs[i] {
			return false
		}
	}
	wn, gn := normalize(ulidRE.ReplaceAllString(wl, "ID")), normalize(ulidRE.ReplaceAllString(gl, "ID"))
	if strings.HasSuffix(wn, "...") {
		if !strings.HasPrefix(gn, strings.TrimSuffix(wn, "...")) {
			return false
		}
	} else if wn != gn {
		return false
	}
	if !matchDoc(want[1:], got[1:], ids) {
		return false
	}
	for i, id := range wIDs {
		ids[id] = gIDs[i]
	}
	return true
}

// quiet reports whether nothing more is due for a task: it waits for an
// answer, or it ended and its post-task reflection, if it gets one, is
// recorded. (The agent reflects on a completed task that took more than
// one iteration or called a tool: agent.defaultShouldReflect.)
func quiet(t *fsm.Task) bool {
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
