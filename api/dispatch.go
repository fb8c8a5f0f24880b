package api

import (
	"encoding/json"
	"time"
)

// The states of a broker task (dispatch.task@1), as DispatchTask.Status
// shows them. A dead letter stays failed or timed_out, with DeadLettered.
const (
	StatusPending    = "pending"     // created or retried, waiting for a worker
	StatusAssigned   = "assigned"    // the broker handed it to a worker
	StatusInProgress = "in_progress" // the worker reported its start or progress
	StatusCompleted  = "completed"   // terminal, with a result
	StatusFailed     = "failed"      // the worker failed it (retried unless dead-lettered)
	StatusTimedOut   = "timed_out"   // its deadline passed (retried unless dead-lettered)
)

// DispatchTask is a broker task as /api/v1 shows it: the seed's
// swarm_tasks columns, plus dead letters and the extensions.
type DispatchTask struct {
	TaskID               string          `json:"task_id"`
	Title                string          `json:"title"`
	Description          string          `json:"description"`
	Owner                string          `json:"owner"`
	RequiredCapabilities []string        `json:"required_capabilities"`
	Status               string          `json:"status"`
	AssignedAgent        string          `json:"assigned_agent"`
	CreatedAt            time.Time       `json:"created_at"`
	AssignedAt           time.Time       `json:"assigned_at,omitzero"`
	StartedAt            time.Time       `json:"started_at,omitzero"`
	CompletedAt          time.Time       `json:"completed_at,omitzero"`
	UpdatedAt            time.Time       `json:"updated_at"`
	Result               json.RawMessage `json:"result"` // the worker's result, null until completed
	Error                string          `json:"error"`
	RetryCount           int             `json:"retry_count"`
	MaxRetries           int             `json:"max_retries"`
	RetryEligible        bool            `json:"retry_eligible"`
	TimeoutSeconds       int             `json:"timeout_seconds"`
	Priority             int             `json:"priority"` // higher first
	Source               string          `json:"source"`
	ParentTaskID         string          `json:"parent_task_id"`
	// Metadata is any JSON value per key, as it was given.
	Metadata         map[string]json.RawMessage `json:"metadata"`
	DeadLettered     bool                       `json:"dead_lettered"`
	DeadLetterReason string                     `json:"dead_letter_reason,omitempty"`
	// TimeoutReason says why the last deadline passed (heartbeat or
	// timeout), for a task that timed out.
	TimeoutReason       string    `json:"timeout_reason,omitempty"`
	RunAt               time.Time `json:"run_at,omitzero"`
	HeartbeatSeconds    int       `json:"heartbeat_seconds"` // 0: no heartbeat deadline
	RetryBackoffSeconds int       `json:"retry_backoff_seconds"`
	ConcurrencyKey      string    `json:"concurrency_key,omitempty"`
	Deadline            time.Time `json:"deadline,omitzero"` // when it times out unless a report comes
	Progress            string    `json:"progress,omitempty"`
	Version             uint64    `json:"version"`
	Children            []string  `json:"children,omitempty"` // GET /api/v1/tasks/{id} only
}

// CreateDispatch is the body of POST /api/v1/tasks. Only Title is
// required; the server's defaults: max_retries 3, retry_eligible true,
// timeout_seconds 300, priority 0, source "agent", owner the caller's
// X-Agent-ID. Give RunAt or DelaySeconds, not both.
type CreateDispatch struct {
	Title                string                     `json:"title"`
	Description          string                     `json:"description,omitempty"`
	Owner                string                     `json:"owner,omitempty"`
	RequiredCapabilities []string                   `json:"required_capabilities,omitempty"`
	Priority             int                        `json:"priority,omitempty"`
	TimeoutSeconds       int                        `json:"timeout_seconds,omitempty"`
	MaxRetries           *int                       `json:"max_retries,omitempty"`
	RetryEligible        *bool                      `json:"retry_eligible,omitempty"`
	Source               string                     `json:"source,omitempty"`
	ParentTaskID         string                     `json:"parent_task_id,omitempty"`
	Metadata             map[string]json.RawMessage `json:"metadata,omitempty"` // any JSON value per key
	RunAt                time.Time                  `json:"run_at,omitzero"`
	DelaySeconds         int                        `json:"delay_seconds,omitempty"`
	HeartbeatSeconds     int                        `json:"heartbeat_seconds,omitempty"`
	RetryBackoffSeconds  int                        `json:"retry_backoff_seconds,omitempty"`
	ConcurrencyKey       string                     `json:"concurrency_key,omitempty"` // the agent task's, for an agent worker
}

// CreateDispatchItem is an item of POST /api/v1/tasks:batch: the body of
// POST /api/v1/tasks and the item's own Idempotency-Key, if any.
type CreateDispatchItem struct {
	CreateDispatch
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// CreateDispatches is the body of POST /api/v1/tasks:batch: 1 to
// MaxBatch tasks, created together in one synced commit, all or none.
type CreateDispatches struct {
	Tasks []CreateDispatchItem `json:"tasks"`
}

// DispatchTasks is the answer to POST /api/v1/tasks:batch: each task as
// created, in the request's order.
type DispatchTasks struct {
	Tasks []DispatchTask `json:"tasks"`
}

// DispatchPage is a page of GET /api/v1/tasks, oldest id first;
// NextCursor, when not empty, continues it.
type DispatchPage struct {
	Tasks      []DispatchTask `json:"tasks"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// UpdateDispatch is the body of PATCH /api/v1/tasks/{id}: metadata to
// merge.
type UpdateDispatch struct {
	Metadata map[string]json.RawMessage `json:"metadata"` // null or "" deletes a key
}

// Report is the body of a worker's POST /api/v1/tasks/{id}/progress
// (Message only), /complete (Result, any JSON) and /fail (Error required;
// RetryEligible false makes the failure final).
type Report struct {
	Message       string          `json:"message,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"`
	Error         string          `json:"error,omitempty"`
	RetryEligible *bool           `json:"retry_eligible,omitempty"`
}

// Register is the body of PUT /api/v1/agents/{id}. MaxTasks 0 means 1.
type Register struct {
	Capabilities []string `json:"capabilities"`
	MaxTasks     int      `json:"max_tasks,omitempty"`
}

// Worker is a worker as the broker knows it: the answer to a
// registration or a drain, and an item of GET /api/v1/agents.
type Worker struct {
	ID           string    `json:"id"`
	Capabilities []string  `json:"capabilities"`
	MaxTasks     int       `json:"max_tasks"`
	Draining     bool      `json:"draining"`
	DrainedBy    string    `json:"drained_by,omitempty"`
	RegisteredAt time.Time `json:"registered_at"`
	ActiveTasks  []string  `json:"active_tasks"`
	LastSeen     time.Time `json:"last_seen,omitzero"`
	Alive        bool      `json:"alive"` // heard from within --worker-ttl
}

// Workers is GET /api/v1/agents.
type Workers struct {
	Agents []Worker `json:"agents"`
}

// BrokerStats is GET /api/v1/stats.
type BrokerStats struct {
	Tasks        int              `json:"tasks"`
	ByStatus     map[string]int   `json:"by_status"`
	Retries      int              `json:"retries"`      // retry_count summed over tasks
	DeadLetters  int              `json:"dead_letters"` // in the DLQ now
	Requeues     int              `json:"requeues"`     // requeues from the DLQ, ever
	QueueDepth   int              `json:"queue_depth"`  // pending tasks
	OldestQueued float64          `json:"oldest_queued_seconds"`
	ToAssign     DurationQuantile `json:"time_to_assign"`   // created -> (last) assigned
	ToComplete   DurationQuantile `json:"time_to_complete"` // created -> completed
}

// DurationQuantile is p50 and p99 of a set of durations, in milliseconds.
type DurationQuantile struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
}

// DLQ is GET /api/v1/dlq: the dead letters.
type DLQ struct {
	Tasks []DispatchTask `json:"tasks"`
}

// DLQFilter selects dead letters; the zero filter selects all.
type DLQFilter struct {
	Capability string    `json:"capability,omitempty"` // a required capability (case-insensitive)
	Error      string    `json:"error,omitempty"`      // a substring of the error
	From       time.Time `json:"from,omitzero"`        // dead-lettered at or after
	To         time.Time `json:"to,omitzero"`          // dead-lettered before
}

// RequeueMatching is the body of POST /api/v1/dlq/requeue.
type RequeueMatching struct {
	DLQFilter
	Reason string `json:"reason,omitempty"`
}

// Requeued is the answer to POST /api/v1/dlq/requeue.
type Requeued struct {
	Requeued int `json:"requeued"`
}

// MetadataText returns the metadata value of key as text: a JSON string's
// value, any other JSON value's text, "" when the key is absent.
func (t *DispatchTask) MetadataText(key string) string { return metadataText(t.Metadata[key]) }

func metadataText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// StringMetadata is metadata whose values are all strings, for a
// CreateDispatch or an UpdateDispatch.
func StringMetadata(m map[string]string) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k], _ = json.Marshal(v)
	}
	return out
}
