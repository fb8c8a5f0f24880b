package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

const reflectPrompt = `You maintain the long-term memory of Pegasus, a task agent, after a task has finished.
Decide whether the task taught something worth remembering for future tasks: stable facts about the user or the world (facts/*.md), or an experience with a lesson (episodes/YYYY-MM.md).
- Use memory_write to create a fact file (start it with "> Summary: ..."), memory_patch to correct one, memory_append to add an episode entry: a "# title" line, a "> Summary: ..." line, what happened, and a "Lesson: ..." line.
- Do not duplicate what memory already holds. Most tasks teach nothing: then call no tool.
- When done, answer with one sentence assessing the task, without calling a tool.`

// maybeReflect starts post-task reflection in the background for a task
// whose TASK_COMPLETED was just folded, if reflection is on and the task
// is worth it. It never changes the task's outcome: its errors are logged.
// A crash during reflection loses it (it is not resumed: its memory writes
// must not run twice).
func (a *Agent) maybeReflect(t *fsm.Task) {
	if !a.kindOf(t).reflect || t.Context.PostReflection != nil || !a.opts.ShouldReflect(t) {
		return
	}
	a.mu.Lock()
	if a.state != stateRunning {
		a.mu.Unlock()
		return
	}
	a.stages.Add(1)
	a.mu.Unlock()
	task := t.Clone()
	go func() {
		defer a.stages.Done()
		if err := a.reflect(a.runCtx, &task); err != nil && a.runCtx.Err() == nil {
			a.opts.Logger.Warn("post-task reflection failed (the task's outcome is unchanged)", taskIDAttr(task.ID), machineAttr(&task), "err", err)
		}
	}()
}

// reflect is the tool-use loop of post-task reflection: at most
// ReflectionRounds model calls with memory_read, memory_write,
// memory_patch and memory_append, each call recorded as MODEL_CALLED on the
// task's stream, then REFLECTION_COMPLETE with what was written.
func (a *Agent) reflect(ctx context.Context, t *fsm.Task) error {
	v, cause := t.Version, t.LastEvent
	msgs := []fsm.Message{
		{Role: "system", Content: reflectPrompt},
		{Role: "user", Content: a.reflectionBrief(t)},
	}
	specs := a.reflectReg.Specs()
	kind := a.kindOf(t)
	var (
		written    []fsm.Fact
		episode    *fsm.Episode
		calls      int
		assessment string
	)
	for round := 1; round <= a.opts.ReflectionRounds; round++ {
		var atts []llm.Attempt
		req := llm.Request{Messages: msgs, Tools: specs, Purpose: "reflect"}
		// Reflection spends like any call: it runs only if the task's and
		// its key's budgets have room, with a reservation as a stage's
		// call has; without room it ends here and says why.
		over, release := a.checkBudget(t, kind, req)
		if over != nil {
			_, ok := a.appendTask(ctx, t, v, a.event(t.ID, cause, &fsm.ReflectionCompleteBody{Reflection: fsm.PostTaskReflection{
				Facts: written, Episode: episode, ToolCallsCount: calls,
				Assessment: fmt.Sprintf("reflection stopped before round %d: %s", round, fsm.BudgetText(over)),
			}}))
			if !ok {
				return fmt.Errorf("recording the end of reflection at round %d failed", round)
			}
			return nil
		}
		if err := a.llmSem.acquire(ctx); err != nil {
			release()
			return err
		}
		resp, err := kind.model.Complete(ctx, req, func(att llm.Attempt) { atts = append(atts, att) })
		a.llmSem.release()
		if err != nil {
			release() // no successful MODEL_CALLED for the fold to drop the reservation with
		}
		var evs []eventlog.Event
		for _, att := range atts {
			evs = append(evs, a.event(t.ID, cause, modelCalled("reflect", att)))
		}
		final := err == nil && (len(resp.ToolCalls) == 0 || round == a.opts.ReflectionRounds)
		if final {
			assessment = strings.TrimSpace(resp.Content)
			if len(resp.ToolCalls) > 0 && assessment == "" {
				assessment = fmt.Sprintf("stopped after %d rounds", round)
			}
			evs = append(evs, a.event(t.ID, cause, &fsm.ReflectionCompleteBody{Reflection: fsm.PostTaskReflection{
				Facts: written, Episode: episode, Assessment: assessment, ToolCallsCount: calls,
			}}))
		}
		if len(evs) > 0 {
			res, ok := a.appendTask(ctx, t, v, evs...)
			if !ok {
				release()
				return fmt.Errorf("recording reflection round %d failed", round)
			}
			v, cause = res.Version, res.Events[len(res.Events)-1].ID
		}
		if err != nil {
			return err
		}
		if final {
			return nil
		}
		msgs = append(msgs, fsm.Message{Role: "assistant", Content: resp.Content, ToolCalls: resp.ToolCalls})
		for _, tc := range resp.ToolCalls {
			calls++
			out, err := a.reflectTool(ctx, t, cause, tc)
			msgs = append(msgs, toolMessage(tc.ID, out, err))
			if err != nil {
				continue
			}
			if f, ep := writtenBy(ctx, a.memory, tc); f != nil {
				written = append(written, *f)
				if ep != nil {
					episode = ep
				}
			}
		}
	}
	return nil
}

func (a *Agent) reflectTool(ctx context.Context, t *fsm.Task, cause ulid.ULID, tc fsm.ToolCall) (string, error) {
	tool, err := a.reflectReg.Lookup(tc.Name)
	if err != nil {
		return "", fmt.Errorf("tool %q is not available during reflection (available: %s)", tc.Name, strings.Join(a.reflectReg.Names(), ", "))
	}
	args := tc.Arguments
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	out, err := a.callTool(ctx, tool, tools.Call{
		TaskID: t.ID, TaskType: t.Type, IdempotencyKey: fmt.Sprintf("%s:reflect:%s", t.ID, tc.ID),
		Arguments: json.RawMessage(args), Cause: cause, Correlation: a.correlation(t.ID),
		Notify: func(string) {},
	})
	return out.Text, err
}

// writtenBy returns the fact a successful memory write left (its content
// after the call) and, for a file under episodes/, the episode it records:
// the entry appended (an episodes file holds a month of entries) or the
// whole file written.
func writtenBy(ctx context.Context, m tools.Memory, tc fsm.ToolCall) (*fsm.Fact, *fsm.Episode) {
	if tc.Name == tools.MemoryRead {
		return nil, nil
	}
	var a struct {
		Path  string `json:"path"`
		Entry string `json:"entry"`
	}
	if json.Unmarshal([]byte(tc.Arguments), &a) != nil || a.Path == "" {
		return nil, nil
	}
	content, err := m.Read(ctx, a.Path)
	if err != nil {
		return nil, nil
	}
	f := &fsm.Fact{Path: a.Path, Content: content}
	if !strings.HasPrefix(a.Path, "episodes/") {
		return f, nil
	}
	if tc.Name == tools.MemoryAppend {
		content = a.Entry
	}
	return f, episodeOf(content)
}

// episodeOf reads an episode entry: its first line is the title (a
// heading), then the "> Summary: ..." and "Lesson: ..." lines reflectPrompt
// asks for; the details are the whole entry.
func episodeOf(entry string) *fsm.Episode {
	title, _, _ := strings.Cut(strings.TrimSpace(entry), "\n")
	return &fsm.Episode{Title: strings.TrimSpace(strings.TrimLeft(title, "# ")), Summary: tools.Summary(entry),
		Details: entry, Lesson: tools.Lesson(entry)}
}

// reflectionBrief is what the reflector reads: the task, its outcome, what
// it did, and the memory as it stands (facts in full, episodes by summary).
func (a *Agent) reflectionBrief(t *fsm.Task) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Task %s (%s), %d iteration(s).\nInput:\n%s\n\nResult:\n%s\n", t.ID, t.Type, t.Context.Iteration,
		truncate(t.Context.InputText, 4000), truncate(t.Context.FinalResult, 4000))
	if len(t.Context.ActionsDone) > 0 {
		b.WriteString("\nActions:\n")
		for _, ad := range t.Context.ActionsDone {
			status := "ok"
			if !ad.Success {
				status = "failed: " + truncate(ad.Error, 200)
			}
			fmt.Fprintf(&b, "- %s %s (%s) %s\n", ad.ActionType, ad.Tool, status, truncate(ad.Result, 300))
		}
	}
	facts := a.view.Facts("")
	b.WriteString("\nLong-term memory now:\n")
	if len(facts) == 0 {
		b.WriteString("(empty)\n")
	}
	for _, f := range facts {
		if strings.HasPrefix(f.Path, "episodes/") {
			fmt.Fprintf(&b, "- %s: %s\n", f.Path, tools.Summary(f.Content))
			continue
		}
		fmt.Fprintf(&b, "### %s\n%s\n", f.Path, truncate(f.Content, 8000))
	}
	return b.String()
}
