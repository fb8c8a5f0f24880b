package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Idempotency keys make retries safe: a client that resends a request with
// the same Idempotency-Key header gets the outcome of the first, never a
// second task or a second message.
//
// The design leans on the log's own rule that an event id is stored once.
// A key stands for one event id (the input that creates the task, or the
// message to a task), and the request appends its event under that id:
//
//  1. Under the key's lock, read the reservation idem/<sha256(key)> from
//     the log's aux space: the 16 bytes of the event id the key stands for.
//  2. If that event is in the log, the request is a retry: POST /v1/tasks
//     and webhooks append the same input again, which the log recognises
//     as an idempotent replay (same id, same content) or refuses as
//     eventlog.ErrIDReused (same id, other content); a message is compared
//     by the agent (SendMessageID). Either way nothing new is written.
//  3. Otherwise draw a new id, write the reservation (a synced aux commit)
//     and only then append the event under that id.
//
// Why not derive the id from the key? An id is a ULID whose time part
// orders tasks by creation; an id computed from a key would carry no
// creation time, or a time unrelated to the task's. Why reserve first? The
// aux write and the append are two commits: written in this order, a crash
// between them leaves a reservation whose event is not in the log, which
// step 2 treats as "never done" (it draws a fresh id rather than reuse one
// that may have been handed out), while the other order could leave a task
// without its key, and the retry would create a second one. The lock makes
// step 1 to 3 atomic within the daemon, which holds the log's directory
// lock, so two concurrent requests with one key cannot both create.
//
// A reservation whose request failed without its event reaching the log is
// deleted, so the key can be used again; any other is kept: a key is bound
// for as long as the log holds its event, which is for ever today. Keys share one namespace across
// routes (a key used to create a task and then for a message is a
// conflict).
//
// Persisted: the key layout idem/<32-byte SHA-256 of the key> -> 16-byte
// ULID; do not change it.
var idemPrefix = []byte("idem/")

// maxIdempotencyKey bounds the header's length (what Stripe allows).
const maxIdempotencyKey = 255

// idemLocks serialise requests per key (striped by the key's hash: two
// keys that share a stripe only wait for each other).
type idemLocks [64]sync.Mutex

// idemStore is what keyed needs of the log: the idempotency records in its
// aux space, event lookup by id, and ids drawn by the log's clock.
type idemStore interface {
	GetAux(key []byte) ([]byte, error)
	WriteAux(ctx context.Context, fn func(b *eventlog.AuxBatch) error) error
	Get(id ulid.ULID) (eventlog.Event, error)
	NewID() ulid.ULID
}

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
	key := strings.TrimSpace(vals[0])
	switch {
	case len(vals) > 1:
		return "", &inputError{"give one Idempotency-Key header, not several"}
	case key == "":
		return "", &inputError{"Idempotency-Key is empty"}
	case len(key) > maxIdempotencyKey:
		return "", &inputError{fmt.Sprintf("Idempotency-Key is %d bytes, more than %d", len(key), maxIdempotencyKey)}
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", &inputError{"Idempotency-Key must be printable ASCII"}
		}
	}
	return key, nil
}

// keyed runs do with the event id for the request's Idempotency-Key, or
// with a zero id (the callee draws one) when there is none. A retry (the
// key's event is already in the log) that succeeds answers with the header
// "Idempotent-Replayed: true".
func (s *server) keyed(w http.ResponseWriter, r *http.Request, do func(id ulid.ULID) error) error {
	ctx := r.Context()
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	if key == "" {
		return do(ulid.ULID{})
	}
	sum := sha256.Sum256([]byte(key))
	mu := &s.idem[sum[0]%byte(len(s.idem))]
	mu.Lock()
	defer mu.Unlock()

	log := s.store
	aux := append(append([]byte(nil), idemPrefix...), sum[:]...)
	var id ulid.ULID
	replay := false
	raw, err := log.GetAux(aux)
	switch {
	case err == nil && len(raw) == len(id):
		copy(id[:], raw)
		_, err := log.Get(id)
		if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
			return err
		}
		replay = err == nil
	case err == nil:
		return fmt.Errorf("pegasusd: idempotency record %x is %d bytes, not a ULID", sum[:8], len(raw))
	case !errors.Is(err, eventlog.ErrNotFound):
		return err
	}
	if !replay {
		id = log.NewID()
		if err := log.WriteAux(ctx, func(b *eventlog.AuxBatch) error {
			b.Set(aux, id[:])
			return nil
		}); err != nil {
			return err
		}
	}
	err = do(id)
	if err != nil && !replay {
		// A refused request leaves nothing behind: drop the reservation
		// unless the event made it in after all. If this fails, the
		// reservation binds nothing anyway (step 2).
		if _, gerr := log.Get(id); errors.Is(gerr, eventlog.ErrNotFound) {
			_ = log.WriteAux(context.WithoutCancel(ctx), func(b *eventlog.AuxBatch) error {
				b.Delete(aux)
				return nil
			})
		}
	}
	if errors.Is(err, eventlog.ErrIDReused) {
		return &keyReusedError{key: key, err: err}
	}
	if err == nil && replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	return err
}
