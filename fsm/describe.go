package fsm

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// maxText is how many runes of a free text Describe and DescribeEvent show
// before cutting it with "…". Texts are quoted, so each stays on one line.
const maxText = 72

// Describe renders a task as stable, human-readable lines: its summary
// (DescribeSummary), then reasoning, plan (with [x] for completed steps and
// [>] for the current one), actions, messages, pending tool call,
// suspension, result, error, reflection, the broker's fields and history.
// Empty sections are left out. The same input gives the same text; every
// command that prints a task (pegasus-replay state, show and fork, pegasusd
// task) prints it, and fsm/testdata scripts compare against it.
func Describe(t Task) string {
	var b strings.Builder
	c := &t.Context
	b.WriteString(DescribeSummary(t))
	if len(c.InputMetadata) > 0 {
		fmt.Fprintf(&b, "input metadata: %s\n", pairs(c.InputMetadata))
	}
	if len(t.Metadata) > 0 {
		fmt.Fprintf(&b, "metadata: %s\n", pairs(t.Metadata))
	}
	if p := c.Perception; p != nil {
		fmt.Fprintf(&b, "perception: %s\n", text(p.Text))
	}
	if r := c.Reasoning; r != nil {
		fmt.Fprintf(&b, "reasoning: %s", text(r.Text))
		if len(r.ToolCalls) > 0 {
			fmt.Fprintf(&b, " tool_calls=%s", toolNames(r.ToolCalls))
		}
		if r.NeedsClarification {
			fmt.Fprintf(&b, " question=%s", text(r.Question))
		}
		b.WriteByte('\n')
	}
	if p := c.Plan; p != nil {
		done := 0
		for _, s := range p.Steps {
			if s.Completed {
				done++
			}
		}
		fmt.Fprintf(&b, "plan: %d/%d done goal=%s\n", done, len(p.Steps), text(p.Goal))
		cur := p.CurrentStep()
		for i := range p.Steps {
			s := &p.Steps[i]
			mark := "[ ]"
			switch {
			case s.Completed:
				mark = "[x]"
			case s == cur:
				mark = "[>]"
			}
			fmt.Fprintf(&b, "  %s %d %s", mark, s.Index, s.ActionType)
			if s.ActionType == ActionToolCall {
				fmt.Fprintf(&b, " %s", orDash(s.Tool()))
			}
			if s.Description != "" {
				fmt.Fprintf(&b, " %s", text(s.Description))
			}
			b.WriteByte('\n')
		}
	}
	if len(c.ActionsDone) > 0 {
		b.WriteString("actions:\n")
		for _, a := range c.ActionsDone {
			fmt.Fprintf(&b, "  %d %s", a.StepIndex, a.ActionType)
			if a.Tool != "" {
				fmt.Fprintf(&b, " %s", a.Tool)
			}
			if a.Success {
				b.WriteString(" ok")
			} else {
				b.WriteString(" failed")
			}
			if a.DurationMS != 0 {
				fmt.Fprintf(&b, " %dms", a.DurationMS)
			}
			if a.Result != "" {
				fmt.Fprintf(&b, " result=%s", text(a.Result))
			}
			if a.Error != "" {
				fmt.Fprintf(&b, " error=%s", textN(a.Error, maxErrorText))
			}
			b.WriteByte('\n')
		}
	}
	if len(c.Messages) > 0 {
		b.WriteString("messages:\n")
		for _, m := range c.Messages {
			fmt.Fprintf(&b, "  %s", orDash(m.Role))
			if m.ToolCallID != "" {
				fmt.Fprintf(&b, "(%s)", m.ToolCallID)
			}
			fmt.Fprintf(&b, ": %s", text(m.Content))
			if len(m.ToolCalls) > 0 {
				fmt.Fprintf(&b, " tool_calls=%s", toolNames(m.ToolCalls))
			}
			b.WriteByte('\n')
		}
	}
	if ps := c.PendingSubTask; ps != nil {
		fmt.Fprintf(&b, "pending sub task: step=%d task=%s\n", ps.StepIndex, orDash(ps.TaskID))
	}
	if len(c.Reflections) > 0 {
		b.WriteString("reflections:\n")
		for _, r := range c.Reflections {
			fmt.Fprintf(&b, "  %s %s", orDash(r.Verdict), text(r.Assessment))
			if len(r.Lessons) > 0 {
				fmt.Fprintf(&b, " lessons=%d", len(r.Lessons))
			}
			if r.NextFocus != "" {
				fmt.Fprintf(&b, " next=%s", text(r.NextFocus))
			}
			b.WriteByte('\n')
		}
	}
	if pc := c.PendingCall; pc != nil {
		fmt.Fprintf(&b, "pending call: step=%d tool=%s key=%s", pc.StepIndex, orDash(pc.Tool), orDash(pc.IdempotencyKey))
		callPlace(&b, pc.Source, pc.Task, pc.Handle)
		b.WriteByte('\n')
	}
	if c.SuspendedState != "" || c.SuspendReason != "" {
		fmt.Fprintf(&b, "suspended: from=%s reason=%s\n", orDash(string(c.SuspendedState)), text(c.SuspendReason))
	}
	if c.ResultRecorded || c.FinalResult != "" {
		fmt.Fprintf(&b, "result: %s\n", text(c.FinalResult))
	}
	if c.Error != "" {
		fmt.Fprintf(&b, "error: %s\n", text(c.Error))
	}
	if r := c.PostReflection; r != nil {
		fmt.Fprintf(&b, "reflection: %s facts=%d tool_calls=%d", text(r.Assessment), len(r.Facts), r.ToolCallsCount)
		if r.Episode != nil {
			fmt.Fprintf(&b, " episode=%s", text(r.Episode.Title))
			if r.Episode.Lesson != "" {
				fmt.Fprintf(&b, " lesson=%s", text(r.Episode.Lesson))
			}
		}
		b.WriteByte('\n')
	}
	if t.Dispatch != nil {
		describeDispatch(&b, t.Dispatch)
	}
	if len(t.History) > 0 {
		b.WriteString("history:\n")
		for _, h := range t.History {
			fmt.Fprintf(&b, "  %s\n", DescribeTransition(h))
		}
	}
	return b.String()
}

// DescribeSummary renders the first lines of Describe: identity (id,
// machine as NAME@VERSION, type, priority, parent), state, times and
// input. A timeline (pegasus-replay show) heads its events with it.
func DescribeSummary(t Task) string {
	var b strings.Builder
	c := &t.Context
	state := t.State
	if state == "" {
		state = StateIdle
	}
	fmt.Fprintf(&b, "task %s machine=%s", orDash(t.ID), machineText(t.Machine))
	if t.Type != "" {
		fmt.Fprintf(&b, " type=%s", t.Type)
	}
	fmt.Fprintf(&b, " priority=%d", t.Priority)
	if t.ParentID != "" {
		fmt.Fprintf(&b, " parent=%s", t.ParentID)
	}
	if t.ConcurrencyKey != "" {
		fmt.Fprintf(&b, " key=%s", t.ConcurrencyKey)
	}
	b.WriteByte('\n')
	fmt.Fprintf(&b, "state=%s iteration=%d version=%d seq=%d\n", state, c.Iteration, t.Version, t.Seq)
	if !t.CreatedAt.IsZero() || !t.UpdatedAt.IsZero() {
		fmt.Fprintf(&b, "created=%s updated=%s\n", stamp(t.CreatedAt), stamp(t.UpdatedAt))
	}
	if c.InputText != "" || c.Source != "" {
		fmt.Fprintf(&b, "input: %s source=%s\n", text(c.InputText), orDash(c.Source))
	}
	return b.String()
}

// DescribeTransition renders one transition of a task's history as
// Describe does, without indentation: "reasoning -(REASON_DONE)-> acting".
func DescribeTransition(h Transition) string {
	return fmt.Sprintf("%s -(%s)-> %s", h.From, h.Event, h.To)
}

// machineText is a machine as NAME@VERSION (MachineRef.String), the one
// spelling of the API, the logs and the CLIs; "-" when unnamed.
func machineText(m MachineRef) string {
	if m.Name == "" {
		return "-"
	}
	return m.String()
}

// DescribeEvent renders an event as one line: its type and what its body
// says that matters when reading a log (tool and outcome, error, plan size,
// tokens, reason). Envelope fields other than the type (sequence, stream,
// time) are left to the caller's columns.
func DescribeEvent(ev Event) string {
	var b strings.Builder
	b.WriteString(string(ev.Type))
	if ev.Body == nil || isNilBody(ev.Body) {
		b.WriteString(" (no body)")
		return b.String()
	}
	w := func(format string, args ...any) { fmt.Fprintf(&b, " "+format, args...) }
	switch x := ev.Body.(type) {
	case *Input:
		w("text=%s source=%s", text(x.Text), orDash(x.Source))
		if x.Name != "" {
			w("name=%s", x.Name)
		}
		if x.TaskType != "" {
			w("task_type=%s", x.TaskType)
		}
		if x.Machine != nil {
			w("machine=%s", machineText(*x.Machine))
		}
		if x.ParentTaskID != "" {
			w("parent=%s", x.ParentTaskID)
		}
	case *TaskCreatedBody:
		m := x.Machine
		if m == (MachineRef{}) {
			m = CurrentMachine
		}
		w("machine=%s", machineText(m))
		if x.ParentTaskID != "" {
			w("parent=%s", x.ParentTaskID)
		}
		if x.TaskType != "" {
			w("type=%s", x.TaskType)
		}
		if x.TypeVersion != "" {
			w("type_version=%s", x.TypeVersion)
		}
		if x.Model != "" {
			w("model=%s", x.Model)
		}
		w("source=%s input=%s", orDash(x.Source), text(x.InputText))
	case *ReasonDoneBody:
		w("%s", planSummary(&x.Plan))
		if len(x.NewMessages) > 0 {
			w("messages=+%d", len(x.NewMessages))
		}
	case *PlanDoneBody:
		w("%s", planSummary(&x.Plan))
	case *PerceiveDoneBody:
		w("perception=%s", text(x.Perception.Text))
	case *ThinkDoneBody:
		w("reasoning=%s", text(x.Reasoning.Text))
	case *ActDoneBody:
		w("step=%d", x.StepIndex)
		if x.SubTask != "" {
			w("sub_task=%s", x.SubTask)
		}
		if x.Error != "" {
			w("failed error=%s", text(x.Error))
		} else {
			w("result=%s", text(x.Result))
		}
	case *ReflectDoneBody:
		w("verdict=%s assessment=%s", orDash(x.Reflection.Verdict), text(x.Reflection.Assessment))
	case *SubTaskCreatedBody:
		w("step=%d task=%s input=%s", x.StepIndex, orDash(x.TaskID), text(x.Input))
	case *NeedMoreInfoBody:
		w("question=%s", text(x.Reasoning.Question))
	case *ToolCallStartedBody:
		w("step=%d tool=%s key=%s", x.StepIndex, orDash(x.Tool), orDash(x.IdempotencyKey))
		callPlace(&b, x.Source, x.Task, x.Handle)
	case *ToolCallResultBody:
		w("step=%d tool=%s", x.StepIndex, orDash(x.Tool))
		callPlace(&b, x.Source, x.Task, "")
		if x.Error == "" {
			w("ok %dms result=%s", x.DurationMS, text(x.Result))
		} else {
			w("failed %dms error=%s", x.DurationMS, textN(x.Error, maxErrorText))
		}
		if len(x.Parts) > 0 {
			w("parts=%s", partsText(x.Parts))
		}
	case *StepCompletedBody:
		w("step=%d result=%s", x.StepIndex, text(x.Result))
	case *TaskSuspendedBody:
		w("reason=%s", text(x.Reason))
	case *TaskResumedBody:
		if x.Reason != "" {
			w("reason=%s", text(x.Reason))
		}
	case *TaskFailedBody:
		w("reason=%s error=%s", orDash(x.Reason), text(x.Error))
	case *TaskCompletedBody:
		w("result=%s", text(x.Result))
	case *ReflectionCompleteBody:
		r := &x.Reflection
		w("assessment=%s facts=%d tool_calls=%d", text(r.Assessment), len(r.Facts), r.ToolCallsCount)
		if r.Episode != nil {
			w("episode=%s", text(r.Episode.Title))
			if r.Episode.Lesson != "" {
				w("lesson=%s", text(r.Episode.Lesson))
			}
		}
	case *TaskNotifyBody:
		w("message=%s", text(x.Message))
	case *BudgetExceededBody:
		w("budget=%s policy=%s %s", orDash(x.Budget), orDash(x.Policy), text(BudgetText(x)))
	case *ModelCalledBody:
		w("purpose=%s attempt=%d model=%s tokens=%d+%d %dms", orDash(x.Purpose), x.Attempt, orDash(x.Model),
			x.PromptTokens, x.CompletionTokens, x.LatencyMS)
		if x.Status != 0 {
			w("status=%d", x.Status)
		}
		if x.FinishReason != "" {
			w("finish=%s", x.FinishReason)
		}
		if len(x.ToolCalls) > 0 {
			w("tool_calls=%s", toolNames(x.ToolCalls))
		}
		if x.Error != "" {
			w("error=%s", text(x.Error))
		}
	default:
		if !describeDispatchEvent(w, ev.Body) {
			w("(%T)", ev.Body)
		}
	}
	return b.String()
}

// callPlace renders where a tool call runs, when it is not a built-in
// tool: " source=mcp:fs", " task=ID" (the broker task of a worker tool),
// " handle=H" (a durable handle the call recorded).
func callPlace(b *strings.Builder, source, task, handle string) {
	if source != "" {
		fmt.Fprintf(b, " source=%s", source)
	}
	if task != "" {
		fmt.Fprintf(b, " task=%s", task)
	}
	if handle != "" {
		fmt.Fprintf(b, " handle=%s", text(handle))
	}
}

// partsText renders a tool's typed parts as [TYPE(MIME,SIZE bytes) ...],
// with "truncated" on a part the event size limit cut.
func partsText(parts []ToolPart) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		var attrs []string
		if p.MIMEType != "" {
			attrs = append(attrs, p.MIMEType)
		}
		if p.URI != "" {
			attrs = append(attrs, p.URI)
		}
		if p.Size != 0 {
			attrs = append(attrs, fmt.Sprintf("%d bytes", p.Size))
		}
		if p.Truncated {
			attrs = append(attrs, "truncated")
		}
		s[i] = orDash(p.Type)
		if len(attrs) > 0 {
			s[i] += "(" + strings.Join(attrs, ",") + ")"
		}
	}
	return "[" + strings.Join(s, " ") + "]"
}

// planSummary renders a plan's size and step kinds (with each tool).
func planSummary(p *Plan) string {
	kinds := make([]string, len(p.Steps))
	for i := range p.Steps {
		s := &p.Steps[i]
		kinds[i] = string(s.ActionType)
		if s.ActionType == ActionToolCall {
			kinds[i] += ":" + s.Tool()
		}
	}
	return fmt.Sprintf("plan=%d steps [%s]", len(p.Steps), strings.Join(kinds, " "))
}

// maxErrorText is maxText for a tool call's error, which says why in a
// sentence ("tool weather failed: dead-lettered after 3 timeouts
// (heartbeat_seconds=10)") that `why` shows whole.
const maxErrorText = 160

// text quotes s on one line, cut to maxText runes.
func text(s string) string { return textN(s, maxText) }

// textN quotes s on one line, cut to n runes.
func textN(s string, n int) string {
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n]) + "…"
	}
	return fmt.Sprintf("%q", s)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// pairs renders a map as k=v pairs sorted by key.
func pairs(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + text(m[k])
	}
	return strings.Join(keys, " ")
}

func toolNames(calls []ToolCall) string {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = orDash(c.Name)
	}
	return "[" + strings.Join(names, " ") + "]"
}
