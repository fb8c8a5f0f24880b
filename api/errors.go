package api

// ErrorBody is the body of every error answer of both APIs:
//
//	{"error": {"code": "not_found", "message": "no such task"}}
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is an error's stable code, which clients switch on, and its
// message, which people read.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Items lists the refused items of a batch (POST /v1/tasks:batch,
	// /api/v1/tasks:batch), each by its index; omitted otherwise.
	Items []ItemError `json:"items,omitempty"`
}

// ItemError is one refused item of a batch: nothing of the batch was
// created.
type ItemError struct {
	Index   int    `json:"index"` // in the request's tasks, from 0
	Code    string `json:"code"`
	Message string `json:"message"`
}

// The error codes of the APIs (docs/api.md#errors). A client switches on
// the code, never on the message.
const (
	CodeBadRequest         = "bad_request"            // 400: malformed JSON, an unknown field or parameter, an invalid value
	CodeUnauthorized       = "unauthorized"           // 401: a missing or wrong bearer token
	CodeNotFound           = "not_found"              // 404: an unknown task, worker or route
	CodeMethodNotAllowed   = "method_not_allowed"     // 405: a known route with another method
	CodeConflict           = "conflict"               // 409: the task's state does not allow it
	CodeKeyReused          = "idempotency_key_reused" // 409: an Idempotency-Key sent again with another request
	CodeBeyondHead         = "beyond_head"            // 409: a resume position past the log's head
	CodeTooLarge           = "payload_too_large"      // 413: a body over --max-body-bytes
	CodeInternal           = "internal"               // 500: a bug or an I/O failure; see the daemon's log
	CodeShuttingDown       = "shutting_down"          // 503: the daemon is stopping
	CodeClusterUnavailable = "cluster_unavailable"    // 503: --cluster could not take the write now; retry
	CodeStorageUnavailable = "storage_unavailable"    // 503: the event log refuses writes or found corruption
)

// Headers the APIs read or write.
const (
	// HeaderIdempotencyKey makes a creating request safe to retry
	// (docs/api.md#retries-idempotency-key).
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReplayed is "true" on the answer to a request that repeated
	// an earlier one under its Idempotency-Key, or a report already made.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderAgentID names the caller on every /api/v1 route.
	HeaderAgentID = "X-Agent-ID"
	// HeaderLastEventID resumes an event stream after that sequence.
	HeaderLastEventID = "Last-Event-ID"
)
