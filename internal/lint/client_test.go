package lint

import (
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// leaves are the packages a program that only talks to a daemon (a
// worker) links: the client, the wire types, and what the client uses.
// They import the standard library and each other only, never the
// engine (eventlog, fsm, agent, broker, replay, pebble, NATS, ...), so a
// worker binary stays small. The list is closed: a leaf imports only
// leaves, so what holds for their own imports holds for everything they
// link.
var leaves = map[string]bool{
	"api":          true,
	"client":       true,
	"internal/sse": true,
}

func TestClientImportsNoEngine(t *testing.T) {
	for dir := range leaves {
		walkSources(t, filepath.Join(root, dir), func(path, _ string) ([]string, error) { return leafImports(dir, path) })
	}
	// examples/worker is the proof: a worker on the client alone.
	walkSources(t, filepath.Join(root, "examples", "worker"), func(path, _ string) ([]string, error) {
		return leafImports("examples/worker", path)
	})
}

// leafImports returns one line for each import of the file at path that
// is neither the standard library nor a leaf.
func leafImports(dir, path string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		first, _, _ := strings.Cut(p, "/")
		if !strings.Contains(first, ".") { // the standard library
			continue
		}
		if rest, ok := strings.CutPrefix(p, module); ok && leaves[rest] {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s: package %s imports %q: it may import only the standard library and %s",
			fset.Position(imp.Pos()), dir, p, leafList()))
	}
	return problems, nil
}

func leafList() string {
	var l []string
	for _, d := range slices.Sorted(maps.Keys(leaves)) {
		l = append(l, module+d)
	}
	return strings.Join(l, ", ")
}

// TestClientRuleCatchesViolations proves the check is not vacuous.
func TestClientRuleCatchesViolations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.go")
	src := "package client\nimport (\n\t\"net/http\"\n\t\"github.com/pegasus-engine/pegasus/api\"\n\t\"github.com/pegasus-engine/pegasus/fsm\"\n\t\"github.com/cockroachdb/pebble/v2\"\n)\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	problems, err := leafImports("client", path)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 2 || !strings.Contains(problems[0], `"github.com/pegasus-engine/pegasus/fsm"`) || !strings.Contains(problems[1], "pebble") {
		t.Fatalf("problems: %q, want fsm and pebble", problems)
	}
}
