package sse

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadLineEnds: the three line ends of the specification give the
// same events, also when a "\r\n" is cut between two reads.
func TestReadLineEnds(t *testing.T) {
	const stream = "id: 1\nevent: e\ndata: a\ndata: b\n\n: keep-alive\n\nid: 2\ndata: c\n\n"
	want := "1 e a\nb|2  c|"
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		in := strings.ReplaceAll(stream, "\n", eol)
		for name, r := range map[string]io.Reader{
			"whole":        strings.NewReader(in),
			"byte by byte": iotest.OneByteReader(strings.NewReader(in)),
		} {
			var got strings.Builder
			err := Read(context.Background(), r, 1<<20, func(e Event) error {
				fmt.Fprintf(&got, "%s %s %s|", e.ID, e.Event, e.Data)
				return nil
			})
			if err != nil || got.String() != want {
				t.Errorf("%q %s: got %q, %v; want %q", eol, name, got.String(), err, want)
			}
		}
	}
}
