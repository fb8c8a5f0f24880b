package mcp

import (
	"encoding/base64"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestToolName(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	long := strings.Repeat("x", 70)
	for _, c := range []struct{ server, tool, want string }{
		{"everything", "echo", "everything__echo"},
		{"everything", "get-tiny-image", "everything__get-tiny-image"},
		{"fs", "read.file", "fs__read_file"},
		{"my server", "dé", "my_server__d__"}, // é is two bytes, each replaced
		{"s", long, "s__" + strings.Repeat("x", 52) + "_" + shortHash("s__"+long)},
	} {
		got := ToolName(c.server, c.tool)
		if got != c.want || !valid.MatchString(got) {
			t.Errorf("ToolName(%q, %q) = %q, want %q", c.server, c.tool, got, c.want)
		}
	}
	if a, b := ToolName("s", long+"a"), ToolName("s", long+"b"); a == b {
		t.Errorf("two long names collide: %s", a)
	}
}

func TestNamesThatCollide(t *testing.T) {
	s := &server{cfg: ServerConfig{Name: "s"}}
	used := map[string]bool{}
	a, err := newTool(s, &mcp.Tool{Name: "a.b"}, used)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newTool(s, &mcp.Tool{Name: "a_b"}, used)
	if err != nil {
		t.Fatal(err)
	}
	if a.name != "s__a_b" || b.name == a.name || !regexp.MustCompile(`^s__a_b_[0-9a-f]{8}$`).MatchString(b.name) {
		t.Errorf("names %q and %q", a.name, b.name)
	}
}

func TestConvertBounds(t *testing.T) {
	img := make([]byte, 300)
	res := &mcp.CallToolResult{Content: []mcp.Content{
		&mcp.TextContent{Text: "hello"},
		&mcp.ImageContent{MIMEType: "image/png", Data: img},
		&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "abc"}},
	}}
	full := convert(res, 1<<20)
	if len(full.Parts) != 2 || full.Parts[0].Truncated || full.Parts[0].Data != base64.StdEncoding.EncodeToString(img) ||
		full.Parts[1].Text != "abc" || full.Parts[1].URI != "file:///a.txt" {
		t.Fatalf("parts: %+v", full.Parts)
	}
	if want := "hello\n[image image/png, 300 bytes]\n[resource text/plain file:///a.txt, 3 bytes]"; full.Text != want {
		t.Fatalf("text %q, want %q", full.Text, want)
	}

	// Room for the text and 101 bytes of the image: it is cut to whole
	// base64 quanta and marked; the resource after it gets the byte left.
	small := convert(res, len(full.Text)+101)
	if small.Text != full.Text {
		t.Errorf("text %q", small.Text)
	}
	p := small.Parts[0]
	if !p.Truncated || len(p.Data) != 100 || p.Size != 300 {
		t.Errorf("image: truncated %v, %d bytes of data, size %d", p.Truncated, len(p.Data), p.Size)
	}
	if q := small.Parts[1]; !q.Truncated || q.Text != "a" || q.Size != 3 {
		t.Errorf("resource: %+v", q)
	}

	// Not even the text fits.
	tiny := convert(res, 4)
	if !strings.HasPrefix(tiny.Text, "hell\n[truncated: 4 of ") || !tiny.Parts[0].Truncated || tiny.Parts[0].Data != "" {
		t.Errorf("tiny: %q %+v", tiny.Text, tiny.Parts)
	}
}
