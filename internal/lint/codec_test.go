package lint

import (
	"fmt"
	"os"
	"path/filepath"
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
	return selectorsOf(path, msgpackPath, "msgpack", func(_, name string) string {
		if !msgpackEntryPoints[name] || msgpackAllowed[rel][name] {
			return ""
		}
		return fmt.Sprintf("msgpack.%s outside internal/codec: use codec.Encode or codec.Decode", name)
	})
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
