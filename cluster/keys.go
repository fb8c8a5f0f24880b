package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Idempotency keys across daemons (docs/cluster.md, "Idempotency keys").
// A key's binding to an event id lives in a replicated key-value bucket
// (LogOptions.KeysBucket), not in a daemon's copy, so that every daemon
// sees the one binding: the first request with a key, on any daemon,
// creates the entry (a create-only put, which the bucket's stream leader
// decides once for the whole cluster), and every later one reads it and
// appends its event under the bound id. JetStream de-duplicates that id
// (Nats-Msg-Id) within the stream's window, and the local copies' id
// index after it, so a retry whose first attempt is stored, in flight or
// lost is stored once. A binding is never deleted.

var _ eventlog.KeyReserver = (*ReplicatedLog)(nil)

// keyName is a key's name in the bucket: the hex SHA-256 of the key, which
// the bucket's key syntax always takes and which keeps client data out of
// subjects.
func keyName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// openKeys opens the bucket of idempotency keys, creating it if needed.
func (r *ReplicatedLog) openKeys(ctx context.Context) error {
	kv, err := r.openBucket(ctx, jetstream.KeyValueConfig{Bucket: r.opts.KeysBucket, History: 1, Storage: jetstream.FileStorage,
		Description: "the idempotency keys of the Pegasus log " + r.opts.Stream + " (docs/cluster.md)"})
	if err != nil {
		return fmt.Errorf("cluster: idempotency key bucket %s: %w", r.opts.KeysBucket, err)
	}
	r.keys = kv
	return nil
}

// ReserveKey binds key to id for the whole cluster unless it is bound
// already (eventlog.KeyReserver). When it was, it returns once the local
// copy holds everything the stream held then, so that the caller finds an
// event appended under the binding by any daemon, but for appends still in
// flight (which JetStream de-duplicates with the caller's). A failure is
// ErrUnknownOutcome: the key may or may not be bound, and calling again
// is safe.
func (r *ReplicatedLog) ReserveKey(ctx context.Context, key string, id ulid.ULID) (ulid.ULID, bool, error) {
	// A binding made in this copy before the bucket held them is kept.
	if prev, ok, err := r.local.BoundKey(key); err != nil {
		return ulid.ULID{}, false, err
	} else if ok {
		id = prev
	}
	name := keyName(key)
	for {
		_, err := r.keys.Create(ctx, name, id[:])
		if err == nil {
			return id, false, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return ulid.ULID{}, false, fmt.Errorf("%w: binding an idempotency key: %v", ErrUnknownOutcome, err)
		}
		e, err := r.keys.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// Refused while another daemon's create of the key was
			// being replicated, and that one is not stored (yet): ask
			// again.
			select {
			case <-ctx.Done():
				return ulid.ULID{}, false, fmt.Errorf("%w: binding an idempotency key: %v", ErrUnknownOutcome, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return ulid.ULID{}, false, fmt.Errorf("%w: reading an idempotency key: %v", ErrUnknownOutcome, err)
		}
		var bound ulid.ULID
		if len(e.Value()) != len(bound) {
			return ulid.ULID{}, false, fmt.Errorf("%w: idempotency key %s in bucket %s is %d bytes, not a ULID", ErrInvalid, name, r.opts.KeysBucket, len(e.Value()))
		}
		copy(bound[:], e.Value())
		if err := r.catchUp(ctx); err != nil {
			return ulid.ULID{}, false, fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
		}
		return bound, true, nil
	}
}
