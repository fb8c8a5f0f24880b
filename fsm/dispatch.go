package fsm

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// DispatchMachineName is the name of the broker's task machine: a task
// handed to an external worker (docs/broker.md).
//
// Persisted: recorded in every task the machine folds; never change it.
const DispatchMachineName = "dispatch.task"

// DispatchMachine names version 1 of the broker's task machine, the one
// DISPATCH_CREATED starts.
var DispatchMachine = MachineRef{Name: DispatchMachineName, Version: 1}

// The states of the dispatch.task machine. It shares completed and failed
// with pegasus.task; in it failed is not final until the task is
// dead-lettered or retried (see Task.IsTerminal).
//
// Persisted: never change an existing value.
const (
	StatePending    State = "pending"     // created or retried, waiting for a worker
	StateAssigned   State = "assigned"    // the broker handed it to a worker
	StateInProgress State = "in_progress" // the worker reported progress
	StateTimedOut   State = "timed_out"   // its deadline passed without an outcome (may retry)
)

// DispatchStates lists the states of dispatch.task in the seed's order.
var DispatchStates = []State{StatePending, StateAssigned, StateInProgress, StateCompleted, StateFailed, StateTimedOut}

// The events of the dispatch.task machine: one namespace, so that none is
// confused with pegasus.task's TASK_COMPLETED or TASK_FAILED, whose bodies
// differ. The seed's swarm_task_events names are in parentheses.
//
// Persisted: never change an existing value.
const (
	DispatchCreated      EventType = "DISPATCH_CREATED"       // (created) none -> pending
	DispatchAssigned     EventType = "DISPATCH_ASSIGNED"      // (assigned) pending -> assigned, by the broker
	DispatchStarted      EventType = "DISPATCH_STARTED"       // (started) assigned -> in_progress, by the worker
	DispatchProgress     EventType = "DISPATCH_PROGRESS"      // (progress) in_progress, fact: a sign of life
	DispatchCompleted    EventType = "DISPATCH_COMPLETED"     // (completed) in_progress -> completed, by the worker
	DispatchFailed       EventType = "DISPATCH_FAILED"        // (failed) in_progress -> failed, by the worker
	DispatchTimedOut     EventType = "DISPATCH_TIMED_OUT"     // (timeout) assigned | in_progress -> timed_out, by the broker
	DispatchRetried      EventType = "DISPATCH_RETRIED"       // (retry) failed | timed_out -> pending, by the broker
	DispatchDeadLettered EventType = "DISPATCH_DEAD_LETTERED" // (dlq) failed | timed_out, fact: the task is dead-lettered
	DispatchRequeued     EventType = "DISPATCH_REQUEUED"      // dead letter -> pending, retries reset, by an operator
	DispatchUpdated      EventType = "DISPATCH_UPDATED"       // any state, fact: metadata changed, by someone
	DispatchCancelled    EventType = "DISPATCH_CANCELLED"     // pending | assigned | in_progress -> failed, not retry eligible: the parent ended
)

// The seed's defaults for a new dispatch task.
const (
	DefaultMaxRetries     = 3
	DefaultTimeoutSeconds = 300
	DefaultPriority       = 0
	MaxDispatchPriority   = 10
	// maxBackoffShift caps the exponential backoff at 2^maxBackoffShift
	// times retry_backoff_seconds.
	maxBackoffShift = 16
)

// The reasons DISPATCH_DEAD_LETTERED and DISPATCH_TIMED_OUT record.
//
// Persisted: never change an existing value.
const (
	DeadLetterExhausted   = "retries_exhausted"  // retry_count reached max_retries
	DeadLetterNotEligible = "not_retry_eligible" // retry_eligible was false
	TimeoutDeadline       = "deadline"           // timeout_seconds passed since assigned (or started)
	TimeoutHeartbeat      = "heartbeat"          // heartbeat_seconds passed without a report
)

// Dispatch is what a dispatch.task task holds beyond the common Task
// fields (Priority 0-10, higher first; Metadata; ParentID; Context.Source):
// the seed's swarm_tasks columns plus the extensions of docs/broker.md.
// It is nil for the tasks of every other machine.
type Dispatch struct {
	Title                string    `msgpack:"title" json:"title"`
	Description          string    `msgpack:"description" json:"description,omitempty"`
	Owner                string    `msgpack:"owner" json:"owner"`
	RequiredCapabilities []string  `msgpack:"required_capabilities" json:"required_capabilities"`
	AssignedAgent        string    `msgpack:"assigned_agent" json:"assigned_agent,omitempty"`
	AssignedAt           time.Time `msgpack:"assigned_at" json:"assigned_at"`
	StartedAt            time.Time `msgpack:"started_at" json:"started_at"`
	CompletedAt          time.Time `msgpack:"completed_at" json:"completed_at"`
	LastProgressAt       time.Time `msgpack:"last_progress_at" json:"last_progress_at"`
	Progress             string    `msgpack:"progress" json:"progress,omitempty"`
	Result               string    `msgpack:"result" json:"result,omitempty"` // JSON text
	Error                string    `msgpack:"error" json:"error,omitempty"`
	RetryCount           int       `msgpack:"retry_count" json:"retry_count"`
	MaxRetries           int       `msgpack:"max_retries" json:"max_retries"`
	RetryEligible        bool      `msgpack:"retry_eligible" json:"retry_eligible"`
	TimeoutSeconds       int       `msgpack:"timeout_seconds" json:"timeout_seconds"`
	HeartbeatSeconds     int       `msgpack:"heartbeat_seconds" json:"heartbeat_seconds,omitempty"`
	RetryBackoffSeconds  int       `msgpack:"retry_backoff_seconds" json:"retry_backoff_seconds,omitempty"`
	RunAt                time.Time `msgpack:"run_at" json:"run_at"`         // not assigned before
	NotBefore            time.Time `msgpack:"not_before" json:"not_before"` // a retry's backoff: not assigned before
	TimeoutReason        string    `msgpack:"timeout_reason" json:"timeout_reason,omitempty"`
	DeadLettered         bool      `msgpack:"dead_lettered" json:"dead_lettered"`
	DeadLetterReason     string    `msgpack:"dead_letter_reason" json:"dead_letter_reason,omitempty"`
	DeadLetteredAt       time.Time `msgpack:"dead_lettered_at" json:"dead_lettered_at"`
	Requeues             int       `msgpack:"requeues" json:"requeues,omitempty"`
	LastAgent            string    `msgpack:"last_agent" json:"last_agent,omitempty"` // who caused the last event
	// MetadataJSON lists, sorted, the keys of the task's Metadata whose
	// values are JSON text (a number, an object, ...) rather than a
	// string; see DispatchCreatedBody.MetadataJSON.
	MetadataJSON []string `msgpack:"metadata_json" json:"metadata_json,omitempty"`
}

// ---- Event bodies. Every body names AgentID, the agent that caused the
// event (the seed's swarm_task_events.agent_id): the worker for its
// reports, "$broker" for the broker's decisions, the caller's X-Agent-ID
// for an operator's action.

// DispatchCreatedBody creates a dispatch task: none -(DISPATCH_CREATED)->
// pending. The body holds resolved values (see DispatchDefaults): the fold
// applies no default, so a recorded task never changes meaning.
type DispatchCreatedBody struct {
	AgentID              string            `msgpack:"agent_id" json:"agent_id"`
	Title                string            `msgpack:"title" json:"title"`
	Description          string            `msgpack:"description" json:"description,omitempty"`
	Owner                string            `msgpack:"owner" json:"owner"`
	RequiredCapabilities []string          `msgpack:"required_capabilities" json:"required_capabilities,omitempty"`
	Priority             int               `msgpack:"priority" json:"priority"`
	TimeoutSeconds       int               `msgpack:"timeout_seconds" json:"timeout_seconds"`
	MaxRetries           int               `msgpack:"max_retries" json:"max_retries"`
	RetryEligible        bool              `msgpack:"retry_eligible" json:"retry_eligible"`
	Source               string            `msgpack:"source" json:"source"`
	ParentTaskID         string            `msgpack:"parent_task_id" json:"parent_task_id,omitempty"`
	Metadata             map[string]string `msgpack:"metadata" json:"metadata,omitempty"`
	RunAt                time.Time         `msgpack:"run_at" json:"run_at"`
	HeartbeatSeconds     int               `msgpack:"heartbeat_seconds" json:"heartbeat_seconds,omitempty"`
	RetryBackoffSeconds  int               `msgpack:"retry_backoff_seconds" json:"retry_backoff_seconds,omitempty"`
	// ConcurrencyKey is the task's concurrency key (Task.ConcurrencyKey):
	// an agent worker's task for it runs under that key.
	ConcurrencyKey string `msgpack:"concurrency_key" json:"concurrency_key,omitempty"`
	// MetadataJSON lists the keys of Metadata whose values are JSON text
	// (any JSON value but a string: {"n": 5} is recorded as "n" -> "5"
	// with "n" listed), so that a reader gives each value back as it was
	// given. Keys not listed hold plain strings, as in every body written
	// before the field existed.
	MetadataJSON []string `msgpack:"metadata_json" json:"metadata_json,omitempty"`
}

// DispatchAssignedBody: pending -(DISPATCH_ASSIGNED)-> assigned to Worker.
type DispatchAssignedBody struct {
	AgentID string  `msgpack:"agent_id" json:"agent_id"`
	Worker  string  `msgpack:"worker" json:"worker"`
	Score   float64 `msgpack:"score" json:"score,omitempty"`
}

// DispatchReportBody is a worker's report: DISPATCH_STARTED (assigned ->
// in_progress), DISPATCH_PROGRESS (a fact in in_progress),
// DISPATCH_COMPLETED (in_progress -> completed, with Result as JSON text)
// and DISPATCH_FAILED (in_progress -> failed, with Error; RetryEligible,
// when set, replaces the task's flag). Only the assigned worker reports.
type DispatchReportBody struct {
	Kind          EventType `msgpack:"kind" json:"kind"`
	AgentID       string    `msgpack:"agent_id" json:"agent_id"`
	Message       string    `msgpack:"message" json:"message,omitempty"`
	Result        string    `msgpack:"result" json:"result,omitempty"`
	Error         string    `msgpack:"error" json:"error,omitempty"`
	RetryEligible *bool     `msgpack:"retry_eligible" json:"retry_eligible,omitempty"`
}

// DispatchTimedOutBody: (assigned | in_progress) -(DISPATCH_TIMED_OUT)->
// timed_out. The machine refuses it before the deadline Next announced.
type DispatchTimedOutBody struct {
	AgentID string `msgpack:"agent_id" json:"agent_id"`
}

// DispatchRetriedBody: (failed | timed_out) -(DISPATCH_RETRIED)-> pending,
// retry_count+1, assignment cleared. The next attempt waits
// retry_backoff_seconds * 2^retry_count plus JitterMS, drawn by the broker
// (at most that base delay) and recorded here so the fold stays pure.
type DispatchRetriedBody struct {
	AgentID  string `msgpack:"agent_id" json:"agent_id"`
	JitterMS int64  `msgpack:"jitter_ms" json:"jitter_ms,omitempty"`
}

// DispatchDeadLetteredBody is a fact in failed or timed_out: no retry is
// left (Reason says why), the task is in the dead-letter queue.
type DispatchDeadLetteredBody struct {
	AgentID string `msgpack:"agent_id" json:"agent_id"`
	Reason  string `msgpack:"reason" json:"reason"`
}

// DispatchRequeuedBody: a dead letter -(DISPATCH_REQUEUED)-> pending, its
// retries reset, by the operator AgentID.
type DispatchRequeuedBody struct {
	AgentID string `msgpack:"agent_id" json:"agent_id"`
	Reason  string `msgpack:"reason" json:"reason,omitempty"`
}

// DispatchUpdatedBody is a fact in any state: Metadata is merged into the
// task's (an empty value deletes the key), by AgentID. MetadataJSON lists
// the keys whose new values are JSON text, as in DispatchCreatedBody.
type DispatchUpdatedBody struct {
	AgentID      string            `msgpack:"agent_id" json:"agent_id"`
	Metadata     map[string]string `msgpack:"metadata" json:"metadata,omitempty"`
	MetadataJSON []string          `msgpack:"metadata_json" json:"metadata_json,omitempty"`
}

// DispatchCancelledBody: (pending | assigned | in_progress)
// -(DISPATCH_CANCELLED)-> failed with retry_eligible false, so that the
// broker dead-letters it (reason not_retry_eligible) by the seed's rule:
// the task's result is no longer wanted (the agent task whose tool call it
// ran ended or moved on). AgentID is who cancelled it, Reason why.
type DispatchCancelledBody struct {
	AgentID string `msgpack:"agent_id" json:"agent_id"`
	Reason  string `msgpack:"reason" json:"reason"`
}

func (*DispatchCancelledBody) EventType() EventType { return DispatchCancelled }

func (*DispatchCreatedBody) EventType() EventType      { return DispatchCreated }
func (*DispatchAssignedBody) EventType() EventType     { return DispatchAssigned }
func (*DispatchTimedOutBody) EventType() EventType     { return DispatchTimedOut }
func (*DispatchRetriedBody) EventType() EventType      { return DispatchRetried }
func (*DispatchDeadLetteredBody) EventType() EventType { return DispatchDeadLettered }
func (*DispatchRequeuedBody) EventType() EventType     { return DispatchRequeued }
func (*DispatchUpdatedBody) EventType() EventType      { return DispatchUpdated }

// EventType of a report is its Kind, DISPATCH_PROGRESS when unset.
func (b *DispatchReportBody) EventType() EventType {
	if b.Kind != "" {
		return b.Kind
	}
	return DispatchProgress
}

// DispatchEventTypes lists the event types of dispatch.task, in the order
// of docs/events.md.
var DispatchEventTypes = []EventType{DispatchCreated, DispatchAssigned, DispatchStarted, DispatchProgress,
	DispatchCompleted, DispatchFailed, DispatchTimedOut, DispatchRetried, DispatchDeadLettered,
	DispatchRequeued, DispatchUpdated, DispatchCancelled}

// newDispatchBody returns a new, empty body for a dispatch event type.
func newDispatchBody(et EventType) (Body, bool) {
	switch et {
	case DispatchCreated:
		return &DispatchCreatedBody{}, true
	case DispatchAssigned:
		return &DispatchAssignedBody{}, true
	case DispatchStarted, DispatchProgress, DispatchCompleted, DispatchFailed:
		return &DispatchReportBody{}, true
	case DispatchTimedOut:
		return &DispatchTimedOutBody{}, true
	case DispatchRetried:
		return &DispatchRetriedBody{}, true
	case DispatchDeadLettered:
		return &DispatchDeadLetteredBody{}, true
	case DispatchRequeued:
		return &DispatchRequeuedBody{}, true
	case DispatchUpdated:
		return &DispatchUpdatedBody{}, true
	case DispatchCancelled:
		return &DispatchCancelledBody{}, true
	}
	return nil, false
}

// DispatchDefaults returns b with the seed's defaults filled in where the
// caller gave nothing: owner (the creating agent), source "agent",
// timeout_seconds 300. max_retries 3 and retry_eligible true are the
// caller's to resolve (zero is a valid choice for both).
func DispatchDefaults(b DispatchCreatedBody) DispatchCreatedBody {
	if b.Owner == "" {
		b.Owner = b.AgentID
	}
	if b.Source == "" {
		b.Source = "agent"
	}
	if b.TimeoutSeconds == 0 {
		b.TimeoutSeconds = DefaultTimeoutSeconds
	}
	return b
}

// CheckDispatchCreated says what is wrong with a creating body, or "": the
// checks Apply makes, for callers that want to refuse bad input before
// appending it.
func CheckDispatchCreated(b *DispatchCreatedBody) string {
	switch {
	case strings.TrimSpace(b.Title) == "":
		return "title is required"
	case b.Priority < 0 || b.Priority > MaxDispatchPriority:
		return sprintf("priority %d is not in 0-%d", b.Priority, MaxDispatchPriority)
	case b.TimeoutSeconds <= 0:
		return sprintf("timeout_seconds %d: want at least 1", b.TimeoutSeconds)
	case b.MaxRetries < 0:
		return sprintf("max_retries %d: want at least 0", b.MaxRetries)
	case b.HeartbeatSeconds < 0:
		return sprintf("heartbeat_seconds %d: want at least 0", b.HeartbeatSeconds)
	case b.RetryBackoffSeconds < 0:
		return sprintf("retry_backoff_seconds %d: want at least 0", b.RetryBackoffSeconds)
	case len(b.ConcurrencyKey) > MaxConcurrencyKey:
		return sprintf("concurrency_key is %d bytes, more than %d", len(b.ConcurrencyKey), MaxConcurrencyKey)
	}
	for _, c := range b.RequiredCapabilities {
		if strings.TrimSpace(c) == "" {
			return "an empty required capability"
		}
	}
	return checkMetadataJSON(b.Metadata, b.MetadataJSON)
}

// checkMetadataJSON says what is wrong with a list of JSON-valued
// metadata keys, or "": each must name a key of m whose value is JSON
// text, once.
func checkMetadataJSON(m map[string]string, keys []string) string {
	for i, k := range keys {
		v, ok := m[k]
		switch {
		case !ok:
			return sprintf("metadata_json names %q, which metadata does not hold", k)
		case !json.Valid([]byte(v)):
			return sprintf("metadata %q: the value is not JSON text", k)
		case slices.Contains(keys[:i], k):
			return sprintf("metadata_json names %q twice", k)
		}
	}
	return ""
}

// dispatchMachine is dispatch.task version 1, the seed's broker machine
// (dispatch-task-state-machine.md). Its edges:
//
//	none        -(DISPATCH_CREATED)->   pending
//	pending     -(DISPATCH_ASSIGNED)->  assigned      (broker; not before run_at or a retry's backoff)
//	assigned    -(DISPATCH_STARTED)->   in_progress   (the assigned worker)
//	assigned    -(DISPATCH_TIMED_OUT)-> timed_out     (broker; not before the deadline)
//	in_progress -(DISPATCH_COMPLETED)-> completed     (the assigned worker)
//	in_progress -(DISPATCH_FAILED)->    failed        (the assigned worker)
//	in_progress -(DISPATCH_TIMED_OUT)-> timed_out     (broker; not before the deadline)
//	failed      -(DISPATCH_RETRIED)->   pending       (retry_eligible and retry_count < max_retries)
//	timed_out   -(DISPATCH_RETRIED)->   pending       (the same)
//	failed | timed_out (dead-lettered) -(DISPATCH_REQUEUED)-> pending (operator; retries reset)
//	pending | assigned | in_progress -(DISPATCH_CANCELLED)-> failed (retry_eligible false: dead-lettered next)
//
// Facts, which never move the state nor add to History:
//
//	in_progress: DISPATCH_PROGRESS (the assigned worker's sign of life)
//	failed, timed_out: DISPATCH_DEAD_LETTERED (once, when no retry is left)
//	every state: DISPATCH_UPDATED (metadata)
//
// Deadlines come from event times only: assigned_at + timeout_seconds in
// assigned, started_at (else assigned_at) + timeout_seconds in
// in_progress, and with heartbeat_seconds the last report (or the
// assignment) + heartbeat_seconds, whichever is first.
type dispatchMachine struct{}

// The legal event types of each state, transitions first, then facts.
// Never modified.
var (
	legalDNone       = []EventType{DispatchCreated}
	legalDPending    = []EventType{DispatchAssigned, DispatchCancelled, DispatchUpdated}
	legalDAssigned   = []EventType{DispatchStarted, DispatchTimedOut, DispatchCancelled, DispatchUpdated}
	legalDInProgress = []EventType{DispatchCompleted, DispatchFailed, DispatchTimedOut, DispatchCancelled, DispatchProgress, DispatchUpdated}
	legalDEnded      = []EventType{DispatchRetried, DispatchRequeued, DispatchDeadLettered, DispatchUpdated}
	legalDCompleted  = []EventType{DispatchUpdated}
)

func legalDispatch(s State) []EventType {
	switch s {
	case StateNone:
		return legalDNone
	case StatePending:
		return legalDPending
	case StateAssigned:
		return legalDAssigned
	case StateInProgress:
		return legalDInProgress
	case StateFailed, StateTimedOut:
		return legalDEnded
	case StateCompleted:
		return legalDCompleted
	}
	return nil
}

func (dispatchMachine) Ref() MachineRef { return DispatchMachine }

func (dispatchMachine) Legal(s State) []EventType { return cloneSlice(legalDispatch(s)) }

func (dispatchMachine) States() []State { return cloneSlice(DispatchStates) }

func (dispatchMachine) CanTransition(s State, et EventType) bool {
	return slices.Contains(legalDispatch(s), et)
}

// Apply implements Machine.
func (dispatchMachine) Apply(t Task, ev Event) (Task, error) {
	n := t
	if err := applyDispatch(&n, &ev); err != nil {
		return t, err
	}
	return n, nil
}

// DispatchDeadline returns when t's current attempt times out and why
// (TimeoutDeadline or TimeoutHeartbeat), for a task assigned or in
// progress; the zero time otherwise.
func DispatchDeadline(t *Task) (time.Time, string) {
	d := t.Dispatch
	if d == nil || (t.State != StateAssigned && t.State != StateInProgress) {
		return time.Time{}, ""
	}
	start := d.AssignedAt
	if t.State == StateInProgress && !d.StartedAt.IsZero() {
		start = d.StartedAt
	}
	at, why := start.Add(time.Duration(d.TimeoutSeconds)*time.Second), TimeoutDeadline
	if d.HeartbeatSeconds > 0 {
		last := d.AssignedAt
		if d.LastProgressAt.After(last) {
			last = d.LastProgressAt
		}
		if hb := last.Add(time.Duration(d.HeartbeatSeconds) * time.Second); hb.Before(at) {
			at, why = hb, TimeoutHeartbeat
		}
	}
	return at, why
}

// DispatchRetryDue reports whether a failed or timed-out task t is retried
// (true) or dead-lettered (false, with the reason), as the seed says:
// retry when retry_eligible and retry_count < max_retries.
func DispatchRetryDue(t *Task) (bool, string) {
	d := t.Dispatch
	switch {
	case d == nil:
		return false, ""
	case !d.RetryEligible:
		return false, DeadLetterNotEligible
	case d.RetryCount >= d.MaxRetries:
		return false, DeadLetterExhausted
	}
	return true, ""
}

// DispatchBackoff is the base delay before the next attempt of t:
// retry_backoff_seconds * 2^retry_count (0 without backoff, the seed's
// immediate retry). A retry's jitter may add at most as much again.
func DispatchBackoff(t *Task) time.Duration {
	d := t.Dispatch
	if d == nil || d.RetryBackoffSeconds <= 0 {
		return 0
	}
	return time.Duration(d.RetryBackoffSeconds) * time.Second << min(d.RetryCount, maxBackoffShift)
}

// notBefore returns when a pending dispatch task may be assigned: the
// later of run_at and a retry's backoff (zero: at once).
func (d *Dispatch) notBefore() time.Time {
	if d.NotBefore.After(d.RunAt) {
		return d.NotBefore
	}
	return d.RunAt
}

// Next implements Machine:
//
//	pending:              assign to a worker, not before run_at or the backoff (At)
//	assigned, in_progress: a worker runs it; at the deadline (At) the broker times it out
//	failed, timed_out:    retry if eligible and retries remain, else dead-letter
//	completed, dead letters: nothing (an operator may requeue a dead letter)
func (dispatchMachine) Next(t *Task) Action {
	d := t.Dispatch
	if d == nil {
		return Action{}
	}
	switch t.State {
	case StatePending:
		return Action{Kind: ActAssign, At: d.notBefore()}
	case StateAssigned, StateInProgress:
		at, _ := DispatchDeadline(t)
		return Action{Kind: ActWaitWorker, At: at, Task: d.AssignedAgent, Done: DispatchTimedOut, Started: t.State == StateInProgress}
	case StateFailed, StateTimedOut:
		if d.DeadLettered {
			return Action{}
		}
		if ok, _ := DispatchRetryDue(t); ok {
			return Action{Kind: ActRetry}
		}
		return Action{Kind: ActDeadLetter}
	}
	return Action{}
}

// IsDeadLetter reports whether t is a dispatch task in the dead-letter
// queue.
func (t *Task) IsDeadLetter() bool { return t.Dispatch != nil && t.Dispatch.DeadLettered }

// applyDispatch folds ev into n in place; on error n is unchanged.
func applyDispatch(n *Task, ev *Event) error {
	from := n.State
	if !(dispatchMachine{}).CanTransition(from, ev.Type) {
		return &TransitionError{From: from, Event: ev.Type}
	}
	if ev.Version != n.Version+1 {
		return eventErr(from, ev.Type, "out of order: version %d, want %d", ev.Version, n.Version+1)
	}
	if from != StateNone && ev.Stream != n.ID {
		return eventErr(from, ev.Type, "stream %q is not task %q", ev.Stream, n.ID)
	}
	if from != StateNone && n.Dispatch == nil {
		return eventErr(from, ev.Type, "task %q has no dispatch fields", n.ID)
	}
	var err error
	if from == StateNone {
		err = dispatchCreate(n, ev)
	} else {
		err = dispatchStep(n, from, ev)
	}
	if err != nil {
		return err
	}
	applied(n, ev)
	return nil
}

func dispatchCreate(n *Task, ev *Event) error {
	b, err := bodyAs[DispatchCreatedBody](StateNone, ev)
	if err != nil {
		return err
	}
	if bad := CheckDispatchCreated(b); bad != "" {
		return eventErr(StateNone, ev.Type, "%s", bad)
	}
	if ev.Stream == "" {
		return eventErr(StateNone, ev.Type, "empty stream: the stream name is the task id")
	}
	if b.ParentTaskID == ev.Stream {
		return eventErr(StateNone, ev.Type, "a task cannot be its own parent")
	}
	*n = Task{
		ID:        ev.Stream,
		Machine:   DispatchMachine,
		State:     StatePending,
		CreatedAt: ev.Time.UTC(),
		Priority:  b.Priority,
		Metadata:  b.Metadata,
		ParentID:  b.ParentTaskID,
		// The broker assigns by priority; the key is the agent's, for
		// the agent task a worker runs for it.
		ConcurrencyKey: b.ConcurrencyKey,
		Context:        Context{InputText: b.Title, Source: b.Source},
		History:        []Transition{transition(StateNone, StatePending, ev)},
		Dispatch: &Dispatch{
			Title: b.Title, Description: b.Description, Owner: b.Owner,
			RequiredCapabilities: b.RequiredCapabilities,
			MaxRetries:           b.MaxRetries, RetryEligible: b.RetryEligible, TimeoutSeconds: b.TimeoutSeconds,
			HeartbeatSeconds: b.HeartbeatSeconds, RetryBackoffSeconds: b.RetryBackoffSeconds,
			RunAt: b.RunAt.UTC(), LastAgent: b.AgentID, MetadataJSON: sortedKeys(b.MetadataJSON),
		},
	}
	return nil
}

// dispatchStep applies every event but the creating one. Each case checks
// the body fully before it writes: n.Dispatch is copied before any write,
// so the task the caller holds never changes.
func dispatchStep(n *Task, from State, ev *Event) error {
	at := ev.Time.UTC()
	d := *n.Dispatch // written back at the end: n's old Dispatch is never modified
	switch ev.Type {
	case DispatchAssigned:
		b, err := bodyAs[DispatchAssignedBody](from, ev)
		if err != nil {
			return err
		}
		if b.Worker == "" {
			return eventErr(from, ev.Type, "no worker")
		}
		if nb := d.notBefore(); at.Before(nb) {
			return eventErr(from, ev.Type, "assigned at %s, before %s", stamp(at), stamp(nb))
		}
		d.AssignedAgent, d.AssignedAt, d.LastAgent = b.Worker, at, b.AgentID
		moveTo(n, from, StateAssigned, ev)

	case DispatchStarted, DispatchProgress, DispatchCompleted, DispatchFailed:
		b, err := bodyAs[DispatchReportBody](from, ev)
		if err != nil {
			return err
		}
		if b.AgentID != d.AssignedAgent {
			return eventErr(from, ev.Type, "reported by %q, but the task is assigned to %q", b.AgentID, d.AssignedAgent)
		}
		d.LastAgent, d.LastProgressAt = b.AgentID, at
		if b.Message != "" {
			d.Progress = b.Message
		}
		switch ev.Type {
		case DispatchStarted:
			d.StartedAt = at
			moveTo(n, from, StateInProgress, ev)
		case DispatchCompleted:
			d.Result, d.CompletedAt = b.Result, at
			moveTo(n, from, StateCompleted, ev)
		case DispatchFailed:
			if b.Error == "" {
				return eventErr(from, ev.Type, "no error")
			}
			d.Error = b.Error
			if b.RetryEligible != nil {
				d.RetryEligible = *b.RetryEligible
			}
			moveTo(n, from, StateFailed, ev)
		}

	case DispatchCancelled:
		b, err := bodyAs[DispatchCancelledBody](from, ev)
		if err != nil {
			return err
		}
		if b.AgentID == "" {
			return eventErr(from, ev.Type, "a cancel names who cancelled")
		}
		d.Error = "cancelled"
		if b.Reason != "" {
			d.Error += ": " + b.Reason
		}
		d.RetryEligible, d.LastAgent, d.TimeoutReason = false, b.AgentID, ""
		moveTo(n, from, StateFailed, ev)

	case DispatchTimedOut:
		b, err := bodyAs[DispatchTimedOutBody](from, ev)
		if err != nil {
			return err
		}
		due, why := DispatchDeadline(n)
		if at.Before(due) {
			return eventErr(from, ev.Type, "timed out at %s, before its deadline %s", stamp(at), stamp(due))
		}
		d.TimeoutReason, d.LastAgent = why, b.AgentID
		moveTo(n, from, StateTimedOut, ev)

	case DispatchRetried:
		b, err := bodyAs[DispatchRetriedBody](from, ev)
		if err != nil {
			return err
		}
		if d.DeadLettered {
			return eventErr(from, ev.Type, "the task is dead-lettered: only a requeue brings it back")
		}
		if ok, why := DispatchRetryDue(n); !ok {
			return eventErr(from, ev.Type, "no retry is due: %s", why)
		}
		base := DispatchBackoff(n)
		if b.JitterMS < 0 || time.Duration(b.JitterMS)*time.Millisecond > base {
			return eventErr(from, ev.Type, "jitter %dms is not within 0-%dms", b.JitterMS, base.Milliseconds())
		}
		d.RetryCount++
		d.NotBefore = time.Time{}
		if base > 0 {
			d.NotBefore = at.Add(base + time.Duration(b.JitterMS)*time.Millisecond)
		}
		clearAttempt(&d)
		d.LastAgent = b.AgentID
		moveTo(n, from, StatePending, ev)

	case DispatchDeadLettered:
		b, err := bodyAs[DispatchDeadLetteredBody](from, ev)
		if err != nil {
			return err
		}
		if d.DeadLettered {
			return eventErr(from, ev.Type, "already dead-lettered")
		}
		ok, why := DispatchRetryDue(n)
		if ok {
			return eventErr(from, ev.Type, "a retry is due (retry %d of %d)", d.RetryCount+1, d.MaxRetries)
		}
		if b.Reason != why {
			return eventErr(from, ev.Type, "reason %q, want %q", b.Reason, why)
		}
		d.DeadLettered, d.DeadLetterReason, d.DeadLetteredAt, d.LastAgent = true, why, at, b.AgentID

	case DispatchRequeued:
		b, err := bodyAs[DispatchRequeuedBody](from, ev)
		if err != nil {
			return err
		}
		if !d.DeadLettered {
			return eventErr(from, ev.Type, "not a dead letter")
		}
		if b.AgentID == "" {
			return eventErr(from, ev.Type, "no agent: a requeue records who did it")
		}
		d.DeadLettered, d.DeadLetterReason, d.DeadLetteredAt = false, "", time.Time{}
		d.RetryCount, d.NotBefore, d.RetryEligible = 0, time.Time{}, true
		d.Requeues++
		clearAttempt(&d)
		d.LastAgent = b.AgentID
		moveTo(n, from, StatePending, ev)

	case DispatchUpdated:
		b, err := bodyAs[DispatchUpdatedBody](from, ev)
		if err != nil {
			return err
		}
		if b.AgentID == "" {
			return eventErr(from, ev.Type, "no agent: an update records who did it")
		}
		if bad := checkMetadataJSON(b.Metadata, b.MetadataJSON); bad != "" {
			return eventErr(from, ev.Type, "%s", bad)
		}
		m := make(map[string]string, len(n.Metadata)+len(b.Metadata))
		for k, v := range n.Metadata {
			m[k] = v
		}
		isJSON := make(map[string]bool, len(d.MetadataJSON)+len(b.MetadataJSON))
		for _, k := range d.MetadataJSON {
			isJSON[k] = true
		}
		for k, v := range b.Metadata {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
			isJSON[k] = v != "" && slices.Contains(b.MetadataJSON, k)
		}
		if len(m) == 0 {
			m = nil
		}
		var keys []string
		for k, j := range isJSON {
			if j {
				keys = append(keys, k)
			}
		}
		n.Metadata = m
		d.MetadataJSON = sortedKeys(keys)
		d.LastAgent = b.AgentID
	}
	n.Dispatch = &d
	return nil
}

// sortedKeys returns keys sorted, in a new slice; nil when empty.
func sortedKeys(keys []string) []string {
	if len(keys) == 0 {
		return nil
	}
	s := slices.Clone(keys)
	slices.Sort(s)
	return s
}

// clearAttempt clears the assignment fields, as a retry does.
func clearAttempt(d *Dispatch) {
	d.AssignedAgent, d.AssignedAt, d.StartedAt, d.LastProgressAt = "", time.Time{}, time.Time{}, time.Time{}
	d.Progress, d.TimeoutReason, d.Error, d.Result = "", "", "", ""
}

// describeDispatch renders the broker's fields of a dispatch task for
// Describe.
func describeDispatch(b *strings.Builder, d *Dispatch) {
	fmt.Fprintf(b, "dispatch: title=%s owner=%s caps=%s\n", text(d.Title), orDash(d.Owner), orDash(strings.Join(d.RequiredCapabilities, ",")))
	fmt.Fprintf(b, "retries: %d/%d eligible=%t timeout=%ds", d.RetryCount, d.MaxRetries, d.RetryEligible, d.TimeoutSeconds)
	if d.HeartbeatSeconds > 0 {
		fmt.Fprintf(b, " heartbeat=%ds", d.HeartbeatSeconds)
	}
	if d.RetryBackoffSeconds > 0 {
		fmt.Fprintf(b, " backoff=%ds", d.RetryBackoffSeconds)
	}
	b.WriteByte('\n')
	if !d.RunAt.IsZero() || !d.NotBefore.IsZero() {
		fmt.Fprintf(b, "not before: run_at=%s backoff=%s\n", stamp(d.RunAt), stamp(d.NotBefore))
	}
	if d.AssignedAgent != "" {
		fmt.Fprintf(b, "assigned: %s at=%s started=%s last_report=%s\n", d.AssignedAgent, stamp(d.AssignedAt), stamp(d.StartedAt), stamp(d.LastProgressAt))
	}
	if d.Progress != "" {
		fmt.Fprintf(b, "progress: %s\n", text(d.Progress))
	}
	if d.Result != "" {
		fmt.Fprintf(b, "result: %s\n", text(d.Result))
	}
	if d.Error != "" {
		fmt.Fprintf(b, "error: %s\n", text(d.Error))
	}
	if d.TimeoutReason != "" {
		fmt.Fprintf(b, "timed out: %s\n", d.TimeoutReason)
	}
	if d.DeadLettered {
		fmt.Fprintf(b, "dead-lettered: %s at=%s\n", d.DeadLetterReason, stamp(d.DeadLetteredAt))
	}
	if d.Requeues > 0 {
		fmt.Fprintf(b, "requeued: %d times\n", d.Requeues)
	}
	fmt.Fprintf(b, "last agent: %s\n", orDash(d.LastAgent))
}

// describeDispatchEvent renders a dispatch body for DescribeEvent; false
// when body is not one.
func describeDispatchEvent(w func(string, ...any), body Body) bool {
	switch x := body.(type) {
	case *DispatchCreatedBody:
		w("agent=%s title=%s priority=%d timeout=%ds retries=%d eligible=%t", orDash(x.AgentID), text(x.Title), x.Priority,
			x.TimeoutSeconds, x.MaxRetries, x.RetryEligible)
		if len(x.RequiredCapabilities) > 0 {
			w("caps=%s", strings.Join(x.RequiredCapabilities, ","))
		}
		if !x.RunAt.IsZero() {
			w("run_at=%s", stamp(x.RunAt))
		}
		if x.HeartbeatSeconds > 0 {
			w("heartbeat=%ds", x.HeartbeatSeconds)
		}
		if x.RetryBackoffSeconds > 0 {
			w("backoff=%ds", x.RetryBackoffSeconds)
		}
		if x.ParentTaskID != "" {
			w("parent=%s", x.ParentTaskID)
		}
	case *DispatchAssignedBody:
		w("agent=%s worker=%s", orDash(x.AgentID), orDash(x.Worker))
	case *DispatchReportBody:
		w("agent=%s", orDash(x.AgentID))
		if x.Message != "" {
			w("message=%s", text(x.Message))
		}
		if x.Result != "" {
			w("result=%s", text(x.Result))
		}
		if x.Error != "" {
			w("error=%s", text(x.Error))
		}
		if x.RetryEligible != nil {
			w("retry_eligible=%t", *x.RetryEligible)
		}
	case *DispatchTimedOutBody:
		w("agent=%s", orDash(x.AgentID))
	case *DispatchRetriedBody:
		w("agent=%s", orDash(x.AgentID))
		if x.JitterMS != 0 {
			w("jitter=%dms", x.JitterMS)
		}
	case *DispatchDeadLetteredBody:
		w("agent=%s reason=%s", orDash(x.AgentID), orDash(x.Reason))
	case *DispatchRequeuedBody:
		w("agent=%s", orDash(x.AgentID))
		if x.Reason != "" {
			w("reason=%s", text(x.Reason))
		}
	case *DispatchUpdatedBody:
		w("agent=%s metadata=%s", orDash(x.AgentID), pairs(x.Metadata))
	case *DispatchCancelledBody:
		w("agent=%s reason=%s", orDash(x.AgentID), text(x.Reason))
	default:
		return false
	}
	return true
}

// DispatchFailure words why dispatch task t ended without a result, for
// the caller that waited for it (a worker tool's call): "dead-lettered
// after 3 timeouts (heartbeat_seconds=10)", "dead-lettered after 2
// failures: disk full", "dead-lettered after 1 failure (retry_eligible=
// false): bad input". It counts the attempts since the last requeue from
// t's History, and names the last attempt's deadline or error.
func DispatchFailure(t *Task) string {
	d := t.Dispatch
	if d == nil {
		return "not a dispatch task"
	}
	timeouts, failures := 0, 0
	for _, h := range t.History {
		switch {
		case h.Event == DispatchRequeued:
			timeouts, failures = 0, 0
		case h.To == StateTimedOut:
			timeouts++
		case h.To == StateFailed:
			failures++
		}
	}
	var parts []string
	plural := func(n int, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	if failures > 0 {
		parts = append(parts, plural(failures, "failure"))
	}
	if timeouts > 0 {
		parts = append(parts, plural(timeouts, "timeout"))
	}
	s := "dead-lettered"
	if !d.DeadLettered {
		s = "ended without a result"
	}
	if len(parts) > 0 {
		s += " after " + strings.Join(parts, " and ")
	}
	switch {
	case d.DeadLetterReason == DeadLetterNotEligible:
		s += " (retry_eligible=false)"
	case t.State == StateTimedOut && d.TimeoutReason == TimeoutHeartbeat:
		s += fmt.Sprintf(" (heartbeat_seconds=%d)", d.HeartbeatSeconds)
	case t.State == StateTimedOut:
		s += fmt.Sprintf(" (timeout_seconds=%d)", d.TimeoutSeconds)
	}
	if t.State == StateFailed && d.Error != "" {
		s += ": " + d.Error
	}
	return s
}
