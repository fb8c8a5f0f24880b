package fsm

// Clone returns a deep copy of t that shares no memory with it. Apply reuses
// the backing arrays of the task it is given (append semantics), so a caller
// that applies different events to the same task (a fork, a what-if) clones
// first; a plain fold never needs to.
func (t Task) Clone() Task {
	c := t
	c.Metadata = cloneMap(t.Metadata)
	c.History = cloneSlice(t.History)
	c.Context = t.Context.clone()
	return c
}

// Fork returns a copy of t to apply other events to while t itself is
// extended too: a prediction, a what-if. It copies no memory: it shares
// t's strings, maps, plan, reasoning and the elements of its slices,
// which Apply never writes (it replaces them, and copies a plan before it
// marks a step), and its slices end at their length, so that the first
// append to a slice of either task takes a new array. A caller that
// writes into a task's maps or elements itself clones instead.
func (t Task) Fork() Task {
	f := t
	f.History = capped(t.History)
	f.Context.ActionsDone = capped(t.Context.ActionsDone)
	f.Context.Reflections = capped(t.Context.Reflections)
	f.Context.Messages = capped(t.Context.Messages)
	return f
}

// capped returns s with no room to append in place.
func capped[T any](s []T) []T { return s[:len(s):len(s)] }

func (c Context) clone() Context {
	n := c
	n.InputMetadata = cloneMap(c.InputMetadata)
	if c.Reasoning != nil {
		n.Reasoning = c.Reasoning.clonePtr()
	}
	if c.Plan != nil {
		n.Plan = c.Plan.clonePtr()
	}
	n.ActionsDone = cloneSlice(c.ActionsDone)
	n.Reflections = cloneSlice(c.Reflections)
	if c.PostReflection != nil {
		r := c.PostReflection.clone()
		n.PostReflection = &r
	}
	if c.PendingCall != nil {
		p := *c.PendingCall
		n.PendingCall = &p
	}
	n.Messages = cloneMessages(c.Messages)
	return n
}

// clonePtr returns a copy of *r, with its tool calls in the same
// allocation when they are few.
func (r *Reasoning) clonePtr() *Reasoning {
	var c *Reasoning
	var calls []ToolCall
	switch n := len(r.ToolCalls); {
	case n == 0:
		c = new(Reasoning)
	case n <= 2:
		x := new(struct {
			r Reasoning
			c [2]ToolCall
		})
		c, calls = &x.r, x.c[:0:n]
	default:
		c, calls = new(Reasoning), make([]ToolCall, 0, n)
	}
	*c = *r
	if len(r.ToolCalls) > 0 {
		c.ToolCalls = append(calls, r.ToolCalls...)
	} else if r.ToolCalls != nil {
		c.ToolCalls = r.ToolCalls[:0:0] // empty, not nil, as it was
	}
	return c
}

// clonePtr returns a copy of *p, its steps in the same allocation
// (copyPlan) and their parameter maps copied.
func (p *Plan) clonePtr() *Plan {
	c := copyPlan(p)
	if p.Steps == nil {
		c.Steps = nil
	}
	for i := range c.Steps {
		c.Steps[i].ActionParams = cloneMap(c.Steps[i].ActionParams)
	}
	return c
}

func (r PostTaskReflection) clone() PostTaskReflection {
	r.Facts = cloneSlice(r.Facts)
	if r.Episode != nil {
		e := *r.Episode
		r.Episode = &e
	}
	return r
}

// cloneMessages copies ms and their tool calls, all the tool calls in one
// array.
func cloneMessages(ms []Message) []Message {
	if ms == nil {
		return nil
	}
	out := make([]Message, len(ms))
	calls := 0
	for i := range ms {
		calls += len(ms[i].ToolCalls)
	}
	var all []ToolCall
	if calls > 0 {
		all = make([]ToolCall, 0, calls)
	}
	for i, m := range ms {
		if len(m.ToolCalls) > 0 {
			at := len(all)
			all = append(all, m.ToolCalls...)
			m.ToolCalls = all[at:len(all):len(all)]
		} else if m.ToolCalls != nil {
			m.ToolCalls = m.ToolCalls[:0:0] // empty, not nil, as it was
		}
		out[i] = m
	}
	return out
}

// cloneSlice copies a slice of values without pointers; nil stays nil.
func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
