package fsm

import (
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// State is where a task is in its lifecycle.
//
// Persisted: these strings are written into logs and read models; never
// change an existing value.
type State string

// The six states of the current task machine (version 1). Completed and
// Failed are terminal; only Reasoning and Acting are active (suspendable).
const (
	StateIdle      State = "idle"      // created, waiting for TASK_CREATED to start the machine
	StateReasoning State = "reasoning" // one LLM call: understand, think, choose tools, plan
	StateActing    State = "acting"    // executing plan steps one at a time
	StateSuspended State = "suspended" // waiting for a message or an explicit resume
	StateCompleted State = "completed" // terminal: finished with a result
	StateFailed    State = "failed"    // terminal: finished with an error
)

// The states only the legacy machine (version 0) has; it shares idle,
// acting, suspended, completed and failed with version 1. Its five active
// states are perceiving, thinking, planning, acting and reflecting.
const (
	StatePerceiving State = "perceiving" // one model call: read the input
	StateThinking   State = "thinking"   // one model call: reason about it
	StatePlanning   State = "planning"   // one model call: choose the steps
	StateReflecting State = "reflecting" // one model call: judge the result, with a verdict
)

// StateNone is the state of the zero Task: no event applied yet. It is not
// one of the six states and is never stored; it accepts only the events that
// create a task (TASK_CREATED, or an external input that creates the task in
// idle to wait for admission).
const StateNone State = ""

// States lists the states of the current machine in a stable order (for
// tests, docs and tables).
var States = []State{StateIdle, StateReasoning, StateActing, StateSuspended, StateCompleted, StateFailed}

// AllStates lists the states of every machine this build has, in a stable
// order: the current machine's, then those only older machines have.
var AllStates = []State{StateIdle, StateReasoning, StateActing, StateSuspended, StateCompleted, StateFailed,
	StatePerceiving, StateThinking, StatePlanning, StateReflecting,
	StatePending, StateAssigned, StateInProgress, StateTimedOut}

// ActiveStates lists the active (suspendable, working) states of every
// machine: a task in one of them has a stage to run or resume.
var ActiveStates = []State{StateReasoning, StateActing, StatePerceiving, StateThinking, StatePlanning, StateReflecting}

// IsTerminal reports whether no further transition is accepted in s.
func (s State) IsTerminal() bool { return s == StateCompleted || s == StateFailed }

// IsActive reports whether s is an active, suspendable state of some
// machine (reasoning and acting; perceiving, thinking, planning, acting and
// reflecting).
func (s State) IsActive() bool {
	switch s {
	case StateReasoning, StateActing, StatePerceiving, StateThinking, StatePlanning, StateReflecting:
		return true
	}
	return false
}

// String returns the state's name; the zero task's StateNone prints as "none".
func (s State) String() string {
	if s == StateNone {
		return "none"
	}
	return string(s)
}

// Valid reports whether s is a state of some machine (AllStates).
func (s State) Valid() bool {
	switch s {
	case StateIdle, StateReasoning, StateActing, StateSuspended, StateCompleted, StateFailed,
		StatePerceiving, StateThinking, StatePlanning, StateReflecting,
		StatePending, StateAssigned, StateInProgress, StateTimedOut:
		return true
	}
	return false
}

// EventType is the stable stored name of an event.
//
// Persisted: these strings are written into the log; never change an
// existing value. Add new types with new names.
type EventType string

// External inputs. Each creates a task: appended as the first event of the
// new task's own stream (the task id is the input's event id), it creates
// the task in idle, and the TASK_CREATED that admits it is caused by it.
// (An input may also sit on the "$inputs" stream, with the task's stream
// starting at TASK_CREATED.) MESSAGE_RECEIVED appended later to a task's
// stream answers a suspended task.
const (
	MessageReceived  EventType = "MESSAGE_RECEIVED"
	WebhookTriggered EventType = "WEBHOOK_TRIGGERED"
	ScheduleFired    EventType = "SCHEDULE_FIRED"
)

// Task events that drive transitions.
const (
	TaskCreated       EventType = "TASK_CREATED"
	ReasonDone        EventType = "REASON_DONE"
	NeedMoreInfo      EventType = "NEED_MORE_INFO"
	ToolCallCompleted EventType = "TOOL_CALL_COMPLETED"
	ToolCallFailed    EventType = "TOOL_CALL_FAILED"
	StepCompleted     EventType = "STEP_COMPLETED"
	TaskSuspended     EventType = "TASK_SUSPENDED"
	TaskResumed       EventType = "TASK_RESUMED"
	TaskFailed        EventType = "TASK_FAILED"
)

// Fact events: they record what happened without moving the state. Each is
// valid only in the states listed in docs/events.md.
const (
	ToolCallStarted    EventType = "TOOL_CALL_STARTED"   // acting: a tool call began, with its idempotency key
	ModelCalled        EventType = "MODEL_CALLED"        // reasoning, completed: one model call attempt (reflection runs after completion)
	TaskNotify         EventType = "TASK_NOTIFY"         // reasoning, acting: an interim message from the notify tool
	TaskCompleted      EventType = "TASK_COMPLETED"      // completed, once: the compiled final result
	ReflectionComplete EventType = "REFLECTION_COMPLETE" // completed, once: post-task reflection finished
	BudgetExceeded     EventType = "BUDGET_EXCEEDED"     // reasoning (and version 0's model-call states): a model call would exceed a budget
)

// Events of the legacy machine (pegasus.task version 0). It also uses
// TASK_CREATED, NEED_MORE_INFO, TOOL_CALL_*, TASK_SUSPENDED, TASK_RESUMED,
// TASK_FAILED, MESSAGE_RECEIVED, MODEL_CALLED, TASK_NOTIFY and
// TASK_COMPLETED.
const (
	PerceiveDone   EventType = "PERCEIVE_DONE"    // perceiving -> thinking
	ThinkDone      EventType = "THINK_DONE"       // thinking -> planning
	PlanDone       EventType = "PLAN_DONE"        // planning -> acting
	ActDone        EventType = "ACT_DONE"         // acting -> reflecting: a generate or sub_task step is done
	ReflectDone    EventType = "REFLECT_DONE"     // reflecting -> completed | thinking | planning, by verdict
	SubTaskCreated EventType = "SUB_TASK_CREATED" // acting, fact: the current sub_task step created its child task
)

// ActionType is the kind of a plan step.
//
// Persisted: never change an existing value.
type ActionType string

// The step kinds. In version 1 (tool_call, respond, generate) a plan that
// contains any ToolCall step goes back to Reasoning when all its steps are
// done; a plan without one completes the task. Version 0 plans have
// tool_call, generate and sub_task steps (a sub_task step runs a child
// task and ends when the child ends).
const (
	ActionToolCall ActionType = "tool_call"
	ActionRespond  ActionType = "respond"
	ActionGenerate ActionType = "generate"
	ActionSubTask  ActionType = "sub_task"
)

// MachineRef names the machine a task was created under and its version.
// It is recorded in TASK_CREATED, so a log folds the way it was written
// even after newer machines exist.
type MachineRef struct {
	Name    string `msgpack:"name" json:"name"`
	Version int    `msgpack:"version" json:"version"`
}

// Event is one committed event as the machine sees it: the envelope fields
// the fold needs and the decoded body. Times and ids come from here, never
// from a clock.
type Event struct {
	ID          ulid.ULID
	Type        EventType
	Time        time.Time
	Stream      string // the task id for task events
	Version     uint64 // stream version
	Seq         uint64 // global sequence
	Causation   ulid.ULID
	Correlation ulid.ULID
	Body        Body
}

// Body is the decoded body of an event. Each concrete body type reports the
// event type it belongs to.
type Body interface {
	EventType() EventType
}

// MaxConcurrencyKey bounds the length of a concurrency key, in bytes.
const MaxConcurrencyKey = 128

// Task is a task as the fold of its events: the TaskFSM of the spec. It is
// never stored as mutable state; the log is the truth and a Task is derived.
type Task struct {
	ID        string            `msgpack:"id" json:"id"`
	Machine   MachineRef        `msgpack:"machine" json:"machine"`
	Type      string            `msgpack:"type" json:"type"` // general, explore, plan
	State     State             `msgpack:"state" json:"state"`
	Context   Context           `msgpack:"context" json:"context"`
	History   []Transition      `msgpack:"history" json:"history"`
	CreatedAt time.Time         `msgpack:"created_at" json:"created_at"`
	UpdatedAt time.Time         `msgpack:"updated_at" json:"updated_at"`
	Priority  int               `msgpack:"priority" json:"priority"` // lower value = higher priority
	Metadata  map[string]string `msgpack:"metadata" json:"metadata,omitempty"`
	Version   uint64            `msgpack:"version" json:"version"` // stream version of the last applied event
	Seq       uint64            `msgpack:"seq" json:"seq"`         // global sequence of the last applied event
	LastEvent ulid.ULID         `msgpack:"last_event" json:"last_event"`
	// ParentID is the task whose sub_task step created this one, or "".
	ParentID string `msgpack:"parent_task_id" json:"parent_task_id,omitempty"`
	// ConcurrencyKey groups tasks for admission (a tenant, a user): the
	// configuration limits how many of a key's tasks run at once, and
	// admission takes keys in turn. "" is the default key.
	ConcurrencyKey string `msgpack:"concurrency_key" json:"concurrency_key,omitempty"`
	// Dispatch holds the broker's fields of a dispatch.task task; nil for
	// the tasks of every other machine.
	Dispatch *Dispatch `msgpack:"dispatch" json:"dispatch,omitempty"`
}

// Transition records one state transition (the StateTransition of the spec).
type Transition struct {
	From      State     `msgpack:"from" json:"from"`
	To        State     `msgpack:"to" json:"to"`
	Event     EventType `msgpack:"event" json:"event"`
	EventID   ulid.ULID `msgpack:"event_id" json:"event_id"`
	Timestamp time.Time `msgpack:"timestamp" json:"timestamp"`
}

// Context is everything a task accumulates from creation to its end (the
// TaskContext of the spec). Every field changes only through an event body.
type Context struct {
	// Original input.
	InputText     string            `msgpack:"input_text" json:"input_text"`
	InputMetadata map[string]string `msgpack:"input_metadata" json:"input_metadata,omitempty"`
	Source        string            `msgpack:"source" json:"source"`

	// Cognitive stage outputs.
	Perception     *Perception         `msgpack:"perception" json:"perception,omitempty"` // version 0: the perceive stage's output
	Reasoning      *Reasoning          `msgpack:"reasoning" json:"reasoning"`
	Plan           *Plan               `msgpack:"plan" json:"plan"`
	ActionsDone    []ActionResult      `msgpack:"actions_done" json:"actions_done"`
	Reflections    []Reflection        `msgpack:"reflections" json:"reflections"` // version 0: one per REFLECT_DONE; never written by version 1
	PostReflection *PostTaskReflection `msgpack:"post_reflection" json:"post_reflection"`

	// Loop control.
	Iteration int `msgpack:"iteration" json:"iteration"`

	// PendingCall is the TOOL_CALL_STARTED of the current step while its
	// outcome is not recorded yet; the step's TOOL_CALL_COMPLETED or
	// TOOL_CALL_FAILED clears it. After a crash the agent finds here the
	// idempotency key to retry the call with.
	PendingCall *ToolCallStartedBody `msgpack:"pending_call" json:"pending_call,omitempty"`

	// PendingSubTask is the SUB_TASK_CREATED of the current sub_task step
	// (version 0) until the step's ACT_DONE: the child task it waits for.
	PendingSubTask *SubTaskCreatedBody `msgpack:"pending_sub_task" json:"pending_sub_task,omitempty"`

	// Result.
	FinalResult string `msgpack:"final_result" json:"final_result"`
	Error       string `msgpack:"error" json:"error"`
	// ResultRecorded is set by TASK_COMPLETED, which is accepted once: an
	// empty FinalResult cannot tell "not recorded yet" from "empty result".
	ResultRecorded bool `msgpack:"result_recorded" json:"result_recorded"`

	// Suspend and resume.
	SuspendedState State  `msgpack:"suspended_state" json:"suspended_state"`
	SuspendReason  string `msgpack:"suspend_reason" json:"suspend_reason"`

	// Conversation history (working memory).
	Messages []Message `msgpack:"messages" json:"messages"`
}

// Reasoning is the output of one reasoning stage (one model call).
type Reasoning struct {
	Text               string     `msgpack:"text" json:"text"`                               // the model's content
	ToolCalls          []ToolCall `msgpack:"tool_calls" json:"tool_calls,omitempty"`         // tools the model chose
	NeedsClarification bool       `msgpack:"needs_clarification" json:"needs_clarification"` // the model asked the user a question
	Question           string     `msgpack:"question" json:"question,omitempty"`             // the clarification question
	Model              string     `msgpack:"model" json:"model,omitempty"`
}

// ToolCall is one tool invocation chosen by the model (OpenAI tool_calls).
type ToolCall struct {
	ID        string `msgpack:"id" json:"id"`
	Name      string `msgpack:"name" json:"name"`
	Arguments string `msgpack:"arguments" json:"arguments"` // raw JSON object text, as the model sent it
}

// Plan is the planner's output: the steps the Act stage executes in order.
type Plan struct {
	Goal      string     `msgpack:"goal" json:"goal"`
	Steps     []PlanStep `msgpack:"steps" json:"steps"`
	Reasoning string     `msgpack:"reasoning" json:"reasoning"`
}

// PlanStep is one step of a plan.
type PlanStep struct {
	Index        int               `msgpack:"index" json:"index"`
	Description  string            `msgpack:"description" json:"description"`
	ActionType   ActionType        `msgpack:"action_type" json:"action_type"`
	ActionParams map[string]string `msgpack:"action_params" json:"action_params,omitempty"` // tool_call: tool, arguments, tool_call_id; respond: text
	Completed    bool              `msgpack:"completed" json:"completed"`
}

// Message is one entry of the conversation (OpenAI chat message shape).
type Message struct {
	Role       string     `msgpack:"role" json:"role"` // system, user, assistant, tool
	Content    string     `msgpack:"content" json:"content"`
	Name       string     `msgpack:"name" json:"name,omitempty"`
	ToolCallID string     `msgpack:"tool_call_id" json:"tool_call_id,omitempty"`
	ToolCalls  []ToolCall `msgpack:"tool_calls" json:"tool_calls,omitempty"`
}

// ActionResult records one executed plan step.
type ActionResult struct {
	StepIndex  int        `msgpack:"step_index" json:"step_index"`
	ActionType ActionType `msgpack:"action_type" json:"action_type"`
	Tool       string     `msgpack:"tool" json:"tool,omitempty"`
	Success    bool       `msgpack:"success" json:"success"`
	Result     string     `msgpack:"result" json:"result,omitempty"`
	Error      string     `msgpack:"error" json:"error,omitempty"`
	DurationMS int64      `msgpack:"duration_ms" json:"duration_ms"`
	EventID    ulid.ULID  `msgpack:"event_id" json:"event_id"` // the event that recorded it
}

// Reflection is the per-iteration reflection of the legacy machine
// (version 0): its verdict chooses where the task goes after reflecting.
type Reflection struct {
	Verdict    string   `msgpack:"verdict" json:"verdict"` // complete, continue or replan
	Assessment string   `msgpack:"assessment" json:"assessment"`
	Lessons    []string `msgpack:"lessons" json:"lessons,omitempty"`
	NextFocus  string   `msgpack:"next_focus" json:"next_focus,omitempty"`
}

// The reflection verdicts of version 0.
//
// Persisted: never change an existing value.
const (
	VerdictComplete = "complete" // reflecting -> completed
	VerdictContinue = "continue" // reflecting -> thinking (next iteration)
	VerdictReplan   = "replan"   // reflecting -> planning (next iteration)
)

// Perception is the output of the perceive stage (version 0).
type Perception struct {
	Text  string `msgpack:"text" json:"text"` // the model's reading of the input
	Model string `msgpack:"model" json:"model,omitempty"`
}

// PostTaskReflection is what the asynchronous post-task reflector produced.
// It never influences the task's outcome.
type PostTaskReflection struct {
	Facts          []Fact   `msgpack:"facts" json:"facts,omitempty"`
	Episode        *Episode `msgpack:"episode" json:"episode"`
	Assessment     string   `msgpack:"assessment" json:"assessment"`
	ToolCallsCount int      `msgpack:"tool_calls_count" json:"tool_calls_count"`
}

// Fact is one long-term memory fact by path.
type Fact struct {
	Path    string `msgpack:"path" json:"path"`
	Content string `msgpack:"content" json:"content"`
}

// Episode is one episodic memory entry.
type Episode struct {
	Title   string `msgpack:"title" json:"title"`
	Summary string `msgpack:"summary" json:"summary"`
	Details string `msgpack:"details" json:"details"`
	Lesson  string `msgpack:"lesson" json:"lesson"`
}

// ---- Event bodies. Field names are persisted (msgpack keys): never rename
// a key; add new optional fields instead and bump the schema only for an
// incompatible change.

// Input is the body of an external input (MESSAGE_RECEIVED,
// WEBHOOK_TRIGGERED, SCHEDULE_FIRED) and of a message answering a suspended
// task (MESSAGE_RECEIVED on the task's stream).
type Input struct {
	Kind     EventType         `msgpack:"kind" json:"kind"` // which of the three input types this is
	Text     string            `msgpack:"text" json:"text"`
	Source   string            `msgpack:"source" json:"source"`
	TaskType string            `msgpack:"task_type" json:"task_type,omitempty"`
	Priority int               `msgpack:"priority" json:"priority"`
	Metadata map[string]string `msgpack:"metadata" json:"metadata,omitempty"`
	Name     string            `msgpack:"name" json:"name,omitempty"` // webhook or schedule name
	// Machine is the machine the task runs under; nil means CurrentMachine.
	Machine *MachineRef `msgpack:"machine" json:"machine,omitempty"`
	// ParentTaskID is the task whose sub_task step this input comes from.
	ParentTaskID string `msgpack:"parent_task_id" json:"parent_task_id,omitempty"`
	// ConcurrencyKey is the task's concurrency key, "" for the default.
	ConcurrencyKey string `msgpack:"concurrency_key" json:"concurrency_key,omitempty"`
}

// TaskCreatedBody starts the machine: idle -(TASK_CREATED)-> reasoning.
type TaskCreatedBody struct {
	Machine       MachineRef        `msgpack:"machine" json:"machine"`
	TaskType      string            `msgpack:"task_type" json:"task_type"`
	InputText     string            `msgpack:"input_text" json:"input_text"`
	InputMetadata map[string]string `msgpack:"input_metadata" json:"input_metadata,omitempty"`
	Source        string            `msgpack:"source" json:"source"`
	Priority      int               `msgpack:"priority" json:"priority"`
	Metadata      map[string]string `msgpack:"metadata" json:"metadata,omitempty"`
	ParentTaskID  string            `msgpack:"parent_task_id" json:"parent_task_id,omitempty"`
	// TypeVersion is the version of the task type the task was admitted
	// under (a hash of its system prompt and tool list), "" when unknown.
	TypeVersion string `msgpack:"type_version" json:"type_version,omitempty"`
	// Model is the name of the model the task type runs with, "" when
	// unknown.
	Model string `msgpack:"model" json:"model,omitempty"`
	// ConcurrencyKey is the task's concurrency key, copied from the input.
	ConcurrencyKey string `msgpack:"concurrency_key" json:"concurrency_key,omitempty"`
}

// ReasonDoneBody carries the reasoning, the plan and the new messages:
// reasoning -(REASON_DONE)-> acting.
type ReasonDoneBody struct {
	Reasoning   Reasoning `msgpack:"reasoning" json:"reasoning"`
	Plan        Plan      `msgpack:"plan" json:"plan"`
	NewMessages []Message `msgpack:"new_messages" json:"new_messages,omitempty"`
}

// NeedMoreInfoBody: reasoning -(NEED_MORE_INFO)-> suspended.
type NeedMoreInfoBody struct {
	Reasoning   Reasoning `msgpack:"reasoning" json:"reasoning"`
	NewMessages []Message `msgpack:"new_messages" json:"new_messages,omitempty"`
}

// ToolCallStartedBody is a fact: a tool call for the current step began.
type ToolCallStartedBody struct {
	StepIndex      int    `msgpack:"step_index" json:"step_index"`
	Tool           string `msgpack:"tool" json:"tool"`
	ToolCallID     string `msgpack:"tool_call_id" json:"tool_call_id,omitempty"`
	Arguments      string `msgpack:"arguments" json:"arguments,omitempty"`
	IdempotencyKey string `msgpack:"idempotency_key" json:"idempotency_key"`
	// Source says where the tool runs ("mcp:fs", "worker:shout", "go"); ""
	// is a built-in tool (and every call recorded before sources were).
	Source string `msgpack:"source" json:"source,omitempty"`
	// Task is the broker task that runs a worker tool's call: its id is
	// drawn and recorded here before the task is created, and the step
	// waits for it (ActWaitTask).
	Task string `msgpack:"task" json:"task,omitempty"`
	// Handle is a durable handle the running call recorded (an MCP task):
	// a second TOOL_CALL_STARTED of the step carries it, and after a crash
	// the call resumes from it instead of running again.
	Handle string `msgpack:"handle" json:"handle,omitempty"`
}

// ToolCallResultBody is the body of TOOL_CALL_COMPLETED and
// TOOL_CALL_FAILED for the current step.
type ToolCallResultBody struct {
	StepIndex      int       `msgpack:"step_index" json:"step_index"`
	Tool           string    `msgpack:"tool" json:"tool"`
	ToolCallID     string    `msgpack:"tool_call_id" json:"tool_call_id,omitempty"`
	IdempotencyKey string    `msgpack:"idempotency_key" json:"idempotency_key"`
	Result         string    `msgpack:"result" json:"result,omitempty"`
	Error          string    `msgpack:"error" json:"error,omitempty"`
	DurationMS     int64     `msgpack:"duration_ms" json:"duration_ms"`
	NewMessages    []Message `msgpack:"new_messages" json:"new_messages,omitempty"`
	// Source is the call's TOOL_CALL_STARTED.Source.
	Source string `msgpack:"source" json:"source,omitempty"`
	// Task is the broker task that ran a worker tool's call.
	Task string `msgpack:"task" json:"task,omitempty"`
	// Parts is the tool's output that is not text (images, resources,
	// structured content), bounded by the event size limit.
	Parts []ToolPart `msgpack:"parts" json:"parts,omitempty"`
}

// ToolPart is one typed part of a tool's output that is not plain text.
type ToolPart struct {
	Type      string `msgpack:"type" json:"type"` // image, audio, resource, resource_link, structured
	MIMEType  string `msgpack:"mime_type" json:"mime_type,omitempty"`
	Text      string `msgpack:"text" json:"text,omitempty"` // a resource's text, structured content's JSON
	URI       string `msgpack:"uri" json:"uri,omitempty"`
	Data      string `msgpack:"data" json:"data,omitempty"` // base64, as the server sent it
	Size      int    `msgpack:"size" json:"size,omitempty"` // bytes of the original data
	Truncated bool   `msgpack:"truncated" json:"truncated,omitempty"`
}

// The kinds of ToolPart.
//
// Persisted: never change an existing value.
const (
	PartImage        = "image"
	PartAudio        = "audio"
	PartResource     = "resource"
	PartResourceLink = "resource_link"
	PartStructured   = "structured"
)

// StepCompletedBody completes a respond or generate step.
type StepCompletedBody struct {
	StepIndex   int       `msgpack:"step_index" json:"step_index"`
	Result      string    `msgpack:"result" json:"result"`
	NewMessages []Message `msgpack:"new_messages" json:"new_messages,omitempty"`
}

// TaskSuspendedBody: (reasoning|acting) -(TASK_SUSPENDED)-> suspended.
type TaskSuspendedBody struct {
	Reason string `msgpack:"reason" json:"reason"`
}

// TaskResumedBody: suspended -(TASK_RESUMED)-> the state saved at suspension.
type TaskResumedBody struct {
	Reason string `msgpack:"reason" json:"reason,omitempty"`
}

// TaskFailedBody: any non-terminal state -(TASK_FAILED)-> failed.
type TaskFailedBody struct {
	Error  string `msgpack:"error" json:"error"`
	Reason string `msgpack:"reason" json:"reason"` // a short code: cancelled, max_iterations, model_error, ...
}

// TaskCompletedBody is a fact recorded once the task is completed: the
// compiled final result.
type TaskCompletedBody struct {
	Result string `msgpack:"result" json:"result"`
}

// ReflectionCompleteBody is a fact recorded after post-task reflection.
type ReflectionCompleteBody struct {
	Reflection PostTaskReflection `msgpack:"reflection" json:"reflection"`
}

// TaskNotifyBody is a fact: an interim message to the user.
type TaskNotifyBody struct {
	Message string `msgpack:"message" json:"message"`
}

// ModelCalledBody is a fact: one model call attempt, recorded so that replay
// never calls the model.
type ModelCalledBody struct {
	Purpose          string     `msgpack:"purpose" json:"purpose"` // reason or reflect
	Attempt          int        `msgpack:"attempt" json:"attempt"`
	Model            string     `msgpack:"model" json:"model"`
	LatencyMS        int64      `msgpack:"latency_ms" json:"latency_ms"`
	Status           int        `msgpack:"status" json:"status,omitempty"` // HTTP status, 0 for none
	Error            string     `msgpack:"error" json:"error,omitempty"`
	PromptTokens     int        `msgpack:"prompt_tokens" json:"prompt_tokens"`
	CompletionTokens int        `msgpack:"completion_tokens" json:"completion_tokens"`
	Content          string     `msgpack:"content" json:"content,omitempty"`
	ToolCalls        []ToolCall `msgpack:"tool_calls" json:"tool_calls,omitempty"`
	FinishReason     string     `msgpack:"finish_reason" json:"finish_reason,omitempty"`
}

// The budget kinds of BudgetExceededBody.Budget and the policies of
// BudgetExceededBody.Policy.
//
// Persisted: never change an existing value.
const (
	BudgetTask = "task" // the task's own budget (its type's max_tokens, max_cost)
	BudgetKey  = "key"  // its concurrency key's budget per window

	BudgetSuspend = "suspend" // suspend the task with reason budget_exhausted
	BudgetFail    = "fail"    // fail the task with reason budget_exhausted
)

// BudgetExhausted is the reason of the TASK_SUSPENDED or TASK_FAILED that
// follows a BUDGET_EXCEEDED (BudgetOutcome).
const BudgetExhausted = "budget_exhausted"

// BudgetExceededBody is a fact: the model call due would exceed a budget,
// with the figures of the check. It never moves the state: BudgetOutcome
// is the event that does, in the same commit.
type BudgetExceededBody struct {
	Budget string `msgpack:"budget" json:"budget"`           // task or key
	Key    string `msgpack:"key" json:"key,omitempty"`       // the concurrency key (key budgets)
	Window string `msgpack:"window" json:"window,omitempty"` // the key budget's window, "2026-11-26" for a day
	Model  string `msgpack:"model" json:"model,omitempty"`   // the model of the call
	// The limits (0: none), what was spent (usage recorded, and the
	// reservations of calls running) and what the call reserved.
	MaxTokens      int64   `msgpack:"max_tokens" json:"max_tokens,omitempty"`
	MaxCost        float64 `msgpack:"max_cost" json:"max_cost,omitempty"`
	SpentTokens    int64   `msgpack:"spent_tokens" json:"spent_tokens"`
	SpentCost      float64 `msgpack:"spent_cost" json:"spent_cost"`
	ReservedTokens int64   `msgpack:"reserved_tokens" json:"reserved_tokens"`
	ReservedCost   float64 `msgpack:"reserved_cost" json:"reserved_cost"`
	Policy         string  `msgpack:"policy" json:"policy"` // suspend or fail
}

// BudgetOutcome is the decision a BUDGET_EXCEEDED calls for, by its
// policy: TASK_FAILED, or TASK_SUSPENDED, both with reason
// budget_exhausted and the figures in words.
func BudgetOutcome(b *BudgetExceededBody) Body {
	msg := BudgetText(b)
	if b.Policy == BudgetFail {
		return &TaskFailedBody{Reason: BudgetExhausted, Error: msg}
	}
	return &TaskSuspendedBody{Reason: BudgetExhausted + ": " + msg}
}

// BudgetText words a BUDGET_EXCEEDED's figures: "key acme's budget for
// 2026-11-26: spent $0.0120 (1200 tokens) + this call's $0.0040 (400
// tokens) > max $0.0150".
func BudgetText(b *BudgetExceededBody) string {
	var who string
	switch b.Budget {
	case BudgetKey:
		who = "key " + orDash(b.Key) + "'s budget"
		if b.Window != "" {
			who += " for " + b.Window
		}
	default:
		who = "the task's budget"
	}
	var over []string
	if b.MaxCost > 0 {
		over = append(over, sprintf("spent $%.4f + this call's $%.4f > max $%.4f", b.SpentCost, b.ReservedCost, b.MaxCost))
	}
	if b.MaxTokens > 0 {
		over = append(over, sprintf("spent %d + this call's %d tokens > max %d", b.SpentTokens, b.ReservedTokens, b.MaxTokens))
	}
	if len(over) == 0 {
		over = append(over, sprintf("spent $%.4f (%d tokens)", b.SpentCost, b.SpentTokens))
	}
	return who + ": " + strings.Join(over, "; ")
}

// ---- Bodies of the legacy machine (version 0).

// PerceiveDoneBody: perceiving -(PERCEIVE_DONE)-> thinking.
type PerceiveDoneBody struct {
	Perception  Perception `msgpack:"perception" json:"perception"`
	NewMessages []Message  `msgpack:"new_messages" json:"new_messages,omitempty"`
}

// ThinkDoneBody: thinking -(THINK_DONE)-> planning.
type ThinkDoneBody struct {
	Reasoning   Reasoning `msgpack:"reasoning" json:"reasoning"`
	NewMessages []Message `msgpack:"new_messages" json:"new_messages,omitempty"`
}

// PlanDoneBody: planning -(PLAN_DONE)-> acting, with the new plan.
type PlanDoneBody struct {
	Plan        Plan      `msgpack:"plan" json:"plan"`
	NewMessages []Message `msgpack:"new_messages" json:"new_messages,omitempty"`
}

// ActDoneBody completes the current generate or sub_task step:
// acting -(ACT_DONE)-> reflecting. For a sub_task step SubTask names the
// child and Result (or Error, if the child failed) is its outcome.
type ActDoneBody struct {
	StepIndex   int       `msgpack:"step_index" json:"step_index"`
	Result      string    `msgpack:"result" json:"result,omitempty"`
	Error       string    `msgpack:"error" json:"error,omitempty"`
	SubTask     string    `msgpack:"sub_task" json:"sub_task,omitempty"`
	NewMessages []Message `msgpack:"new_messages" json:"new_messages,omitempty"`
}

// ReflectDoneBody: reflecting -(REFLECT_DONE)-> completed | thinking |
// planning, as its verdict says.
type ReflectDoneBody struct {
	Reflection  Reflection `msgpack:"reflection" json:"reflection"`
	NewMessages []Message  `msgpack:"new_messages" json:"new_messages,omitempty"`
}

// SubTaskCreatedBody is a fact: the current sub_task step created its
// child task, TaskID, with Input as the child's input text.
type SubTaskCreatedBody struct {
	StepIndex int    `msgpack:"step_index" json:"step_index"`
	TaskID    string `msgpack:"task_id" json:"task_id"`
	Input     string `msgpack:"input" json:"input,omitempty"`
}

func (*PerceiveDoneBody) EventType() EventType   { return PerceiveDone }
func (*ThinkDoneBody) EventType() EventType      { return ThinkDone }
func (*PlanDoneBody) EventType() EventType       { return PlanDone }
func (*ActDoneBody) EventType() EventType        { return ActDone }
func (*ReflectDoneBody) EventType() EventType    { return ReflectDone }
func (*SubTaskCreatedBody) EventType() EventType { return SubTaskCreated }

func (*TaskCreatedBody) EventType() EventType        { return TaskCreated }
func (*ReasonDoneBody) EventType() EventType         { return ReasonDone }
func (*NeedMoreInfoBody) EventType() EventType       { return NeedMoreInfo }
func (*ToolCallStartedBody) EventType() EventType    { return ToolCallStarted }
func (*StepCompletedBody) EventType() EventType      { return StepCompleted }
func (*TaskSuspendedBody) EventType() EventType      { return TaskSuspended }
func (*TaskResumedBody) EventType() EventType        { return TaskResumed }
func (*TaskFailedBody) EventType() EventType         { return TaskFailed }
func (*TaskCompletedBody) EventType() EventType      { return TaskCompleted }
func (*ReflectionCompleteBody) EventType() EventType { return ReflectionComplete }
func (*TaskNotifyBody) EventType() EventType         { return TaskNotify }
func (*ModelCalledBody) EventType() EventType        { return ModelCalled }
func (*BudgetExceededBody) EventType() EventType     { return BudgetExceeded }

// EventType of an input is its Kind, MESSAGE_RECEIVED when unset.
func (b *Input) EventType() EventType {
	if b.Kind != "" {
		return b.Kind
	}
	return MessageReceived
}

// EventType of a tool call result is TOOL_CALL_COMPLETED when Error is
// empty and TOOL_CALL_FAILED otherwise; the envelope's type is the truth and
// Apply checks that the two agree.
func (b *ToolCallResultBody) EventType() EventType {
	if b.Error != "" {
		return ToolCallFailed
	}
	return ToolCallCompleted
}
