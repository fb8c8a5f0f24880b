package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/internal/yield"
)

// AuxBatch collects writes to the aux key space, where read models
// (projections) persist their state next to the log they were folded from.
// Keys are relative to the aux namespace: they cannot reach log keys.
type AuxBatch struct {
	b   *pebble.Batch
	key []byte
	end []byte
	// ops collects the writes instead of b (IngestAux), their keys cut
	// from keys (ownKey).
	ops  []auxOp
	keys []byte
	err  error
	// split, when positive, makes IngestAux write one sstable per run of
	// keys that share their first split bytes (SplitTables).
	split int
}

// Grow makes room for n more writes in a batch IngestAux collects (it
// does nothing for WriteAux's).
func (a *AuxBatch) Grow(n int) {
	if a.b == nil {
		a.ops = slices.Grow(a.ops, n)
	}
}

// SplitTables makes IngestAux write the batch as one sstable per run of
// keys (in key order) that share their first n bytes, ingested together:
// as atomically as one table. A table spanning several key ranges of a
// read model (tasks, summaries, indexes) overlaps every older key between
// them, so Pebble puts it in level 0 and compacts it with all of them;
// tables of one range each, whose keys follow the older ones (new ids),
// overlap nothing and are compacted far less. IngestAux also cuts each
// run where its keys start to follow every stored key of the run's range
// (freshCut). WriteAux writes one batch whatever n is.
func (a *AuxBatch) SplitTables(n int) { a.split = n }

// auxOp is one write collected for IngestAux.
type auxOp struct {
	key, value []byte
	del        bool
}

func (a *AuxBatch) auxKey(dst, key []byte) []byte {
	dst = append(dst[:0], PrefixAux)
	return append(dst, key...)
}

// ownKey is auxKey for a batch IngestAux collects: the copies are cut
// from chunks of keys, each capped, not allocated one by one.
func (a *AuxBatch) ownKey(key []byte) []byte {
	n := 1 + len(key)
	if cap(a.keys)-len(a.keys) < n {
		a.keys = make([]byte, 0, max(n, min(max(2*cap(a.keys), 1<<10), 64<<10)))
	}
	off := len(a.keys)
	a.keys = append(append(a.keys, PrefixAux), key...) // within the chunk's room
	return a.keys[off : off+n : off+n]
}

// Set sets key to value.
func (a *AuxBatch) Set(key, value []byte) {
	if a.b == nil {
		a.ops = append(a.ops, auxOp{key: a.ownKey(key), value: value})
		return
	}
	a.key = a.auxKey(a.key, key)
	a.b.Set(a.key, value, nil)
}

// Delete deletes key.
func (a *AuxBatch) Delete(key []byte) {
	if a.b == nil {
		a.ops = append(a.ops, auxOp{key: a.ownKey(key), del: true})
		return
	}
	a.key = a.auxKey(a.key, key)
	a.b.Delete(a.key, nil)
}

// DeleteRange deletes the keys in [start, end). A nil end means the end of
// the aux namespace, so DeleteRange(nil, nil) deletes every aux key.
// IngestAux refuses it (ErrInvalid).
func (a *AuxBatch) DeleteRange(start, end []byte) {
	if a.b == nil {
		a.err = fmt.Errorf("%w: IngestAux takes no DeleteRange", ErrInvalid)
		return
	}
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
	if err := l.auxWritable(ctx); err != nil {
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

// IngestAux writes the aux writes fn makes as one sstable (or several,
// AuxBatch.SplitTables) that it ingests into the store: atomically and durably, like WriteAux, but through
// neither the write-ahead log nor the memtable. A large WriteAux batch
// holds up the appends committed behind it until it is copied into the
// memtable and its bytes are synced with theirs; an ingested sstable is
// written and synced by the caller's goroutine beside the appends, which
// then wait only for the MANIFEST edit that adds it. For large writes
// (projection checkpoints); a small one is cheaper with WriteAux. The last
// write of a key wins; DeleteRange is refused.
//
// The sstable is written to a temporary file in the log's directory
// first (aux-ingest-N.sst.tmp, removed once ingested); a crash may leave
// one there, which the next writable Open removes.
func (l *Log) IngestAux(ctx context.Context, fn func(b *AuxBatch) error) error {
	if err := l.auxWritable(ctx); err != nil {
		return err
	}
	a := &AuxBatch{}
	if err := fn(a); err != nil {
		return err
	}
	if a.err != nil {
		return a.err
	}
	if len(a.ops) == 0 {
		return nil
	}
	// Sorted by key (the caller may have written them in order already),
	// the last write of each key kept.
	byKey := func(x, y auxOp) int { return bytes.Compare(x.key, y.key) }
	if !slices.IsSortedFunc(a.ops, byKey) {
		slices.SortStableFunc(a.ops, byKey)
	}
	ops := a.ops[:0]
	for i, o := range a.ops {
		if i+1 < len(a.ops) && bytes.Equal(o.key, a.ops[i+1].key) {
			continue
		}
		ops = append(ops, o)
	}
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return ErrClosed
	}
	if err := l.ingestAux(ctx, ops, a.split); err != nil {
		return l.poison(fmt.Errorf("eventlog: ingest aux: %w", err))
	}
	return nil
}

// ingestAux writes ops, sorted and unique, to temporary sstables (one per
// run of keys sharing their first split bytes, split > 0; else one, each
// cut in two by freshCut) and ingests them together. A failure poisons
// the log like a failed WriteAux: the disk is full or failing, and an
// ingest may have written the WAL (one that overlaps the memtable is
// logged there) or the MANIFEST.
func (l *Log) ingestAux(ctx context.Context, ops []auxOp, split int) error {
	fs := l.opts.FS
	var paths []string
	defer func() {
		// Pebble linked (or copied) the files; a leftover is harmless.
		for _, path := range paths {
			if err := fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.opts.Logger.Warn("eventlog: removing an ingested sstable's temporary file", "err", err)
			}
		}
	}()
	var pace yield.Pacer // a background write: let the appends it competes with run
	write := func(ops []auxOp) error {
		if len(ops) == 0 {
			return nil
		}
		path := fs.PathJoin(l.dir, fmt.Sprintf(ingestTempFile, ingestFiles.Add(1)))
		f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		paths = append(paths, path)
		w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: l.db.TableFormat()})
		for _, o := range ops {
			pace.Step(len(o.key) + len(o.value))
			if o.del {
				err = w.Delete(o.key)
			} else {
				err = w.Set(o.key, o.value)
			}
			if err != nil {
				w.Close()
				return err
			}
		}
		return w.Close() // syncs the file
	}
	for len(ops) > 0 {
		n, prefix := len(ops), len(auxPrefix)
		if split > 0 {
			n, prefix = 1, len(auxPrefix)+split
			for n < len(ops) && samePrefix(ops[0].key, ops[n].key, prefix) {
				n++
			}
		}
		cut, err := l.freshCut(ops[:n], ops[0].key[:min(prefix, len(ops[0].key))])
		if err != nil {
			return err
		}
		if err := write(ops[:cut]); err != nil {
			return err
		}
		if err := write(ops[cut:n]); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return l.ingest(ctx, paths)
}

// freshCut returns how many of ops (sorted, sharing prefix) come before
// the first one whose key follows every key the store holds with prefix.
// The keys from there on are new (a read model's records of new tasks),
// so a table of them alone overlaps nothing and is ingested into the
// bottom level, where nothing compacts it again; in one table with the
// rewrites of older keys (the tasks still running at the previous
// checkpoint), all of them went to level 0 and were compacted with the
// older keys' table.
func (l *Log) freshCut(ops []auxOp, prefix []byte) (int, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	if !it.Last() {
		return 0, it.Close()
	}
	last := it.Key()
	cut, _ := slices.BinarySearchFunc(ops, last, func(o auxOp, k []byte) int {
		if bytes.Compare(o.key, k) <= 0 {
			return -1
		}
		return 1
	})
	return cut, it.Close()
}

// auxPrefix is what every aux key starts with in the store.
var auxPrefix = []byte{PrefixAux}

// samePrefix reports whether a and b share their first n bytes (a key
// shorter than n shares only what it has with one of its own length).
func samePrefix(a, b []byte, n int) bool {
	return bytes.Equal(a[:min(n, len(a))], b[:min(n, len(b))])
}

// auxWritable returns why an aux write cannot start, if it cannot.
func (l *Log) auxWritable(ctx context.Context) error {
	if l.readOnly {
		return ErrReadOnly
	}
	if err := l.failure(); err != nil {
		return err
	}
	return ctx.Err()
}

// ingestTempFile names the file where IngestAux writes an sstable before
// ingesting it (linked into Pebble's files, then removed), numbered by
// ingestFiles so that concurrent calls do not share one.
const ingestTempFile = "aux-ingest-%d.sst.tmp"

var ingestFiles atomic.Uint64

// removeIngestLeftovers removes the temporary files of IngestAux calls that
// a crash interrupted. Each is either a table never ingested or a second
// link to one Pebble already holds under its own name: removing it loses
// nothing. Open calls it on a writable log, before any IngestAux.
func removeIngestLeftovers(fs vfs.FS, dir string, logger *slog.Logger) {
	names, err := fs.List(dir)
	if err != nil {
		return
	}
	for _, n := range names {
		if strings.HasPrefix(n, "aux-ingest-") && strings.HasSuffix(n, ".sst.tmp") {
			if err := fs.Remove(fs.PathJoin(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				logger.Warn("eventlog: removing a leftover of an interrupted checkpoint ingest", "file", n, "err", err)
			}
		}
	}
}

// ingest ingests sstables, atomically. Like a commit, a failure in Pebble's
// Fatalf is recovered into a fatalError: it may have written the WAL (an
// ingest that overlaps the memtable is logged there) or the MANIFEST.
func (l *Log) ingest(ctx context.Context, paths []string) (err error) {
	defer recoverFatal(&err)
	return l.db.Ingest(ctx, paths)
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
		return nil, storageError("get aux", err)
	}
	defer closer.Close()
	return append([]byte{}, v...), nil
}

// AuxIterator iterates aux keys with a prefix in key order. Key and Value
// return copies the caller owns (but from ScanAuxBorrowed).
type AuxIterator struct {
	inner  *Iterator // reuses the registration and Close handling
	key    []byte
	value  []byte
	borrow bool // ScanAuxBorrowed: key and value reuse their buffers
}

// ScanAuxBorrowed is ScanAux for a reader that copies what it keeps: Key
// and Value are valid only until the next call to Next or Close. An audit
// that compares every record and keeps none saves two copies of each.
func (l *Log) ScanAuxBorrowed(prefix []byte) *AuxIterator {
	a := l.ScanAux(prefix)
	a.borrow = true
	return a
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
			it.err = storageError("scan aux", err)
		}
		return false
	}
	v, err := it.it.ValueAndErr()
	if err != nil {
		it.err = storageError("scan aux", err)
		return false
	}
	if a.borrow {
		a.key, a.value = append(a.key[:0], it.it.Key()[1:]...), append(a.value[:0], v...)
	} else {
		a.key, a.value = append([]byte{}, it.it.Key()[1:]...), append([]byte{}, v...)
	}
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
