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

// loops lists the packages that drive tasks: they do what fsm.Next says is
// due and never switch on a machine's states, so a new machine needs no new
// loop. Their non-test files must not name an fsm.State* constant.
var loops = []string{"agent", "broker"}

func TestLoopsNameNoState(t *testing.T) {
	for _, dir := range loops {
		walkSources(t, filepath.Join(root, dir), func(path, _ string) ([]string, error) { return stateNames(path) })
	}
}

// stateNames returns one line for each fsm.State* constant the file at
// path names.
func stateNames(path string) ([]string, error) {
	return selectorsOf(path, module+"fsm", "fsm", func(local, name string) string {
		if !strings.HasPrefix(name, "State") {
			return ""
		}
		return fmt.Sprintf("%s.%s: a loop dispatches on fsm.Next, never on a machine's state", local, name)
	})
}

// selectorsOf parses the Go file at path and calls problem for every
// selector local.Name on the package imported from importPath (named pkg,
// or whatever name the file gives it); each non-empty answer is a problem,
// prefixed with its position. Nil if the file does not import it.
func selectorsOf(path, importPath, pkg string, problem func(local, name string) string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	local := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == importPath {
			local = pkg
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	if local == "" {
		return nil, nil
	}
	var problems []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
				if p := problem(local, sel.Sel.Name); p != "" {
					problems = append(problems, fmt.Sprintf("%s: %s", fset.Position(sel.Pos()), p))
				}
			}
		}
		return true
	})
	return problems, nil
}

// TestStateNamesCatchesViolations proves the check is not vacuous, alias
// included.
func TestStateNamesCatchesViolations(t *testing.T) {
	src := `package agent
import m "github.com/pegasus-engine/pegasus/fsm"
func f(t m.Task) bool { return t.State == m.StateReasoning || t.State == m.StateFailed || m.Next(&t).Kind == m.ActNone }
`
	path := filepath.Join(t.TempDir(), "bad.go")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	problems, err := stateNames(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 2 || !strings.Contains(problems[0], "m.StateReasoning") || !strings.Contains(problems[1], "m.StateFailed") {
		t.Fatalf("problems = %q", problems)
	}
}
