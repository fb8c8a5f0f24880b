package projection

import "github.com/pegasus-engine/pegasus/fsm"

// appendProgress appends the canonical encoding of p to dst: the bytes
// marshal writes, by hand rather than by reflection, which cost a batched
// task's checkpoint as much as its record (TestEncodeProgressMatchesReflection
// checks the bytes). A field added to Progress or PendingTool must be added
// here too; that test fails until it is.
func appendProgress(dst []byte, p *Progress) []byte {
	w := fsm.NewMapWriter(dst)
	w.Str("task_id", p.TaskID)
	w.Str("state", string(p.State))
	w.Str("description", p.Description)
	w.Strs("completed_steps", p.CompletedSteps)
	w.Strs("next_steps", p.NextSteps)
	w.Strs("tools_used", p.ToolsUsed)
	w.Int("step_count", p.StepCount)
	w.Int("failed_steps", p.FailedSteps)
	w.Int("iteration", p.Iteration)
	if a := p.AwaitingTool; a != nil {
		w.Map("awaiting_tool", func(w *fsm.MapWriter) {
			w.Str("tool", a.Tool)
			w.Int("step_index", a.StepIndex)
			w.Str("tool_call_id", a.ToolCallID)
			w.Str("idempotency_key", a.IdempotencyKey)
			w.Time("since", a.Since)
			w.ULID("event_id", a.EventID)
		})
	}
	w.Bool("complete", p.Complete)
	w.Time("updated_at", p.UpdatedAt)
	return w.Close()
}
