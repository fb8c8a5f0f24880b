package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// Names of the built-in tools.
const (
	MemoryList   = "memory_list"
	MemoryRead   = "memory_read"
	MemoryWrite  = "memory_write"
	MemoryPatch  = "memory_patch"
	MemoryAppend = "memory_append"
	Notify       = "notify"
	CurrentTime  = "current_time"
)

// Memory is long-term memory as the memory tools see it: markdown files by
// path, "facts/..." for facts and "episodes/..." for episodes, each with an
// optional "> Summary: ..." line that memory_list shows. The agent
// implements it on the "$memory" stream; writes record the cause so that a
// memory change can be traced to the tool call that made it.
type Memory interface {
	// List returns every file with its summary, in path order.
	List(ctx context.Context) ([]MemoryEntry, error)
	// Read returns a file's content, or an error wrapping ErrNoMemory.
	Read(ctx context.Context, path string) (string, error)
	// Write creates or replaces a file.
	Write(ctx context.Context, cause Cause, path, content string) error
	// Patch replaces the one occurrence of old with new in a file. It fails
	// when old occurs zero or several times.
	Patch(ctx context.Context, cause Cause, path, old, new string) error
	// Append adds entry at the end of a file, creating it if needed.
	Append(ctx context.Context, cause Cause, path, entry string) error
}

// MemoryEntry is one file in the memory index.
type MemoryEntry struct {
	Path    string `json:"path"`
	Summary string `json:"summary,omitempty"`
	Size    int    `json:"size"`
}

// Cause says which event led to a memory change.
type Cause struct {
	TaskID      string
	Causation   ulid.ULID
	Correlation ulid.ULID
}

// ErrNoMemory is returned for a memory path that holds nothing.
var ErrNoMemory = errors.New("no such memory file")

// MaxMemoryFile bounds the content of one memory file, so that a runaway
// model cannot grow an event without limit.
const MaxMemoryFile = 64 << 10

// CheckMemoryPath refuses paths that are not a clean relative path below
// "facts/" or "episodes/" ending in ".md".
func CheckMemoryPath(p string) error {
	switch {
	case p == "":
		return errors.New("path is required")
	case len(p) > 200:
		return errors.New("path is longer than 200 characters")
	case path.Clean(p) != p || strings.HasPrefix(p, "/") || strings.Contains(p, "..") || strings.Contains(p, "\\"):
		return fmt.Errorf("path %q must be a clean relative path such as facts/user.md", p)
	case !strings.HasPrefix(p, "facts/") && !strings.HasPrefix(p, "episodes/"):
		return fmt.Errorf("path %q must start with facts/ or episodes/", p)
	case !strings.HasSuffix(p, ".md"):
		return fmt.Errorf("path %q must end with .md", p)
	}
	return nil
}

// Summary extracts the "> Summary: ..." line of a memory file, or "".
func Summary(content string) string {
	for line := range strings.Lines(content) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, ">"); ok {
			if s, ok := strings.CutPrefix(strings.TrimSpace(rest), "Summary:"); ok {
				return strings.TrimSpace(s)
			}
		}
	}
	return ""
}

// Lesson extracts the "Lesson: ..." line of an episode entry, or "". The
// label may be quoted ("> Lesson:"), listed ("- Lesson:") or bold
// ("**Lesson:**"), in any case.
func Lesson(content string) string {
	const label = "lesson"
	for line := range strings.Lines(content) {
		s := strings.TrimLeft(strings.TrimSpace(line), ">-* ")
		if len(s) < len(label) || !strings.EqualFold(s[:len(label)], label) {
			continue
		}
		if rest, ok := strings.CutPrefix(strings.TrimLeft(s[len(label):], "*_ "), ":"); ok {
			return strings.TrimSpace(strings.TrimLeft(rest, "*_ "))
		}
	}
	return ""
}

func cause(c Call) Cause {
	return Cause{TaskID: c.TaskID, Causation: c.Cause, Correlation: c.Correlation}
}

func schema(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	if len(required) == 0 {
		req = []byte("[]")
	}
	return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `,"additionalProperties":false}`)
}

const pathProp = `"path":{"type":"string","description":"Memory file path, e.g. facts/user.md or episodes/2025-01.md"}`

// MemoryTools returns the five memory tools over m.
func MemoryTools(m Memory) []Tool {
	return []Tool{
		reader(MemoryList, "List long-term memory files (facts and episodes) with their one-line summaries.",
			schema(""), func(ctx context.Context, c Call) (string, error) {
				if err := c.Decode(&struct{}{}); err != nil {
					return "", err
				}
				entries, err := m.List(ctx)
				if err != nil {
					return "", err
				}
				if len(entries) == 0 {
					return "(memory is empty)", nil
				}
				return FormatIndex(entries), nil
			}),
		reader(MemoryRead, "Read one long-term memory file.",
			schema(pathProp, "path"), func(ctx context.Context, c Call) (string, error) {
				var a struct {
					Path string `json:"path"`
				}
				if err := c.Decode(&a); err != nil {
					return "", err
				}
				if err := CheckMemoryPath(a.Path); err != nil {
					return "", err
				}
				return m.Read(ctx, a.Path)
			}),
		builtin(MemoryWrite, "Create or replace a long-term memory file. Start it with a line \"> Summary: ...\".",
			schema(pathProp+`,"content":{"type":"string","description":"The whole file, in markdown"}`, "path", "content"),
			func(ctx context.Context, c Call) (string, error) {
				var a struct {
					Path    string `json:"path"`
					Content string `json:"content"`
				}
				if err := c.Decode(&a); err != nil {
					return "", err
				}
				if err := checkWrite(a.Path, a.Content); err != nil {
					return "", err
				}
				if err := m.Write(ctx, cause(c), a.Path, a.Content); err != nil {
					return "", err
				}
				return fmt.Sprintf("wrote %s (%d bytes)", a.Path, len(a.Content)), nil
			}),
		builtin(MemoryPatch, "Replace one exact occurrence of old_str with new_str in a long-term memory file.",
			schema(pathProp+`,"old_str":{"type":"string"},"new_str":{"type":"string"}`, "path", "old_str", "new_str"),
			func(ctx context.Context, c Call) (string, error) {
				var a struct {
					Path   string `json:"path"`
					OldStr string `json:"old_str"`
					NewStr string `json:"new_str"`
				}
				if err := c.Decode(&a); err != nil {
					return "", err
				}
				if a.OldStr == "" {
					return "", errors.New("old_str is required")
				}
				if err := checkWrite(a.Path, a.NewStr); err != nil {
					return "", err
				}
				if err := m.Patch(ctx, cause(c), a.Path, a.OldStr, a.NewStr); err != nil {
					return "", err
				}
				return "patched " + a.Path, nil
			}),
		builtin(MemoryAppend, "Append an entry to a long-term memory file (typically an episode), creating it if needed.",
			schema(pathProp+`,"entry":{"type":"string","description":"Markdown block to append"}`, "path", "entry"),
			func(ctx context.Context, c Call) (string, error) {
				var a struct {
					Path  string `json:"path"`
					Entry string `json:"entry"`
				}
				if err := c.Decode(&a); err != nil {
					return "", err
				}
				if err := checkWrite(a.Path, a.Entry); err != nil {
					return "", err
				}
				if err := m.Append(ctx, cause(c), a.Path, a.Entry); err != nil {
					return "", err
				}
				return "appended to " + a.Path, nil
			}),
	}
}

func checkWrite(p, content string) error {
	if err := CheckMemoryPath(p); err != nil {
		return err
	}
	if len(content) > MaxMemoryFile {
		return fmt.Errorf("content is %d bytes, more than the %d allowed", len(content), MaxMemoryFile)
	}
	return nil
}

// FormatIndex renders a memory index the way the model sees it: one line
// per file.
func FormatIndex(entries []MemoryEntry) string {
	var b strings.Builder
	for _, e := range entries {
		b.WriteString("- ")
		b.WriteString(e.Path)
		if e.Summary != "" {
			b.WriteString(": ")
			b.WriteString(e.Summary)
		}
		fmt.Fprintf(&b, " (%d bytes)\n", e.Size)
	}
	return b.String()
}

// NotifyTool returns the notify tool: an interim message to the user while
// the task goes on.
func NotifyTool() Tool {
	return builtin(Notify, "Send a short interim message to the user while you keep working (progress, a finding). The task continues.",
		schema(`"message":{"type":"string"}`, "message"), func(ctx context.Context, c Call) (string, error) {
			var a struct {
				Message string `json:"message"`
			}
			if err := c.Decode(&a); err != nil {
				return "", err
			}
			if strings.TrimSpace(a.Message) == "" {
				return "", errors.New("message is required")
			}
			if len(a.Message) > 4096 {
				return "", errors.New("message is longer than 4096 bytes")
			}
			c.Notify(a.Message)
			return "notified", nil
		})
}

// CurrentTimeTool returns the current_time tool reading now (time.Now when
// nil).
func CurrentTimeTool(now func() time.Time) Tool {
	if now == nil {
		now = time.Now
	}
	return reader(CurrentTime, "Get the current date and time (RFC 3339). Optionally in an IANA time zone such as Europe/Paris.",
		schema(`"timezone":{"type":"string","description":"IANA time zone; UTC when omitted"}`),
		func(ctx context.Context, c Call) (string, error) {
			var a struct {
				Timezone string `json:"timezone"`
			}
			if err := c.Decode(&a); err != nil {
				return "", err
			}
			loc := time.UTC
			if a.Timezone != "" {
				l, err := time.LoadLocation(a.Timezone)
				if err != nil {
					return "", fmt.Errorf("unknown time zone %q", a.Timezone)
				}
				loc = l
			}
			return now().In(loc).Format(time.RFC3339), nil
		})
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
