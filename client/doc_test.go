package client_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocShowsTheExamples: every Go function docs/client.md shows is an
// Example function of this package as it is written, so the page's code
// is code go test runs.
func TestDocShowsTheExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/client.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(func Example.*?)\n```").FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 3 {
		t.Fatalf("docs/client.md shows %d examples, want 3", len(blocks))
	}
	for _, b := range blocks {
		if !strings.Contains(string(src), b[1]) {
			t.Errorf("docs/client.md shows a function that is not in example_test.go as written:\n%s", b[1])
		}
	}
}
