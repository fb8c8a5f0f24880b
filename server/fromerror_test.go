package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestFromErrorFenced: an append refused because this node lost the
// partition (cluster.ErrFenced, which wraps eventlog.ErrConflict) is a
// 503 the client retries with its key, not a 409 that tells it the task
// changed; a plain conflict stays a 409.
func TestFromErrorFenced(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), base: context.Background()}
	fenced := fmt.Errorf("append: %w (%w)", eventlog.ErrConflict, cluster.ErrFenced)
	if e := s.fromError(fenced); e.status != http.StatusServiceUnavailable || e.Code != codeClusterBusy {
		t.Errorf("fenced: %d %s, want 503 %s", e.status, e.Code, codeClusterBusy)
	}
	if e := s.fromError(fmt.Errorf("append: %w", eventlog.ErrConflict)); e.status != http.StatusConflict {
		t.Errorf("conflict: %d %s, want 409", e.status, e.Code)
	}
}
