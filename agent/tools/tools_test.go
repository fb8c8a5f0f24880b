package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// mapMemory is an in-memory Memory for tests.
type mapMemory struct {
	mu     sync.Mutex
	files  map[string]string
	causes []Cause
}

func (m *mapMemory) List(context.Context) ([]MemoryEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []MemoryEntry
	for p, c := range m.files {
		out = append(out, MemoryEntry{Path: p, Summary: Summary(c), Size: len(c)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func (m *mapMemory) Read(_ context.Context, p string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.files[p]
	if !ok {
		return "", fmt.Errorf("%w: %s", ErrNoMemory, p)
	}
	return c, nil
}

func (m *mapMemory) Write(_ context.Context, c Cause, p, content string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.causes = append(m.causes, c)
	m.files[p] = content
	return nil
}

func (m *mapMemory) Patch(_ context.Context, c Cause, p, old, new string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := strings.Count(m.files[p], old); n != 1 {
		return fmt.Errorf("old_str occurs %d times", n)
	}
	m.causes = append(m.causes, c)
	m.files[p] = strings.Replace(m.files[p], old, new, 1)
	return nil
}

func (m *mapMemory) Append(_ context.Context, c Cause, p, entry string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.causes = append(m.causes, c)
	m.files[p] += entry
	return nil
}

func call(t *testing.T, tool Tool, args string) (string, error) {
	t.Helper()
	return tool.Call(context.Background(), Call{TaskID: "T1", Arguments: json.RawMessage(args), Notify: func(string) {}})
}

func TestMemoryTools(t *testing.T) {
	m := &mapMemory{files: map[string]string{}}
	reg, err := NewRegistry(MemoryTools(m)...)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) Tool {
		tl, err := reg.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}

	if out, err := call(t, get(MemoryList), `{}`); err != nil || out != "(memory is empty)" {
		t.Fatalf("empty list = %q, %v", out, err)
	}
	if _, err := call(t, get(MemoryWrite), `{"path":"facts/user.md","content":"> Summary: who the user is\nName: Ada\n"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, get(MemoryPatch), `{"path":"facts/user.md","old_str":"Ada","new_str":"Ada Lovelace"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, get(MemoryAppend), `{"path":"episodes/2025-01.md","entry":"## first\n"}`); err != nil {
		t.Fatal(err)
	}
	out, err := call(t, get(MemoryRead), `{"path":"facts/user.md"}`)
	if err != nil || out != "> Summary: who the user is\nName: Ada Lovelace\n" {
		t.Fatalf("read = %q, %v", out, err)
	}
	out, _ = call(t, get(MemoryList), `{}`)
	want := "- episodes/2025-01.md (9 bytes)\n- facts/user.md: who the user is (46 bytes)\n"
	if out != want {
		t.Fatalf("list =\n%s\nwant\n%s", out, want)
	}
	if len(m.causes) != 3 || m.causes[0].TaskID != "T1" {
		t.Fatalf("causes = %+v", m.causes)
	}

	for _, bad := range []struct{ tool, args, want string }{
		{MemoryRead, `{"path":"../etc/passwd"}`, "clean relative path"},
		{MemoryRead, `{"path":"/facts/a.md"}`, "clean relative path"},
		{MemoryRead, `{"path":"notes/a.md"}`, "must start with facts/ or episodes/"},
		{MemoryRead, `{"path":"facts/a.txt"}`, "must end with .md"},
		{MemoryRead, `{"path":"facts/missing.md"}`, "no such memory file"},
		{MemoryRead, `{"file":"facts/a.md"}`, `unknown field "file"`},
		{MemoryRead, `not json`, "invalid arguments"},
		{MemoryWrite, `{"path":"facts/big.md","content":"` + strings.Repeat("x", MaxMemoryFile+1) + `"}`, "more than the"},
		{MemoryPatch, `{"path":"facts/user.md","old_str":"","new_str":"x"}`, "old_str is required"},
		{MemoryPatch, `{"path":"facts/user.md","old_str":"nobody","new_str":"x"}`, "occurs 0 times"},
	} {
		if _, err := call(t, get(bad.tool), bad.args); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s %s: err = %v, want %q", bad.tool, bad.args[:min(len(bad.args), 40)], err, bad.want)
		}
	}
	if len(m.causes) != 3 {
		t.Fatalf("a refused call changed memory: %d changes", len(m.causes))
	}
}

func TestNotifyAndCurrentTime(t *testing.T) {
	var got []string
	n := NotifyTool()
	out, err := n.Call(context.Background(), Call{Arguments: json.RawMessage(`{"message":"halfway"}`), Notify: func(m string) { got = append(got, m) }})
	if err != nil || out != "notified" || len(got) != 1 || got[0] != "halfway" {
		t.Fatalf("notify = %q %v %v", out, err, got)
	}
	if _, err := call(t, n, `{"message":"  "}`); err == nil {
		t.Fatal("blank message accepted")
	}

	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	ct := CurrentTimeTool(func() time.Time { return at })
	if out, err := call(t, ct, `{}`); err != nil || out != "2025-03-04T05:06:07Z" {
		t.Fatalf("current_time = %q %v", out, err)
	}
	if out, err := call(t, ct, ``); err != nil || out != "2025-03-04T05:06:07Z" {
		t.Fatalf("current_time without arguments = %q %v", out, err)
	}
	if out, err := call(t, ct, `{"timezone":"Asia/Tokyo"}`); err != nil || out != "2025-03-04T14:06:07+09:00" {
		t.Fatalf("current_time Tokyo = %q %v", out, err)
	}
	if _, err := call(t, ct, `{"timezone":"Mars/Olympus"}`); err == nil {
		t.Fatal("unknown zone accepted")
	}
}

func TestRegistry(t *testing.T) {
	a := Func("a", "A", nil, nil)
	if _, err := NewRegistry(a, Func("a", "again", nil, nil)); err == nil {
		t.Fatal("duplicate name accepted")
	}
	if _, err := NewRegistry(Func("has space", "", nil, nil)); err == nil {
		t.Fatal("invalid name accepted")
	}
	if _, err := NewRegistry(Func("p", "", json.RawMessage(`{`), nil)); err == nil {
		t.Fatal("invalid schema accepted")
	}
	r, err := NewRegistry(Func("b", "B", nil, nil), a, CurrentTimeTool(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Names(), ","); got != "a,b,current_time" {
		t.Fatalf("names = %s", got)
	}
	if _, err := r.Lookup("zzz"); !errors.Is(err, ErrUnknownTool) {
		t.Fatalf("lookup err = %v", err)
	}
	sub, err := r.Subset("current_time", "a")
	if err != nil || strings.Join(sub.Names(), ",") != "a,current_time" || sub.Has("b") {
		t.Fatalf("subset = %v, %v", sub, err)
	}
	if _, err := r.Subset("nope"); err == nil {
		t.Fatal("subset of a missing tool accepted")
	}
	specs := r.Specs()
	if len(specs) != 3 || specs[2].Name != "current_time" || !json.Valid(specs[2].Parameters) {
		t.Fatalf("specs = %+v", specs)
	}
}

func TestSummary(t *testing.T) {
	if s := Summary("# Title\n>  Summary:  likes tea \nbody"); s != "likes tea" {
		t.Fatalf("summary = %q", s)
	}
	if s := Summary("no summary"); s != "" {
		t.Fatalf("summary = %q", s)
	}
}

func TestLesson(t *testing.T) {
	for in, want := range map[string]string{
		"# T\nLesson: use UTC\n":           "use UTC",
		"# T\n> lesson:  use UTC \n":       "use UTC",
		"- **Lesson:** use UTC":            "use UTC",
		"**Lesson**: use UTC":              "use UTC",
		"# T\nLessons learned: none\nbody": "",
		"no lesson here":                   "",
	} {
		if got := Lesson(in); got != want {
			t.Errorf("Lesson(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSourceOf(t *testing.T) {
	w := &WorkerTool{ToolName: "shout", Capability: "shout"}
	mem := MemoryTools(nil)
	for _, c := range []struct {
		tool Tool
		want string
	}{
		{NotifyTool(), "builtin"},
		{CurrentTimeTool(nil), "builtin"},
		{mem[0], "builtin"},
		{Func("mine", "", nil, nil), "go"},
		{w, "worker:shout"},
		{sourcedTool{Tool: Func("everything__echo", "", nil, nil), src: Source{Kind: SourceMCP, Server: "everything"}}, "mcp:everything"},
		{sourcedTool{Tool: Func("bare", "", nil, nil)}, "go"},
	} {
		if got := SourceOf(c.tool).String(); got != c.want {
			t.Errorf("%s: source %q, want %q", c.tool.Name(), got, c.want)
		}
	}
	if _, err := w.Call(context.Background(), Call{}); !errors.Is(err, ErrWorkerTool) {
		t.Errorf("worker tool Call: %v, want ErrWorkerTool", err)
	}
}

type sourcedTool struct {
	Tool
	src Source
}

func (s sourcedTool) Source() Source { return s.src }
