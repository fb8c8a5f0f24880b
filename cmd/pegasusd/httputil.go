package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
)

// apiError is the body of every error answer:
// {"error": {"code": "...", "message": "..."}}.
type apiError struct {
	status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// The error codes of the API. Clients switch on the code, not the message.
const (
	codeBadRequest     = "bad_request"       // malformed JSON, unknown field, invalid value
	codeUnauthorized   = "unauthorized"      // missing or wrong bearer token
	codeNotFound       = "not_found"         // unknown task or route
	codeConflict       = "conflict"          // illegal transition for the task's state
	codeTooLarge       = "payload_too_large" // body over --max-body-bytes
	codeUnavailable    = "shutting_down"     // the daemon is stopping
	codeInternal       = "internal"          // a bug or an I/O failure; see the daemon's log
	codeMethodNotAllwd = "method_not_allowed"
)

func errBadRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, Code: codeBadRequest, Message: fmt.Sprintf(format, args...)}
}

func errNotFound(format string, args ...any) *apiError {
	return &apiError{status: http.StatusNotFound, Code: codeNotFound, Message: fmt.Sprintf(format, args...)}
}

func errConflict(format string, args ...any) *apiError {
	return &apiError{status: http.StatusConflict, Code: codeConflict, Message: fmt.Sprintf(format, args...)}
}

var errShuttingDown = &apiError{status: http.StatusServiceUnavailable, Code: codeUnavailable, Message: "the daemon is shutting down"}

// writeJSON writes v with status. Encoding errors are the server's bug and
// only logged: the status line is already out.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pegasus"`)
	}
	writeJSON(w, e.status, map[string]*apiError{"error": e})
}

// decodeBody reads one JSON object into v, whatever the Content-Type says
// (curl -d sends form encoding by default; the body decides): unknown
// fields, trailing data
// and bodies over the limit (already wrapped by http.MaxBytesReader) are
// refused with the matching API error. An empty body is accepted when
// optional, leaving v as it is.
func decodeBody(r *http.Request, v any, optional bool) *apiError {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyReadError(err)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if optional {
			return nil
		}
		return errBadRequest("a JSON body is required")
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return errBadRequest("malformed JSON at byte %d: %v", syn.Offset, err)
		case errors.As(err, &typ):
			return errBadRequest("field %q must be a %s", typ.Field, typ.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return errBadRequest("%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return errBadRequest("malformed JSON: %v", err)
	}
	if dec.More() {
		return errBadRequest("trailing data after the JSON object")
	}
	return nil
}

func bodyReadError(err error) *apiError {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &apiError{status: http.StatusRequestEntityTooLarge, Code: codeTooLarge,
			Message: fmt.Sprintf("the body is larger than %d bytes", tooBig.Limit)}
	}
	return errBadRequest("reading the body: %v", err)
}

// tokenCheck compares bearer tokens in constant time. Both sides are hashed
// first so that the comparison does not even leak the token's length.
type tokenCheck [sha256.Size]byte

func newTokenCheck(token string) *tokenCheck {
	if token == "" {
		return nil
	}
	h := tokenCheck(sha256.Sum256([]byte(token)))
	return &h
}

func (t *tokenCheck) ok(r *http.Request) bool {
	got, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !found {
		return false
	}
	h := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(h[:], t[:]) == 1
}

// statusRecorder remembers the status for the access log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (SSE flushes and
// write deadlines).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func logRequest(l *slog.Logger, r *http.Request, status int) {
	l.Debug("http", "method", r.Method, "path", r.URL.Path, "status", status, "remote", r.RemoteAddr)
}
