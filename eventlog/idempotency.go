package eventlog

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"

	"github.com/oklog/ulid/v2"
)

// Idempotency keys make a client's retries safe: a request sent again with
// the same key must be answered as the first was, never make a second task
// or a second message. The log helps with its own rule that an event id is
// stored once: a key is bound, once and for good, to one event id, and the
// request appends its event under that id. A retry appends the same event
// under the same id again, which the log recognises as a replay (same id,
// same content) or refuses with ErrIDReused (same id, other content).
//
// A binding is never undone, whatever happened to the request that made
// it: the request may have been refused (then no event carries the id, and
// a later request under the key appends its own event under it), or its
// outcome may be unknown (a crash, a client that gave up, an append whose
// acknowledgement never came). Releasing the key in the second case would
// let a retry draw a new id while the first event is, or later becomes,
// stored: two tasks for one key.
//
// Persisted: the aux key IdempotencyPrefix + the 32-byte SHA-256 of the
// key -> the 16-byte ULID it is bound to; do not change it.
const IdempotencyPrefix = "idem/"

// MaxIdempotencyKey bounds a key's length (what Stripe allows).
const MaxIdempotencyKey = 255

// KeyReserver binds idempotency keys to event ids: the embedded log in its
// aux space, the clustered log in a replicated key-value bucket, so that
// every daemon sees one binding per key.
type KeyReserver interface {
	// ReserveKey binds key to id unless it is bound already, and returns
	// the id key is bound to and whether it was bound before the call.
	// When it was, the log's reads hold every event stored before the
	// binding was found, but for appends still in flight.
	ReserveKey(ctx context.Context, key string, id ulid.ULID) (bound ulid.ULID, existed bool, err error)
}

var _ KeyReserver = (*Log)(nil)

// keyLocks serialise ReserveKey per key (striped by the key's hash: two
// keys that share a stripe only wait for each other).
type keyLocks [64]sync.Mutex

// IdempotencyAuxKey is where the embedded log binds key, relative to the
// aux space.
func IdempotencyAuxKey(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return append([]byte(IdempotencyPrefix), sum[:]...)
}

// ReserveKey binds key to id in the aux space with a synced write, unless
// it is bound already. Bindings are read and written under a lock per key:
// the log holds its directory's lock, so two requests with one key, in
// this process or any other, cannot both bind it.
func (l *Log) ReserveKey(ctx context.Context, key string, id ulid.ULID) (ulid.ULID, bool, error) {
	aux := IdempotencyAuxKey(key)
	mu := &l.keyMu[aux[len(IdempotencyPrefix)]%byte(len(l.keyMu))]
	mu.Lock()
	defer mu.Unlock()
	if bound, ok, err := l.BoundKey(key); ok || err != nil {
		return bound, ok, err
	}
	if err := l.WriteAux(ctx, func(b *AuxBatch) error {
		b.Set(aux, id[:])
		return nil
	}); err != nil {
		return ulid.ULID{}, false, err
	}
	return id, false, nil
}

// BoundKey returns the event id key is bound to in the aux space, if any.
func (l *Log) BoundKey(key string) (ulid.ULID, bool, error) {
	var id ulid.ULID
	raw, err := l.GetAux(IdempotencyAuxKey(key))
	switch {
	case errors.Is(err, ErrNotFound):
		return id, false, nil
	case err != nil:
		return id, false, err
	case len(raw) != len(id):
		return id, false, fmt.Errorf("%w: the binding of an idempotency key is %d bytes, not a ULID", ErrCorruption, len(raw))
	}
	copy(id[:], raw)
	return id, true, nil
}
