package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

// wireCalls returns how many tools/call requests the server's current
// session sent.
func wireCalls(t *testing.T, m *Manager, name string) int {
	for _, s := range m.servers {
		if s.cfg.Name == name {
			sess, err := s.current()
			if err != nil {
				t.Fatal(err)
			}
			sess.tasks.mu.Lock()
			defer sess.tasks.mu.Unlock()
			return sess.tasks.calls
		}
	}
	t.Fatalf("no server %s", name)
	return 0
}

// TestEverythingTask calls server-everything's simulate-research-query,
// whose execution.taskSupport is "required" (MCP tasks of revision
// 2025-11-25): the call records the task handle, polls tasks/get and
// fetches tasks/result. Then a call that stopped after recording its handle
// is resumed from the handle, without a second tools/call.
func TestEverythingTask(t *testing.T) {
	m := start(t, testOptions(), everythingStdio(t, "everything"))
	waitReady(t, m, "everything")
	eventually(t, "the task tool", func() bool {
		for _, tl := range m.Tools() {
			if tl.Name() == "everything__simulate-research-query" {
				return true
			}
		}
		return false
	})
	tl := findTool(t, m, "everything__simulate-research-query")

	var handles []string
	record := func(_ context.Context, h string) error { handles = append(handles, h); return nil }
	r, err := tl.CallParts(context.Background(), tools.Call{IdempotencyKey: "k1",
		Arguments: json.RawMessage(`{"topic":"durable execution"}`), RecordHandle: record})
	if err != nil {
		t.Fatal(err)
	}
	if len(handles) != 1 || handles[0] == "" {
		t.Fatalf("handles recorded: %q", handles)
	}
	if !strings.Contains(r.Text, "# Research Report: durable execution") {
		t.Fatalf("result: %q", r.Text)
	}

	// The daemon "dies" right after recording the handle: the call is
	// never heard of again (a cancelled context would cancel the task).
	recorded, dead := make(chan string, 1), make(chan struct{})
	t.Cleanup(func() { close(dead) })
	go func() {
		_, _ = tl.CallParts(context.Background(), tools.Call{IdempotencyKey: "k2", Arguments: json.RawMessage(`{"topic":"replay"}`),
			RecordHandle: func(_ context.Context, h string) error { recorded <- h; <-dead; return errors.New("dead") }})
	}()
	var handle string
	select {
	case handle = <-recorded:
	case <-time.After(30 * time.Second):
		t.Fatal("no handle recorded")
	}
	before := wireCalls(t, m, "everything")
	r, err = tl.CallParts(context.Background(), tools.Call{IdempotencyKey: "k2", Arguments: json.RawMessage(`{"topic":"replay"}`),
		Handle: handle, RecordHandle: func(context.Context, string) error {
			t.Error("a resumed call recorded a new handle")
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Text, "# Research Report: replay") {
		t.Fatalf("resumed result: %q", r.Text)
	}
	if after := wireCalls(t, m, "everything"); after != before {
		t.Errorf("resuming sent %d tools/call", after-before)
	}

	// A handle the server does not know fails clearly and runs nothing.
	_, err = tl.CallParts(context.Background(), tools.Call{IdempotencyKey: "k3", Handle: "no-such-task"})
	if !errors.Is(err, ErrTask) || !strings.Contains(err.Error(), "does not know task no-such-task") {
		t.Fatalf("unknown handle: %v", err)
	}
}
