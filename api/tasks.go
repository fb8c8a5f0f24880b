package api

import (
	"encoding/json"
	"time"
)

// The states of the agent's task machines (pegasus.task@1, and the legacy
// @0's own), as Task.State and TaskSummary.State show them.
const (
	StateIdle       = "idle"       // created, waiting for an admission slot
	StateReasoning  = "reasoning"  // a model call
	StateActing     = "acting"     // running plan steps
	StateSuspended  = "suspended"  // waiting for a message (Task.Question) or a resume
	StateCompleted  = "completed"  // terminal, with Task.Result
	StateFailed     = "failed"     // terminal, with Task.Error
	StatePerceiving = "perceiving" // pegasus.task@0 only
	StateThinking   = "thinking"   // pegasus.task@0 only
	StatePlanning   = "planning"   // pegasus.task@0 only
	StateReflecting = "reflecting" // pegasus.task@0 only
)

// CreateTask is the body of POST /v1/tasks. Input is required (it may be
// empty); the rest default on the server: source "api", type "general",
// priority 0, the current machine.
type CreateTask struct {
	Input    string            `json:"input"`
	Source   string            `json:"source,omitempty"`
	Type     string            `json:"type,omitempty"` // general, explore or plan
	Priority int               `json:"priority,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Machine  string            `json:"machine,omitempty"` // NAME@VERSION, e.g. pegasus.task@1
	// ConcurrencyKey groups the task for admission (a tenant, a user):
	// the configuration limits each key, and keys are admitted in turn.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// MaxBatch is how many tasks one batch (POST /v1/tasks:batch, POST
// /api/v1/tasks:batch) may carry.
const MaxBatch = 1000

// CreateTaskItem is an item of POST /v1/tasks:batch: the body of POST
// /v1/tasks and the item's own Idempotency-Key, if any.
type CreateTaskItem struct {
	CreateTask
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// CreateTasks is the body of POST /v1/tasks:batch: 1 to MaxBatch tasks,
// created together in one synced commit, all or none.
type CreateTasks struct {
	Tasks []CreateTaskItem `json:"tasks"`
}

// CreatedTasks is the answer to POST /v1/tasks:batch: each task's answer,
// in the request's order.
type CreatedTasks struct {
	Tasks []Created `json:"tasks"`
}

// Created is the answer to POST /v1/tasks and POST /v1/webhooks/{name}
// (201, the task id also in Location).
type Created struct {
	TaskID string `json:"task_id"`
	State  string `json:"state"`
	Queued bool   `json:"queued"` // waiting for an admission slot
}

// Task is one task of the agent: GET /v1/tasks/{id} and the answer of
// every command (messages, suspend, resume, cancel, without Context).
type Task struct {
	TaskID    string            `json:"task_id"`
	Type      string            `json:"type"`
	State     string            `json:"state"`
	Machine   string            `json:"machine"` // NAME@VERSION, for the task's whole life
	Queued    bool              `json:"queued"`  // idle, waiting for an admission slot
	Priority  int               `json:"priority"`
	Source    string            `json:"source"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	Iteration int               `json:"iteration"`
	Version   uint64            `json:"version"` // events folded into the task
	Input     string            `json:"input"`
	Result    string            `json:"result,omitempty"`
	Error     string            `json:"error,omitempty"`
	Question  string            `json:"question,omitempty"` // suspended: the model's question, or the suspend reason
	Metadata  map[string]string `json:"metadata,omitempty"`
	// TimeoutReason and DeadLetterReason are a broker task's, shown in
	// the agent's API too (dispatch.task).
	TimeoutReason    string `json:"timeout_reason,omitempty"`
	DeadLetterReason string `json:"dead_letter_reason,omitempty"`
	// Context is the task's whole context (conversation, actions,
	// reflection; fsm.Context), only on GET /v1/tasks/{id}.
	Context json.RawMessage `json:"context,omitempty"`
	// Plan is the current plan (fsm.Plan), null when there is none.
	Plan    json.RawMessage `json:"plan"`
	History []Transition    `json:"history"`

	// ConcurrencyKey is the task's concurrency key, "" for the default.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// Finished reports whether the task has ended, completed or failed.
func (t *Task) Finished() bool { return t.State == StateCompleted || t.State == StateFailed }

// Transition is one change of a task's state, and the event that did it.
type Transition struct {
	From      string    `json:"from"`
	To        string    `json:"to"`
	Event     string    `json:"event"`
	EventID   string    `json:"event_id"`
	Timestamp time.Time `json:"timestamp"`
}

// TaskSummary is a task in a list (GET /v1/tasks).
type TaskSummary struct {
	TaskID     string    `json:"task_id"`
	Type       string    `json:"type"`
	State      string    `json:"state"`
	Machine    string    `json:"machine"`
	Source     string    `json:"source"`
	Priority   int       `json:"priority"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	Iterations int       `json:"iterations"`
	Events     uint64    `json:"events"` // the stream's version: events folded into the task
	Seq        uint64    `json:"seq"`    // global sequence of the task's last event
	Input      string    `json:"input"`  // cut to 120 bytes
	Error      string    `json:"error,omitempty"`
	Queued     bool      `json:"queued"`
}

// TaskPage is a page of GET /v1/tasks; NextCursor, when not empty,
// continues the list (with the same order and filters).
type TaskPage struct {
	Tasks      []TaskSummary `json:"tasks"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

// Message is the body of POST /v1/tasks/{id}/messages: the answer to a
// suspended task. Text is required.
type Message struct {
	Text   string `json:"text"`
	Source string `json:"source,omitempty"`
}

// Reason is the optional body of suspend, resume and cancel
// (POST /v1/tasks/{id}/suspend ...), and of a requeue.
type Reason struct {
	Reason string `json:"reason,omitempty"`
}

// Progress is GET /v1/tasks/{id}/progress: the steps done and to do.
type Progress struct {
	TaskID         string       `json:"task_id"`
	State          string       `json:"state"`
	Description    string       `json:"description"` // the task's input
	CompletedSteps []string     `json:"completed_steps"`
	NextSteps      []string     `json:"next_steps"`
	ToolsUsed      []string     `json:"tools_used"`
	StepCount      int          `json:"step_count"`
	FailedSteps    int          `json:"failed_steps"`
	Iteration      int          `json:"iteration"`
	AwaitingTool   *PendingTool `json:"awaiting_tool"` // a tool call running now, or null
	Complete       bool         `json:"complete"`
	UpdatedAt      time.Time    `json:"updated_at"`
}

// PendingTool is a tool call that started and has no outcome yet.
type PendingTool struct {
	Tool           string    `json:"tool"`
	StepIndex      int       `json:"step_index"`
	ToolCallID     string    `json:"tool_call_id,omitempty"`
	IdempotencyKey string    `json:"idempotency_key"`
	Since          time.Time `json:"since"`
	EventID        string    `json:"event_id"` // the TOOL_CALL_STARTED
}
