package broker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/tools"
)

// ToolCall is the dispatch task of a worker tool's call as the agent asks
// for it (agent.Delegation is the same type).
type ToolCall = tools.WorkerCall

// ToolSource is the source of the dispatch tasks that run the agent's
// worker tool calls.
const ToolSource = "tool"

// The metadata keys of a worker tool call's dispatch task.
const (
	MetaTool           = "tool"            // the tool's name
	MetaArguments      = "arguments"       // the call's arguments, a JSON object
	MetaIdempotencyKey = "idempotency_key" // the call's idempotency key
)

// CreateToolTask creates the dispatch task of a worker tool's call (what
// agent.Options.Delegate asks for): with id d.Child, parent_task_id d.Parent,
// caused by d.Cause (the call's TOOL_CALL_STARTED), requiring the tool's
// capability, with its timeout, retries and heartbeat (the broker's
// defaults when zero), the arguments as its description and in its
// metadata with the tool's name and the idempotency key. The rules of
// Create apply (createdBody). It is idempotent: a task with the id, or
// another child of the parent with the key, makes it create nothing.
// Deadlines, retries, heartbeats and the dead-letter queue are the
// broker's, as for any task.
func (b *Broker) CreateToolTask(ctx context.Context, d ToolCall) error {
	id, err := ulid.ParseStrict(d.Child)
	if err != nil {
		return fmt.Errorf("%w: tool task id %q: %v", ErrInvalid, d.Child, err)
	}
	if d.Tool == nil {
		return fmt.Errorf("%w: a tool task names its tool", ErrInvalid)
	}
	if _, err := b.tasks.Task(d.Child); err == nil {
		return nil
	}
	if d.Key != "" {
		for _, c := range b.children.of(d.Parent) {
			if t, err := b.tasks.Task(c); err == nil && t.Metadata[MetaIdempotencyKey] == d.Key {
				return nil
			}
		}
	}
	args := d.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	name, _ := json.Marshal(d.Tool.Name())
	key, _ := json.Marshal(d.Key)
	req := CreateRequest{
		AgentID: AgentWorkerID, Title: "tool " + d.Tool.Name(), Description: string(args),
		RequiredCapabilities: []string{d.Tool.Capability}, Source: ToolSource, ParentTaskID: d.Parent,
		HeartbeatSeconds: d.Tool.HeartbeatSeconds,
		Metadata:         map[string]json.RawMessage{MetaTool: name, MetaArguments: args, MetaIdempotencyKey: key},
	}
	if d.Tool.TimeoutSeconds > 0 {
		req.TimeoutSeconds = &d.Tool.TimeoutSeconds
	}
	if d.Tool.MaxRetries > 0 {
		req.MaxRetries = &d.Tool.MaxRetries
	}
	body, err := createdBody(id, &req)
	if err != nil {
		return err
	}
	_, err = b.create(ctx, id, body, d.Cause, d.Correlation)
	return err
}
