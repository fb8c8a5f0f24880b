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

const msgpackPath = "github.com/vmihailenco/msgpack/v5"

// msgpackEntryPoints are the msgpack functions that encode or decode a whole
// value. Outside internal/codec they would write bytes that are not
// canonical (unsorted map keys, empty fields kept) or decode stored bytes
// without the shape check that refuses forged lengths.
var msgpackEntryPoints = map[string]bool{
	"Marshal": true, "Unmarshal": true, "NewEncoder": true, "GetEncoder": true,
	"NewDecoder": true, "GetDecoder": true,
}

// msgpackAllowed lists the files outside internal/codec that may call one
// entry point, and which. fsm's body reader decodes field by field with
// msgpack's primitives, on bytes codec.CheckShape has already checked.
var msgpackAllowed = map[string]map[string]bool{
	"internal/codec/codec.go": {"Marshal": true, "Unmarshal": true, "NewEncoder": true, "GetEncoder": true, "NewDecoder": true, "GetDecoder": true},
	"fsm/bodydecode.go":       {"NewDecoder": true},
}

// TestOneMsgpackCodec: every msgpack value the module persists goes through
// internal/codec (codec.Encode, codec.Decode).
func TestOneMsgpackCodec(t *testing.T) {
	walkSources(t, root, checkMsgpack)
}

// checkMsgpack returns one line for each msgpack entry point the file at
// path (rel, relative to the module root) calls without being allowed to.
func checkMsgpack(path, rel string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	name := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == msgpackPath {
			name = "msgpack"
			if imp.Name != nil {
				name = imp.Name.Name
			}
		}
	}
	if name == "" {
		return nil, nil
	}
	var problems []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && msgpackEntryPoints[sel.Sel.Name] && !msgpackAllowed[rel][sel.Sel.Name] {
			problems = append(problems, fmt.Sprintf("%s: msgpack.%s outside internal/codec: use codec.Encode or codec.Decode", fset.Position(sel.Pos()), sel.Sel.Name))
		}
		return true
	})
	return problems, nil
}

// TestMsgpackRuleCatchesViolations proves the rule is not vacuous, also
// under another import name.
func TestMsgpackRuleCatchesViolations(t *testing.T) {
	dir := t.TempDir()
	src := `package agent
import mp "github.com/vmihailenco/msgpack/v5"
func f(v any) { b, _ := mp.Marshal(v); _ = mp.Unmarshal(b, v); _ = mp.NewDecoder(nil) }
`
	path := filepath.Join(dir, "bad.go")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	problems, err := checkMsgpack(path, "agent/bad.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 3 || !strings.Contains(problems[0], "msgpack.Marshal") || !strings.Contains(problems[2], "msgpack.NewDecoder") {
		t.Fatalf("got %q", problems)
	}
	// The body reader's one allowance does not extend to Marshal.
	problems, _ = checkMsgpack(path, "fsm/bodydecode.go")
	if len(problems) != 2 {
		t.Fatalf("fsm/bodydecode.go: got %q", problems)
	}
}
