package eventlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// AuxBatch collects writes to the aux key space, where read models
// (projections) persist their state next to the log they were folded from.
// Keys are relative to the aux namespace: they cannot reach log keys.
type AuxBatch struct {
	b   *pebble.Batch
	key []byte
	end []byte
}

func (a *AuxBatch) auxKey(dst, key []byte) []byte {
	dst = append(dst[:0], PrefixAux)
	return append(dst, key...)
}

// Set sets key to value.
func (a *AuxBatch) Set(key, value []byte) {
	a.key = a.auxKey(a.key, key)
	a.b.Set(a.key, value, nil)
}

// Delete deletes key.
func (a *AuxBatch) Delete(key []byte) {
	a.key = a.auxKey(a.key, key)
	a.b.Delete(a.key, nil)
}

// DeleteRange deletes the keys in [start, end). A nil end means the end of
// the aux namespace, so DeleteRange(nil, nil) deletes every aux key.
func (a *AuxBatch) DeleteRange(start, end []byte) {
	a.key = a.auxKey(a.key, start)
	if end == nil {
		a.end = append(a.end[:0], PrefixAux+1)
	} else {
		a.end = a.auxKey(a.end, end)
	}
	a.b.DeleteRange(a.key, a.end, nil)
}

// WriteAux runs fn on a new batch and, if fn returns nil, commits it with a
// synced write. Aux writes do not go through the committer: they are
// independent of the log's sequence. A commit failure poisons the log like a
// failed append, because it is the same WAL.
func (l *Log) WriteAux(ctx context.Context, fn func(b *AuxBatch) error) error {
	if l.readOnly {
		return ErrReadOnly
	}
	if err := l.failure(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return ErrClosed
	}
	b := l.db.NewBatch()
	if err := fn(&AuxBatch{b: b}); err != nil {
		b.Close()
		return err
	}
	if b.Empty() {
		b.Close()
		return nil
	}
	if err := l.applyBatch(b); err != nil {
		return l.poison(err)
	}
	b.Close()
	return nil
}

// GetAux returns a copy of the value of an aux key, or ErrNotFound.
func (l *Log) GetAux(key []byte) ([]byte, error) {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return nil, ErrClosed
	}
	v, closer, err := l.db.Get(AuxKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("eventlog: get aux: %w", err)
	}
	defer closer.Close()
	return append([]byte{}, v...), nil
}

// AuxIterator iterates aux keys with a prefix in key order. Key and Value
// return copies the caller owns.
type AuxIterator struct {
	inner *Iterator // reuses the registration and Close handling
	key   []byte
	value []byte
}

// ScanAux iterates the aux keys that start with prefix (nil for all).
func (l *Log) ScanAux(prefix []byte) *AuxIterator {
	lower := AuxKey(prefix)
	it := &Iterator{kind: iterAux, lower: lower, upper: prefixEnd(lower)}
	return &AuxIterator{inner: l.newIterator(it, false)}
}

// ScanAuxRange iterates the aux keys in [lower, upper) (nil upper: every
// key from lower on) in direction dir: Backward starts at the largest key
// below upper. A query that seeks to a cursor uses it, so its cost does not
// grow with the keys before the cursor.
func (l *Log) ScanAuxRange(lower, upper []byte, dir Direction) *AuxIterator {
	lo := AuxKey(lower)
	hi := prefixEnd(AuxKey(nil))
	if upper != nil {
		hi = AuxKey(upper)
	}
	it := &Iterator{kind: iterAux, dir: dir, lower: lo, upper: hi}
	return &AuxIterator{inner: l.newIterator(it, false)}
}

// Next advances to the next key.
func (a *AuxIterator) Next() bool {
	it := a.inner
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed || it.err != nil {
		return false
	}
	var ok bool
	switch {
	case !it.started && it.dir == Backward:
		it.started = true
		ok = it.it.Last()
	case !it.started:
		it.started = true
		ok = it.it.First()
	case it.dir == Backward:
		ok = it.it.Prev()
	default:
		ok = it.it.Next()
	}
	if !ok {
		if err := it.it.Error(); err != nil {
			it.err = fmt.Errorf("eventlog: scan aux: %w", err)
		}
		return false
	}
	v, err := it.it.ValueAndErr()
	if err != nil {
		it.err = fmt.Errorf("eventlog: scan aux: %w", err)
		return false
	}
	a.key = append([]byte{}, it.it.Key()[1:]...)
	a.value = append([]byte{}, v...)
	return true
}

// Key returns the current key, relative to the aux namespace.
func (a *AuxIterator) Key() []byte { return a.key }

// Value returns the current value.
func (a *AuxIterator) Value() []byte { return a.value }

// Err returns the error that ended the iteration, if any.
func (a *AuxIterator) Err() error { return a.inner.Err() }

// Close releases the iterator.
func (a *AuxIterator) Close() error { return a.inner.Close() }
