package mcp

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAwaitTool: AwaitTool returns once a starting server listed its
// tools (a call a restarted daemon resumes finds its tool instead of
// failing as unknown), once a server that never answers initialize is
// down, and at once for a name no server prefixes.
func TestAwaitTool(t *testing.T) {
	mute := goServer("mute", modeSilent, nil)
	mute.InitTimeout = 300 * time.Millisecond // the server's own, not the manager's 20s
	// No restart while the test reads the down server's state: a
	// restart after the usual 50 ms would make it "starting" again, which
	// a busy machine shows between AwaitTool's return and the check.
	opts := testOptions()
	opts.MinBackoff, opts.MaxBackoff = time.Hour, time.Hour
	m := start(t, opts, goServer("fast", modeTools, nil), mute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := m.AwaitTool(ctx, "other__pid"); err != nil {
		t.Fatal(err)
	}
	if err := m.AwaitTool(ctx, "fast__pid"); err != nil {
		t.Fatal(err)
	}
	if _, err := call(ctx, findTool(t, m, "fast__pid"), "k", `{}`); err != nil {
		t.Fatal(err)
	}
	err := m.AwaitTool(ctx, "mute__anything")
	if s := status(m, "mute"); ctx.Err() != nil || s.State != StateDown || s.Error != "no answer to initialize within 300ms" {
		t.Fatalf("mute: %+v, %v", s, ctx.Err())
	}
	if !errors.Is(err, ErrServerDown) || err.Error() != `mcp: server is not ready: server "mute" is down: no answer to initialize within 300ms` {
		t.Errorf("AwaitTool: %v", err)
	}
}
