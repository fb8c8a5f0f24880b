package projection

import "github.com/pegasus-engine/pegasus/fsm"

// Memory accounting. The replay layer bounds what a View holds by bytes
// (replay.Options.MemoryBudget), so the Set keeps an estimate of the bytes
// behind every task it holds in memory. The estimate counts what grows with
// the input: every string's bytes, every slice element and map entry, plus
// a fixed cost per struct. It is an estimate of the live heap, within a
// small factor of what the Go runtime reports, and is deterministic: the
// same task always has the same size, so checkpoint triggers do not depend
// on the allocator.

// Fixed costs, in bytes, of the structures a task is made of (their header
// words, times and ids on a 64-bit platform, rounded up to a size class).
const (
	sizeTask       = 640 // fsm.Task with its Context, inline
	sizeSlot       = 256 // the Registry's slot (task copy and Progress header) and its map entry
	sizeProgress   = 160
	sizeTransition = 80
	sizeMessage    = 112
	sizeToolCall   = 48
	sizeStep       = 96
	sizeAction     = 128
	sizeMapEntry   = 48
	sizePointer    = 64 // a small struct behind a pointer, besides its strings
)

// TaskBytes estimates the memory held by a task.
func TaskBytes(t *fsm.Task) int64 { return taskBytesButPlan(t) + planBytes(t.Context.Plan) }

// planBytes estimates the memory held by a plan (nil: none).
func planBytes(p *fsm.Plan) int64 {
	if p == nil {
		return 0
	}
	n := sizePointer + int64(len(p.Goal)+len(p.Reasoning))
	for i := range p.Steps {
		n += sizeStep + int64(len(p.Steps[i].Description)) + mapBytes(p.Steps[i].ActionParams)
	}
	return n
}

// taskBytesButPlan is TaskBytes without the plan's.
func taskBytesButPlan(t *fsm.Task) int64 {
	n := int64(sizeTask + len(t.ID) + len(t.Type) + len(t.Machine.Name))
	n += mapBytes(t.Metadata)
	n += int64(len(t.History)) * sizeTransition
	c := &t.Context
	n += int64(len(c.InputText)+len(c.Source)+len(c.FinalResult)+len(c.Error)+len(c.SuspendReason)) + mapBytes(c.InputMetadata)
	if r := c.Reasoning; r != nil {
		n += sizePointer + int64(len(r.Text)+len(r.Question)+len(r.Model)) + toolCallsBytes(r.ToolCalls)
	}
	for i := range c.ActionsDone {
		a := &c.ActionsDone[i]
		n += sizeAction + int64(len(a.Tool)+len(a.Result)+len(a.Error))
	}
	for i := range c.Reflections {
		n += sizeMapEntry + int64(len(c.Reflections[i].Verdict)+len(c.Reflections[i].Assessment))
	}
	if r := c.PostReflection; r != nil {
		n += sizePointer + int64(len(r.Assessment))
		for _, f := range r.Facts {
			n += sizeMapEntry + int64(len(f.Path)+len(f.Content))
		}
		if e := r.Episode; e != nil {
			n += sizePointer + int64(len(e.Title)+len(e.Summary)+len(e.Details)+len(e.Lesson))
		}
	}
	if pc := c.PendingCall; pc != nil {
		n += sizePointer + int64(len(pc.Tool)+len(pc.ToolCallID)+len(pc.Arguments)+len(pc.IdempotencyKey))
	}
	for i := range c.Messages {
		m := &c.Messages[i]
		n += sizeMessage + int64(len(m.Role)+len(m.Content)+len(m.Name)+len(m.ToolCallID)) + toolCallsBytes(m.ToolCalls)
	}
	return n
}

// progressBytes estimates the memory held by a progress view.
func progressBytes(p *Progress) int64 {
	n := int64(sizeProgress + len(p.TaskID) + len(p.Description))
	for _, l := range [][]string{p.CompletedSteps, p.NextSteps, p.ToolsUsed} {
		for _, s := range l {
			n += 16 + int64(len(s))
		}
	}
	if a := p.AwaitingTool; a != nil {
		n += sizePointer + int64(len(a.Tool)+len(a.ToolCallID)+len(a.IdempotencyKey))
	}
	return n
}

// slotBytes estimates the memory held by one task in the registry.
//
// A plan is never changed once a task holds it (fsm.Apply copies the one
// it changes), so its estimate is kept with the slot and computed again
// only for another plan: most events leave the plan as it was, and its
// steps' parameter maps were most of the cost of the estimate.
func slotBytes(sl *slot) int64 {
	if p := sl.task.Context.Plan; p != sl.planOf {
		sl.planOf, sl.planBytes = p, planBytes(p)
	}
	n := sizeSlot + taskBytesButPlan(&sl.task) + sl.planBytes
	if sl.hasProg {
		n += progressBytes(&sl.progress)
	}
	return n
}

// factBytes and episodeBytes estimate long-term memory entries.
func factBytes(f *Fact) int64 { return sizeMapEntry + 64 + int64(2*len(f.Path)+len(f.Content)) }

func episodeBytes(e *Episode) int64 {
	return sizePointer + 64 + int64(len(e.Title)+len(e.Summary)+len(e.Details)+len(e.Lesson)+len(e.TaskID))
}

func toolCallsBytes(tcs []fsm.ToolCall) int64 {
	var n int64
	for i := range tcs {
		n += sizeToolCall + int64(len(tcs[i].ID)+len(tcs[i].Name)+len(tcs[i].Arguments))
	}
	return n
}

func mapBytes(m map[string]string) int64 {
	if len(m) == 0 {
		return 0 // most are: no iterator to start
	}
	var n int64
	for k, v := range m {
		n += sizeMapEntry + int64(len(k)+len(v))
	}
	return n
}
