package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/pegasus-engine/pegasus/"

// rule says what the non-test files of one package directory may not do.
type rule struct {
	dir       string
	forbidden []string // import paths, or prefixes ending in "/"
	pure      bool     // also refuse go statements and calls of time.Now, time.Since, time.Until
}

// impure lists what a pure package must never import: anything that reads
// the clock, draws randomness, does I/O, logs or stores.
var impure = []string{
	"os", "os/", "net", "net/", "io/ioutil", "syscall", "math/rand", "math/rand/", "crypto/rand",
	"log", "log/slog", "github.com/cockroachdb/pebble/", "github.com/cockroachdb/pebble/v2",
	"time/tzdata", "unsafe",
}

// nats is the NATS client and server. Only cluster (and the daemon that
// wires it in behind --publish) may import it: the embedded single-node
// path (eventlog, replay, agent, broker) never touches the network.
const nats = "github.com/nats-io/"

// Imports point downward: cmd -> server, engine -> agent, broker -> replay
// -> projection -> fsm; eventlog is used by agent, replay, retention,
// cluster, server, engine and cmd. server (the HTTP API) serves an engine
// through narrow interfaces and never imports engine, so that its own
// tests can start one; engine (the assembly: log, agent, broker, metrics,
// retention, schedules, cluster) never imports server. retention (the
// policy that archives finished tasks) sits beside agent: engine uses it,
// it uses replay and eventlog, and nothing below imports it. cluster sits
// beside agent too: it follows the log (eventlog) and writes the one JSON
// form (replay), and only engine, server (its errors) and cmd import it.
var rules = []rule{
	{dir: "fsm", pure: true, forbidden: append([]string{
		module + "eventlog", module + "projection", module + "replay", module + "agent", module + "retention", module + "cmd/", module + "cluster", module + "server", module + "engine", nats,
	}, impure...)},
	{dir: "projection", pure: true, forbidden: append([]string{
		module + "eventlog", module + "replay", module + "agent", module + "retention", module + "cmd/", module + "cluster", module + "server", module + "engine", nats,
	}, impure...)},
	{dir: "eventlog", forbidden: []string{
		module + "fsm", module + "projection", module + "replay", module + "agent", module + "retention", module + "cmd/", module + "cluster", module + "server", module + "engine", nats,
	}},
	{dir: "replay", forbidden: []string{module + "agent", module + "retention", module + "cmd/", module + "cluster", module + "server", module + "engine", nats}},
	{dir: "retention", forbidden: []string{module + "agent", module + "broker", module + "cmd/", module + "cluster", module + "server", module + "engine", nats}},
	{dir: "agent", forbidden: []string{module + "cmd/", module + "cluster", module + "server", module + "engine", nats}},
	{dir: "broker", forbidden: []string{module + "agent", module + "cmd/", module + "cluster", module + "server", module + "engine", nats}},
	{dir: "cluster", forbidden: []string{module + "agent", module + "broker", module + "retention", module + "cmd/", module + "server", module + "engine"}},
	// The HTTP API: it translates, the packages below decide. It serves an
	// engine without importing it, and never reaches NATS itself.
	{dir: "server", forbidden: []string{module + "cmd/", module + "engine", module + "retention", nats}},
	// The assembly: it opens and stops the parts, and serves nothing.
	{dir: "engine", forbidden: []string{module + "cmd/", module + "server", nats}},
	// The canonical codec sits under everything: it imports nothing of the
	// module, so every layer can use it.
	{dir: "internal/codec", pure: true, forbidden: append([]string{module}, impure...)},
}

// root is the module's root, from this package's directory.
var root = filepath.Join("..", "..")

func TestImportDirectionAndPurity(t *testing.T) {
	for _, r := range rules {
		base := filepath.Join(root, r.dir)
		if _, err := os.Stat(base); os.IsNotExist(err) {
			continue
		}
		walkSources(t, base, func(path, _ string) ([]string, error) { return checkFile(r, path) })
	}
}

// walkSources calls check on every non-test Go file under dir (skipping
// testdata and hidden directories) with its path and its path relative to
// the module root, and reports each problem it returns.
func walkSources(t *testing.T, dir string, check func(path, rel string) ([]string, error)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || (strings.HasPrefix(n, ".") && path != dir) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		problems, err := check(path, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		for _, p := range problems {
			t.Error(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkFile returns one line for each way the file at path breaks r.
func checkFile(r rule, path string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		for _, bad := range r.forbidden {
			if p == bad || (strings.HasSuffix(bad, "/") && strings.HasPrefix(p, bad)) {
				problems = append(problems, fmt.Sprintf("%s: package %s must not import %q", fset.Position(imp.Pos()), r.dir, p))
			}
		}
	}
	if !r.pure {
		return problems, nil
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			problems = append(problems, fmt.Sprintf("%s: package %s is pure and must not start goroutines", fset.Position(n.Pos()), r.dir))
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" {
				switch n.Sel.Name {
				case "Now", "Since", "Until", "Sleep", "After", "Tick", "NewTimer", "NewTicker", "AfterFunc":
					problems = append(problems, fmt.Sprintf("%s: package %s is pure and must not read the clock (time.%s)", fset.Position(n.Pos()), r.dir, n.Sel.Name))
				}
			}
		}
		return true
	})
	return problems, nil
}

// TestRulesCatchViolations proves the checker is not vacuous: a file that
// breaks every rule is reported once per violation.
func TestRulesCatchViolations(t *testing.T) {
	dir := t.TempDir()
	src := `package fsm
import (
	"os"
	"time"
	"github.com/pegasus-engine/pegasus/eventlog"
)
var _ = os.Args
var _ = eventlog.Any
func f() { go func() {}(); _ = time.Now() }
`
	path := filepath.Join(dir, "bad.go")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	problems, err := checkFile(rules[0], path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`must not import "os"`, `must not import "github.com/pegasus-engine/pegasus/eventlog"`, "must not start goroutines", "(time.Now)"}
	if len(problems) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(problems), len(want), strings.Join(problems, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(problems[i], w) {
			t.Errorf("problem %d = %q, want it to mention %q", i, problems[i], w)
		}
	}
}
