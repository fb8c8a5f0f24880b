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
		r := c.Reasoning.clone()
		n.Reasoning = &r
	}
	if c.Plan != nil {
		p := c.Plan.clone()
		n.Plan = &p
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

func (r Reasoning) clone() Reasoning {
	r.ToolCalls = cloneSlice(r.ToolCalls)
	return r
}

// clone copies the plan and its steps, sharing nothing with p.
func (p Plan) clone() Plan {
	if p.Steps != nil {
		steps := make([]PlanStep, len(p.Steps))
		for i, s := range p.Steps {
			s.ActionParams = cloneMap(s.ActionParams)
			steps[i] = s
		}
		p.Steps = steps
	}
	return p
}

func (r PostTaskReflection) clone() PostTaskReflection {
	r.Facts = cloneSlice(r.Facts)
	if r.Episode != nil {
		e := *r.Episode
		r.Episode = &e
	}
	return r
}

func cloneMessages(ms []Message) []Message {
	if ms == nil {
		return nil
	}
	out := make([]Message, len(ms))
	for i, m := range ms {
		m.ToolCalls = cloneSlice(m.ToolCalls)
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
