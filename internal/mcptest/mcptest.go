// Package mcptest has the misbehaviours of the small MCP servers that
// tests build with the SDK (agent/mcp's, cmd/pegasusd's end-to-end tests):
// a server that never answers initialize, and one whose answer does not
// decode; and what those tests do with the durable task server (run it
// over HTTP, read its files, release its tasks).
package mcptest

import (
	"bytes"
	"context"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Silent makes s never answer initialize (nor server/discover): a client
// waits until it gives up.
func Silent(s *mcp.Server) {
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "initialize" || method == "server/discover" {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return next(ctx, method, req)
		}
	})
}

// MalformedText, as a tool's only text content, is made malformed by
// Malformer.
const MalformedText = "@@malformed@@"

// Malformer is the writer of a server's transport that turns the content
// of a tool's answer whose text is MalformedText into a string, which no
// client decodes as a list of content; Rewrite, if set, then rewrites each
// message.
type Malformer struct {
	W       io.WriteCloser
	Rewrite func([]byte) []byte
}

func (m Malformer) Write(p []byte) (int, error) {
	q := bytes.Replace(p, []byte(`[{"type":"text","text":"`+MalformedText+`"}]`), []byte(`"`+MalformedText+`"`), 1)
	if m.Rewrite != nil {
		q = m.Rewrite(q)
	}
	if _, err := m.W.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close closes W.
func (m Malformer) Close() error { return m.W.Close() }
