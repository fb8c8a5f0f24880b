package cliconv

import (
	"context"
	"io"

	"github.com/pegasus-engine/pegasus/internal/sse"
)

// SSEEvent is one Server-Sent Event.
type SSEEvent = sse.Event

// ReadSSE reads Server-Sent Events from r and calls fn for each (sse.Read).
func ReadSSE(ctx context.Context, r io.Reader, maxLine int, fn func(SSEEvent) error) error {
	return sse.Read(ctx, r, maxLine, fn)
}
