package fsm

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// baseTime is the time of event number 0 in tests; event n happens n
// seconds later. Tests never read a clock.
var baseTime = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

// testID returns a deterministic ULID for event number n.
func testID(n uint64) ulid.ULID {
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(baseTime.Add(time.Duration(n) * time.Second)))
	binary.BigEndian.PutUint64(id[8:], n)
	return id
}

// stepper numbers events and fills their envelopes for one task stream.
type stepper struct {
	n    uint64        // events made so far; also the global sequence
	skew time.Duration // added to every later event's time (@wait=SECONDS)
}

// envelope returns an event of type et for task t: the next stream version,
// the next sequence, a deterministic id and time, and t's stream (the
// event's own id for TASK_CREATED, as the agent does).
func (s *stepper) envelope(t Task, et EventType, body Body) Event {
	s.n++
	ev := Event{
		ID:      testID(s.n),
		Type:    et,
		Time:    baseTime.Add(time.Duration(s.n)*time.Second + s.skew),
		Stream:  t.ID,
		Version: t.Version + 1,
		Seq:     s.n + 100,
		Body:    body,
	}
	if t.ID == "" && (et == TaskCreated || et == MessageReceived || et == WebhookTriggered || et == ScheduleFired || et == DispatchCreated) {
		ev.Stream = ev.ID.String()
	}
	return ev
}

// args is a parsed script line: the event type and key=value pairs.
type args struct {
	et   EventType
	kv   map[string]string
	used map[string]bool
}

func (a *args) str(k, def string) string {
	a.used[k] = true
	if v, ok := a.kv[k]; ok {
		return v
	}
	return def
}

func (a *args) has(k string) bool { a.used[k] = true; _, ok := a.kv[k]; return ok }

func (a *args) num(k string, def int) (int, error) {
	v := a.str(k, "")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %v", k, v, err)
	}
	return n, nil
}

// splitLine splits `TYPE k=v k="quoted v"` into the type and pairs.
func splitLine(line string) (*args, error) {
	a := &args{kv: map[string]string{}, used: map[string]bool{}}
	line = strings.TrimSpace(line)
	i := strings.IndexByte(line, ' ')
	if i < 0 {
		a.et = EventType(line)
		return a, nil
	}
	a.et = EventType(line[:i])
	rest := strings.TrimSpace(line[i+1:])
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("want key=value at %q", rest)
		}
		key := rest[:eq]
		rest = rest[eq+1:]
		var val string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", key, err)
			}
			val, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			sp := strings.IndexByte(rest, ' ')
			if sp < 0 {
				sp = len(rest)
			}
			val = rest[:sp]
			rest = rest[sp:]
		}
		a.kv[key] = val
		rest = strings.TrimSpace(rest)
	}
	return a, nil
}

// parseEvent builds the event a script line describes, for task t.
//
// Envelope overrides, for refusal tests: @version=N, @stream=S,
// @body=none (no body), @body=TYPE (a well-formed body of another type);
// and @wait=SECONDS, which lets that much time pass before this event (and
// so before every later one).
func parseEvent(s *stepper, t Task, line string) (Event, error) {
	a, err := splitLine(line)
	if err != nil {
		return Event{}, err
	}
	if w, err := a.num("@wait", 0); err != nil {
		return Event{}, err
	} else {
		s.skew += time.Duration(w) * time.Second
	}
	var body Body
	switch a.str("@body", "") {
	case "":
		body, err = scriptBody(t, a)
		if err != nil {
			return Event{}, err
		}
	case "none":
	default:
		other := &args{et: EventType(a.str("@body", "")), kv: map[string]string{}, used: map[string]bool{}}
		if body, err = scriptBody(t, other); err != nil {
			return Event{}, err
		}
	}
	ev := s.envelope(t, a.et, body)
	if a.has("@version") {
		v, err := a.num("@version", 0)
		if err != nil {
			return Event{}, err
		}
		ev.Version = uint64(v)
	}
	if a.has("@stream") {
		ev.Stream = a.str("@stream", "")
	}
	for k := range a.kv {
		if !a.used[k] {
			return Event{}, fmt.Errorf("unknown argument %q for %s", k, a.et)
		}
	}
	return ev, nil
}

// scriptBody builds a well-formed body for a.et, which the arguments can
// bend. A step event's step defaults to the current step and its tool to
// that step's tool.
func scriptBody(t Task, a *args) (Body, error) {
	cur := -1
	curTool := ""
	if st := t.Context.Plan.CurrentStep(); st != nil {
		cur, curTool = st.Index, st.Tool()
	}
	step, err := a.num("step", cur)
	if err != nil {
		return nil, err
	}
	ms, err := a.num("ms", 0)
	if err != nil {
		return nil, err
	}
	switch a.et {
	case MessageReceived, WebhookTriggered, ScheduleFired:
		prio, err := a.num("priority", 0)
		if err != nil {
			return nil, err
		}
		in := &Input{Kind: EventType(a.str("kind", string(a.et))), Text: a.str("text", "hello"), Source: a.str("source", "user"),
			Name: a.str("name", ""), TaskType: a.str("type", ""), Priority: prio, ParentTaskID: a.str("parent", "")}
		if m := a.str("machine", ""); m != "" {
			ref, err := scriptMachine(m)
			if err != nil {
				return nil, err
			}
			in.Machine = &ref
		}
		return in, nil
	case TaskCreated:
		prio, err := a.num("priority", 0)
		if err != nil {
			return nil, err
		}
		b := &TaskCreatedBody{TaskType: a.str("type", "general"), InputText: a.str("text", "find papers on event sourcing"), Source: a.str("source", "user"),
			Priority: prio, ParentTaskID: a.str("parent", "")}
		if m := a.str("machine", ""); m != "" {
			if b.Machine, err = scriptMachine(m); err != nil {
				return nil, err
			}
		} else if t.State == StateIdle {
			b.Machine = t.Machine // as the agent does: the input chose it
		}
		if md := a.str("meta", ""); md != "" {
			b.Metadata = map[string]string{}
			for _, p := range strings.Split(md, ",") {
				k, v, _ := strings.Cut(p, ":")
				b.Metadata[k] = v
			}
		}
		return b, nil
	case ReasonDone:
		plan, err := scriptPlan(a)
		if err != nil {
			return nil, err
		}
		text := a.str("text", "I will do it")
		msg := Message{Role: "assistant", Content: text}
		for _, s := range plan.Steps {
			if s.ActionType == ActionToolCall {
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: s.ActionParams["tool_call_id"], Name: s.Tool(), Arguments: "{}"})
			}
		}
		return &ReasonDoneBody{
			Reasoning:   Reasoning{Text: text, ToolCalls: msg.ToolCalls},
			Plan:        plan,
			NewMessages: []Message{msg},
		}, nil
	case NeedMoreInfo:
		q := a.str("question", "which year?")
		return &NeedMoreInfoBody{
			Reasoning:   Reasoning{Text: q, NeedsClarification: true, Question: q},
			NewMessages: []Message{{Role: "assistant", Content: q}},
		}, nil
	case ToolCallStarted:
		return &ToolCallStartedBody{StepIndex: step, Tool: a.str("tool", curTool), IdempotencyKey: a.str("key", fmt.Sprintf("k%d", step)),
			Source: a.str("source", ""), Task: a.str("task", ""), Handle: a.str("handle", "")}, nil
	case ToolCallCompleted, ToolCallFailed:
		b := &ToolCallResultBody{StepIndex: step, Tool: a.str("tool", curTool), DurationMS: int64(ms), ToolCallID: fmt.Sprintf("call_%d", step),
			Source: a.str("source", ""), Task: a.str("task", "")}
		content := ""
		if a.et == ToolCallCompleted {
			b.Result = a.str("result", "ok")
			content = b.Result
		} else {
			b.Error = a.str("error", "timeout")
			content = "error: " + b.Error
		}
		if a.has("error") && a.et == ToolCallCompleted {
			b.Error = a.str("error", "") // a body that disagrees with its envelope
		}
		b.NewMessages = []Message{{Role: "tool", Content: content, ToolCallID: b.ToolCallID}}
		return b, nil
	case StepCompleted:
		return &StepCompletedBody{StepIndex: step, Result: a.str("result", "done")}, nil
	case TaskSuspended:
		return &TaskSuspendedBody{Reason: a.str("reason", "operator pause")}, nil
	case TaskResumed:
		return &TaskResumedBody{Reason: a.str("reason", "")}, nil
	case TaskFailed:
		return &TaskFailedBody{Error: a.str("error", "boom"), Reason: a.str("reason", "model_error")}, nil
	case TaskCompleted:
		return &TaskCompletedBody{Result: a.str("result", "final answer")}, nil
	case ReflectionComplete:
		n, err := a.num("facts", 1)
		if err != nil {
			return nil, err
		}
		r := PostTaskReflection{Assessment: a.str("assessment", "went well"), ToolCallsCount: n}
		for i := range n {
			r.Facts = append(r.Facts, Fact{Path: fmt.Sprintf("facts/%d.md", i), Content: "fact"})
		}
		if ep := a.str("episode", ""); ep != "" {
			r.Episode = &Episode{Title: ep, Lesson: a.str("lesson", "")}
		}
		return &ReflectionCompleteBody{Reflection: r}, nil
	case TaskNotify:
		return &TaskNotifyBody{Message: a.str("message", "working on it")}, nil
	case BudgetExceeded:
		return &BudgetExceededBody{Budget: a.str("budget", BudgetKey), Key: a.str("key", "acme"), Window: "2026-11-26", Model: "test-model",
			MaxCost: 0.5, SpentCost: 0.49, SpentTokens: 4900, ReservedCost: 0.02, ReservedTokens: 200, Policy: a.str("policy", BudgetSuspend)}, nil
	case ModelCalled:
		return &ModelCalledBody{Purpose: a.str("purpose", "reason"), Attempt: 1, Model: "test-model", LatencyMS: int64(ms), PromptTokens: 100, CompletionTokens: 20, Status: 200, FinishReason: "stop"}, nil

	// Version 0.
	case PerceiveDone:
		text := a.str("text", "the user wants papers")
		return &PerceiveDoneBody{Perception: Perception{Text: text, Model: "test-model"},
			NewMessages: []Message{{Role: "user", Content: t.Context.InputText}}}, nil
	case ThinkDone:
		text := a.str("text", "search, then summarise")
		return &ThinkDoneBody{Reasoning: Reasoning{Text: text}, NewMessages: []Message{{Role: "assistant", Content: text}}}, nil
	case PlanDone:
		plan, err := scriptPlan(a)
		if err != nil {
			return nil, err
		}
		return &PlanDoneBody{Plan: plan}, nil
	case ActDone:
		child := ""
		if pc := t.Context.PendingSubTask; pc != nil {
			child = pc.TaskID
		}
		return &ActDoneBody{StepIndex: step, Result: a.str("result", "done"), Error: a.str("error", ""), SubTask: a.str("sub", child)}, nil
	case ReflectDone:
		r := Reflection{Verdict: a.str("verdict", VerdictComplete), Assessment: a.str("assessment", "good enough"), NextFocus: a.str("next", "")}
		if l := a.str("lessons", ""); l != "" {
			r.Lessons = strings.Split(l, ",")
		}
		return &ReflectDoneBody{Reflection: r}, nil
	case SubTaskCreated:
		return &SubTaskCreatedBody{StepIndex: step, TaskID: a.str("task", "child-1"), Input: a.str("input", "sub question")}, nil
	}
	return dispatchScriptBody(t, a) // nil for an unknown type: no body
}

// scriptMachine reads machine=NAME/VERSION.
func scriptMachine(m string) (MachineRef, error) {
	name, ver, _ := strings.Cut(m, "/")
	v, err := strconv.Atoi(ver)
	if err != nil {
		return MachineRef{}, fmt.Errorf("machine=%q: want name/version", m)
	}
	return MachineRef{Name: name, Version: v}, nil
}

// scriptPlan parses plan=KIND[:TOOL][+],... (+ marks a step completed) and
// indices=i,j,... (overrides the step indices).
func scriptPlan(a *args) (Plan, error) {
	p := Plan{Goal: a.str("goal", "answer the user"), Reasoning: "because"}
	def := "respond"
	if a.et == PlanDone {
		def = "generate"
	}
	spec := a.str("plan", def)
	if spec != "" {
		for i, f := range strings.Split(spec, ",") {
			s := PlanStep{Index: i}
			if strings.HasSuffix(f, "+") {
				s.Completed = true
				f = strings.TrimSuffix(f, "+")
			}
			kind, tool, hasTool := strings.Cut(f, ":")
			s.ActionType = ActionType(kind)
			s.Description = kind
			switch {
			case hasTool:
				s.ActionParams = map[string]string{"tool": tool, "arguments": "{}", "tool_call_id": fmt.Sprintf("call_%d", i)}
				s.Description = "call " + tool
			case s.ActionType == ActionSubTask:
				s.ActionParams = map[string]string{"input": "sub question"}
			}
			p.Steps = append(p.Steps, s)
		}
	}
	if idx := a.str("indices", ""); idx != "" {
		for i, f := range strings.Split(idx, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || i >= len(p.Steps) {
				return p, fmt.Errorf("indices=%q", idx)
			}
			p.Steps[i].Index = n
		}
	}
	return p, nil
}

// checkHistory says what is inconsistent between t's History and State, or
// "".
func checkHistory(t Task) string {
	if t.Dispatch != nil {
		return checkDispatchHistory(t)
	}
	if len(t.History) == 0 {
		if t.State != "" && t.State != StateIdle {
			return fmt.Sprintf("state %s with no history", t.State)
		}
		return ""
	}
	if h := t.History[0]; h.From != StateIdle || (h.Event != TaskCreated && h.Event != TaskFailed) {
		return fmt.Sprintf("history starts with %+v", t.History[0])
	}
	for i := 1; i < len(t.History); i++ {
		if t.History[i].From != t.History[i-1].To {
			return fmt.Sprintf("history[%d].From=%s, previous To=%s", i, t.History[i].From, t.History[i-1].To)
		}
		if t.History[i-1].To.IsTerminal() {
			return fmt.Sprintf("history leaves terminal state %s at %d", t.History[i-1].To, i)
		}
	}
	if last := t.History[len(t.History)-1]; last.To != t.State {
		return fmt.Sprintf("history ends in %s, state is %s", last.To, t.State)
	}
	return ""
}
