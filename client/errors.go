package client

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/pegasus-engine/pegasus/api"
)

// Error is an error answer of the server: its HTTP status and the code
// and message of its body (api.ErrorBody). Match it with errors.Is
// against the sentinels below, which compare the code (and the status
// when the answer had no code, a proxy's 502 say), or read its fields
// with errors.As.
type Error struct {
	Status  int    // the HTTP status
	Code    string // the API's stable code (api.Code...), empty when the body had none
	Message string // the server's message, empty when the body had none
	// Items are the refused items of a batch (SubmitMany, CreateMany),
	// each by its index; nil otherwise.
	Items []api.ItemError
}

func (e *Error) Error() string {
	switch {
	case e.Code == "" && e.Message == "":
		return fmt.Sprintf("client: the server answered %d %s", e.Status, http.StatusText(e.Status))
	case e.Code == "":
		return fmt.Sprintf("client: %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("client: %s (%d): %s", e.Code, e.Status, e.Message)
}

// Is reports whether target is one of the sentinels that e's code (or,
// without a code, its status) stands for.
func (e *Error) Is(target error) bool {
	for _, k := range kinds {
		if k.err != target {
			continue
		}
		for _, c := range k.codes {
			if c == e.Code {
				return true
			}
		}
		for _, s := range k.statuses {
			if s == e.Status && (e.Code == "" || k.anyCode) {
				return true
			}
		}
	}
	return false
}

// The sentinels an *Error matches (errors.Is), by the API's codes
// (docs/api.md#errors).
var (
	// ErrBadRequest: 400 bad_request, the request is malformed or invalid.
	ErrBadRequest = errors.New("client: bad request")
	// ErrUnauthorized: 401 unauthorized, a missing or wrong token.
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrNotFound: 404 not_found, no such task, worker or route.
	ErrNotFound = errors.New("client: not found")
	// ErrConflict: 409 conflict, the task's state does not allow the
	// request (or a worker reported on a task no longer assigned to it).
	ErrConflict = errors.New("client: conflict")
	// ErrKeyReused: 409 idempotency_key_reused, an Idempotency-Key sent
	// again with another request.
	ErrKeyReused = errors.New("client: idempotency key reused for another request")
	// ErrBeyondHead: 409 beyond_head, a resume position past the log's
	// head (another data directory, or one restored from an older copy).
	ErrBeyondHead = errors.New("client: resume position beyond the log's head")
	// ErrTooLarge: 413 payload_too_large.
	ErrTooLarge = errors.New("client: request body too large")
	// ErrInternal: 500 internal, a bug or an I/O failure on the server.
	ErrInternal = errors.New("client: internal server error")
	// ErrUnavailable: 503 (shutting_down, cluster_unavailable,
	// storage_unavailable), or a 502 or 504 from a proxy: the request
	// was not done, and may be retried later.
	ErrUnavailable = errors.New("client: server unavailable")
)

// ErrUnreachable wraps the error of a request that got no answer at all
// (a refused or reset connection, a DNS failure): it may or may not have
// been done, unless it was a GET.
var ErrUnreachable = errors.New("client: cannot reach the server")

// ErrStreamEnded is returned by Subscription.Next when the event stream
// ended, closed by the server or broken (then it wraps the read error),
// and the client may not reconnect (Options.MaxAttempts is 1).
var ErrStreamEnded = errors.New("client: the event stream ended")

type kind struct {
	err      error
	codes    []string
	statuses []int
	anyCode  bool // the statuses match whatever the code
}

var kinds = []kind{
	{err: ErrBadRequest, codes: []string{api.CodeBadRequest}, statuses: []int{http.StatusBadRequest}},
	{err: ErrUnauthorized, codes: []string{api.CodeUnauthorized}, statuses: []int{http.StatusUnauthorized}},
	{err: ErrNotFound, codes: []string{api.CodeNotFound}, statuses: []int{http.StatusNotFound}},
	{err: ErrConflict, codes: []string{api.CodeConflict}},
	{err: ErrKeyReused, codes: []string{api.CodeKeyReused}},
	{err: ErrBeyondHead, codes: []string{api.CodeBeyondHead}},
	{err: ErrTooLarge, codes: []string{api.CodeTooLarge}, statuses: []int{http.StatusRequestEntityTooLarge}},
	{err: ErrInternal, codes: []string{api.CodeInternal}, statuses: []int{http.StatusInternalServerError}},
	{err: ErrUnavailable, codes: []string{api.CodeShuttingDown, api.CodeClusterUnavailable, api.CodeStorageUnavailable},
		statuses: []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}, anyCode: true},
}

// Permanent marks a handler's error as final: the worker fails the task
// with retry_eligible false, so the broker dead-letters it at once rather
// than retry it. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }
