package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Idempotency keys make retries safe: a client that resends a request with
// the same Idempotency-Key header gets the outcome of the first, never a
// second task or a second message. A key is bound once and for good to
// one event id (eventlog.KeyReserver: the log's aux space, or with
// --cluster a replicated bucket that every daemon shares), and the request
// appends its event (the input that creates the task, or the message to a
// task) under that id:
//
//  1. Bind the key to a new id, or read the id it is bound to.
//  2. If that event is in the log, the request is a retry: POST /v1/tasks
//     and webhooks append the same input again, which the log recognises
//     as an idempotent replay (same id, same content) or refuses as
//     eventlog.ErrIDReused (same id, other content); a message is compared
//     by the agent (SendMessageID). Either way nothing new is written.
//  3. Otherwise append the event under the bound id. The first request may
//     have been refused (nothing carries the id), may have died between
//     the binding and its append, or may still be in flight on this
//     daemon or another (with --cluster JetStream de-duplicates the id):
//     in every case the event is stored once.
//
// Why not derive the id from the key? An id is a ULID whose time part
// orders tasks by creation; an id computed from a key would carry no
// creation time, or a time unrelated to the task's. Why never release a
// binding, even after a refusal? A request whose outcome is unknown (a
// client that gave up, an acknowledgement lost in a leader change) cannot
// be told from a refused one for sure, and a released key would let the
// retry draw a new id while the first event is, or later becomes, stored.
// Keys share one namespace across routes (a key used to create a task and
// then for a message is a conflict).

// keyReusedError is the answer to a key sent again with another request.
type keyReusedError struct {
	key string
	err error // wraps eventlog.ErrIDReused, for the log
}

func (e *keyReusedError) Error() string {
	return fmt.Sprintf("Idempotency-Key %q was already used for a different request (another body, route or task); "+
		"a retry must repeat the request exactly, a new request needs a new key", e.key)
}
func (e *keyReusedError) Unwrap() error { return e.err }

// idempotencyKey returns the request's Idempotency-Key, "" without one.
func idempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values("Idempotency-Key")
	if len(vals) == 0 {
		return "", nil
	}
	if len(vals) > 1 {
		return "", &inputError{"give one Idempotency-Key header, not several"}
	}
	key := strings.TrimSpace(vals[0])
	if err := checkKey(key, "Idempotency-Key"); err != nil {
		return "", err
	}
	return key, nil
}

// checkKey refuses what cannot be an idempotency key; what names where
// it was given.
func checkKey(key, what string) error {
	switch {
	case key == "":
		return &inputError{what + " is empty"}
	case len(key) > eventlog.MaxIdempotencyKey:
		return &inputError{fmt.Sprintf("%s is %d bytes, more than %d", what, len(key), eventlog.MaxIdempotencyKey)}
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return &inputError{what + " must be printable ASCII"}
		}
	}
	return nil
}

// keyed runs do with the event id for the request's Idempotency-Key, or
// with a zero id (the callee draws one) when there is none. A retry (the
// key's event was already in the log) that succeeds answers with the
// header "Idempotent-Replayed: true".
func (s *Server) keyed(w http.ResponseWriter, r *http.Request, do func(id ulid.ULID) error) error {
	ctx := r.Context()
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	if key == "" {
		return do(ulid.ULID{})
	}
	id, existed, err := s.keys.ReserveKey(ctx, key, s.store.NewID())
	if err != nil {
		return err
	}
	replay := false
	if existed {
		_, err := s.store.Get(id)
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return err
		}
		replay = err == nil
	}
	err = do(id)
	if errors.Is(err, eventlog.ErrIDReused) {
		return &keyReusedError{key: key, err: err}
	}
	if err == nil && replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	return err
}
