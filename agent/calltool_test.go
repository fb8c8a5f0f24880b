package agent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/toolbench"
)

// misbehaving is a tool that ignores its context until release is closed
// (stuck), or panics.
type misbehaving struct {
	name    string
	release chan struct{}
}

func (m misbehaving) Name() string        { return m.name }
func (m misbehaving) Description() string { return "misbehaves" }
func (m misbehaving) Parameters() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{}}`)
}
func (m misbehaving) Call(context.Context, tools.Call) (string, error) {
	if m.release == nil {
		panic("out of order")
	}
	<-m.release
	return "late", nil
}

// TestToolCallAbandonedOrRecovered: a tool that ignores its context is
// abandoned at the tool timeout, and a tool that panics fails its call;
// either way the task records the failure and goes on.
func TestToolCallAbandonedOrRecovered(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	for _, c := range []struct {
		tool misbehaving
		want string
	}{
		{misbehaving{name: "stuck", release: release}, "tool stuck timed out after 20ms"},
		{misbehaving{name: "panicky"}, "tool panicky panicked: out of order"},
	} {
		t.Run(c.tool.name, func(t *testing.T) {
			h := newHarness(t, Options{Model: toolbench.CallOnce{Tool: c.tool.name, Arguments: "{}"}, Tools: []tools.Tool{c.tool},
				ToolTimeout: 20 * time.Millisecond, DisableReflection: true})
			id := h.submit("call it")
			if task := h.wait(id); task.State != fsm.StateCompleted {
				t.Fatalf("the task is %s", task.State)
			}
			var failed *fsm.ToolCallResultBody
			for _, ev := range h.events(id) {
				if ev.Type == fsm.ToolCallFailed {
					failed = ev.Body.(*fsm.ToolCallResultBody)
				}
			}
			if failed == nil || !strings.Contains(failed.Error, c.want) {
				t.Fatalf("TOOL_CALL_FAILED %+v, want its error to say %q", failed, c.want)
			}
		})
	}
}
