package api

import (
	"encoding/json"
	"time"
)

// Event is an event in its one JSON form (docs/events.md): the envelope,
// the stored body bytes, and the body decoded for people. It is what
// GET /v1/events, GET /v1/tasks/{id}/events and each message of the event
// stream carry. Its fields are those of replay.EventJSON, in the same
// order with the same types, so the two convert into each other.
type Event struct {
	ID          string            `json:"id"`
	Seq         uint64            `json:"seq"`     // the global sequence
	Stream      string            `json:"stream"`  // a task id, or "$system", "$inputs", ...
	Version     uint64            `json:"version"` // the position in its stream, from 1
	Type        string            `json:"type"`
	Schema      uint16            `json:"schema"`
	Time        time.Time         `json:"time"`
	Causation   string            `json:"causation,omitempty"`
	Correlation string            `json:"correlation,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// Body is the stored body bytes, as the log holds them (standard
	// base64 in JSON).
	Body []byte `json:"body"`
	// Data is the body decoded, absent when it does not decode.
	Data json.RawMessage `json:"data,omitempty"`
	// DecodeError says why the body did not decode.
	DecodeError string `json:"decode_error,omitempty"`
	// Summary is the decoded body on one line, as key=value pairs.
	Summary string `json:"summary,omitempty"`
}

// EventPage is GET /v1/events: events after a sequence. Continue with
// after_seq=NextAfterSeq; Head is the log's last sequence.
type EventPage struct {
	Events       []Event `json:"events"`
	NextAfterSeq uint64  `json:"next_after_seq"`
	Head         uint64  `json:"head"`
}

// TaskEvents is GET /v1/tasks/{id}/events: a task's events in order.
type TaskEvents struct {
	TaskID string  `json:"task_id"`
	Events []Event `json:"events"`
}

// DispatchEvent is an event of a broker task, with the agent that caused
// it (GET /api/v1/tasks/{id}/events).
type DispatchEvent struct {
	Event
	AgentID string `json:"agent_id"`
}

// DispatchEvents is GET /api/v1/tasks/{id}/events.
type DispatchEvents struct {
	Events []DispatchEvent `json:"events"`
}
