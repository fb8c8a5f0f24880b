package agent

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
)

// TaskType is a kind of task: the system prompt the model gets and the
// tools it may call. A call to a tool outside the type's set fails that
// step with an error naming the tools that are available.
type TaskType struct {
	Name         string
	SystemPrompt string
	// Tools are the names of the tools the model sees and may call.
	Tools []string
}

// The built-in task types.
const (
	TypeGeneral = "general"
	TypeExplore = "explore"
	TypePlan    = "plan"
)

// AskUserTool is the pseudo-tool through which the model asks the user a
// question: a call to it ends reasoning with NEED_MORE_INFO and suspends the
// task until a message answers. It is offered with every task type and is
// never executed.
const AskUserTool = "ask_user"

var askUserSpec = llm.ToolSpec{
	Name:        AskUserTool,
	Description: "Ask the user a clarifying question when the request is ambiguous or missing information you need. The task waits for the answer.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"],"additionalProperties":false}`),
}

const commonPrompt = `You are Pegasus, a task agent. You work in a loop: each turn you either call tools or answer.
- To act, call one or more tools; you will see their results next turn.
- When you have what you need, answer the user directly in plain text without calling a tool; that answer is the task's result.
- If the request is ambiguous or lacks information only the user has, call ask_user with one short question.
- Long-term memory holds facts (facts/*.md) and episodes (episodes/*.md); its index may be given to you. Read a file with memory_read before relying on it.
`

// DefaultTaskTypes returns the three built-in task types:
//
//   - general: every built-in tool;
//   - explore: read-only investigation (memory_list, memory_read,
//     current_time, notify): it cannot change memory;
//   - plan: produce a plan for the user to follow; it may read memory and
//     record the plan in memory, nothing else.
//
// Tools registered with Options.Tools are added to general.
func DefaultTaskTypes() []TaskType {
	return []TaskType{
		{
			Name:         TypeGeneral,
			SystemPrompt: commonPrompt + "You handle general requests. Use tools when they help; answer concisely.",
			Tools: []string{tools.MemoryList, tools.MemoryRead, tools.MemoryWrite, tools.MemoryPatch, tools.MemoryAppend,
				tools.Notify, tools.CurrentTime},
		},
		{
			Name: TypeExplore,
			SystemPrompt: commonPrompt + "You explore and report: investigate what is asked with the tools you have and report your findings with their sources. " +
				"You cannot change memory in this mode.",
			Tools: []string{tools.MemoryList, tools.MemoryRead, tools.CurrentTime, tools.Notify},
		},
		{
			Name: TypePlan,
			SystemPrompt: commonPrompt + "You plan: turn the request into a short numbered plan of concrete steps, with risks and open questions. " +
				"You may save the plan to memory (facts/plans/...). Do not carry the plan out.",
			Tools: []string{tools.MemoryList, tools.MemoryRead, tools.MemoryWrite, tools.MemoryPatch, tools.CurrentTime, tools.Notify},
		},
	}
}

// taskKind is a resolved task type: its registry and what the model sees.
type taskKind struct {
	TaskType
	registry *tools.Registry
	specs    []llm.ToolSpec // the tools and ask_user, for the model
}

func resolveTypes(types []TaskType, all *tools.Registry) (map[string]*taskKind, error) {
	out := make(map[string]*taskKind, len(types))
	for _, tt := range types {
		if tt.Name == "" {
			return nil, fmt.Errorf("agent: a task type has no name")
		}
		if _, dup := out[tt.Name]; dup {
			return nil, fmt.Errorf("agent: two task types are named %q", tt.Name)
		}
		if slices.Contains(tt.Tools, AskUserTool) {
			return nil, fmt.Errorf("agent: task type %q: %s is offered to every type and cannot be listed", tt.Name, AskUserTool)
		}
		reg, err := all.Subset(tt.Tools...)
		if err != nil {
			return nil, fmt.Errorf("agent: task type %q: %w", tt.Name, err)
		}
		specs := append(reg.Specs(), askUserSpec)
		out[tt.Name] = &taskKind{TaskType: tt, registry: reg, specs: specs}
	}
	if _, ok := out[TypeGeneral]; !ok {
		return nil, fmt.Errorf("agent: the %q task type is required (it is the default)", TypeGeneral)
	}
	return out, nil
}
