package eventlog

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"
)

// Log is the durable, append-only event log. It is safe for concurrent use.
type Log struct {
	opts     Options
	dir      string
	db       *pebble.DB
	lock     *pebble.Lock
	release  func()
	readOnly bool

	// head is the highest committed and visible sequence. It only moves
	// forward, and only after every lower sequence is durable.
	head atomic.Uint64

	idMu     sync.Mutex
	idLastMs uint64
	entropy  ulid.MonotonicReader

	// reqs carries append requests to the committer. closeMu guards sending
	// on it against Close closing it.
	reqs          chan *appendReq
	closeMu       sync.RWMutex
	closing       bool
	committerDone chan struct{}
	// failed holds the error that poisoned the log, if any.
	failed atomic.Pointer[error]

	// Committer-owned state.
	versions map[string]uint64 // committed stream versions (a bounded cache)
	stats    statsCounters
	group    groupState

	// subMu orders head publication with subscription registration, which
	// is what makes the catch-up to live handoff gap-free.
	subMu sync.Mutex
	subs  map[*Subscription]struct{}
	done  chan struct{} // closed by Close

	// testHookLive, if set, is called when a subscription turns live.
	testHookLive func(*Subscription)

	// readMu guards the DB against Close while reads use it; iters lets
	// Close end open iterators, which Pebble requires before closing.
	readMu   sync.RWMutex
	dbClosed bool
	itersMu  sync.Mutex
	iters    map[*Iterator]struct{}
}

// Open opens (creating if needed, unless read-only) the log in dir.
func Open(dir string, opts *Options) (*Log, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	l := &Log{
		opts:          o,
		dir:           dir,
		readOnly:      o.ReadOnly,
		done:          make(chan struct{}),
		committerDone: make(chan struct{}),
		subs:          map[*Subscription]struct{}{},
		iters:         map[*Iterator]struct{}{},
		versions:      map[string]uint64{},
	}
	if mr, ok := o.Entropy.(ulid.MonotonicReader); ok {
		l.entropy = mr
	} else {
		l.entropy = ulid.Monotonic(o.Entropy, 0)
	}
	if err := l.open(); err != nil {
		if l.db != nil {
			l.db.Close()
		}
		if l.lock != nil {
			l.lock.Close()
		}
		if l.release != nil {
			l.release()
		}
		return nil, err
	}
	if !l.readOnly {
		l.reqs = make(chan *appendReq, o.QueueLength)
		go l.commitLoop()
	} else {
		close(l.committerDone)
	}
	return l, nil
}

func (l *Log) open() error {
	o := &l.opts
	fs := o.FS
	release, err := acquireDir(fs, l.dir, l.readOnly)
	if err != nil {
		return fmt.Errorf("eventlog: open %s: %w", l.dir, err)
	}
	l.release = release
	if l.readOnly {
		if _, err := fs.Stat(l.dir); err != nil {
			return fmt.Errorf("eventlog: open %s read-only: %w", l.dir, err)
		}
		fs = readOnlyFS{FS: fs, dir: l.dir}
	} else {
		if err := fs.MkdirAll(l.dir, 0o700); err != nil {
			return fmt.Errorf("eventlog: create %s: %w", l.dir, err)
		}
		lock, err := pebble.LockDirectory(l.dir, fs)
		if err != nil {
			return l.lockError(err)
		}
		l.lock = lock
	}
	po := o.pebbleOptions(fs)
	po.Lock = l.lock
	if l.readOnly {
		po.ErrorIfNotExists = true
	}
	db, err := pebble.Open(l.dir, po)
	if err != nil {
		if l.readOnly && isLockConflict(err) {
			return l.lockError(err)
		}
		return fmt.Errorf("eventlog: open %s: %w", l.dir, err)
	}
	l.db = db
	if err := l.checkFormat(); err != nil {
		return err
	}
	head, err := l.loadHead()
	if err != nil {
		return err
	}
	l.head.Store(head)
	return nil
}

func (l *Log) lockError(err error) error {
	if isLockConflict(err) {
		return fmt.Errorf("%w (%s: %v)", ErrLocked, l.dir, err)
	}
	return fmt.Errorf("eventlog: lock %s: %w", l.dir, err)
}

// checkFormat verifies the format key, or writes it into a brand-new DB.
func (l *Log) checkFormat() error {
	v, closer, err := l.db.Get(FormatKey)
	switch {
	case err == nil:
		defer closer.Close()
		if len(v) != 4 {
			return fmt.Errorf("%w: %s is not a Pegasus log (bad format key)", ErrFormat, l.dir)
		}
		switch ver := binary.BigEndian.Uint32(v); {
		case ver > FormatVersion:
			return fmt.Errorf("%w: %s has format version %d, newer than this build supports (%d)",
				ErrFormat, l.dir, ver, FormatVersion)
		case ver < 1:
			return fmt.Errorf("%w: %s has unknown format version %d", ErrFormat, l.dir, ver)
		}
		return nil
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("eventlog: read format version: %w", err)
	}
	empty, err := l.dbEmpty()
	if err != nil {
		return err
	}
	if !empty || l.readOnly {
		return fmt.Errorf("%w: %s is not a Pegasus log (no format version)", ErrFormat, l.dir)
	}
	b := l.db.NewBatch()
	defer b.Close()
	b.Set(FormatKey, binary.BigEndian.AppendUint32(nil, FormatVersion), nil)
	if err := l.applyBatch(b); err != nil {
		return fmt.Errorf("eventlog: write format version: %w", err)
	}
	return nil
}

func (l *Log) dbEmpty() (bool, error) {
	it, err := l.db.NewIter(nil)
	if err != nil {
		return false, err
	}
	defer it.Close()
	return !it.First(), it.Error()
}

func (l *Log) loadHead() (uint64, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{PrefixEvent},
		UpperBound: []byte{PrefixEvent + 1},
	})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	seq, ok := ParseEventKey(it.Key())
	if !ok {
		return 0, corruptKey(it.Key(), "malformed event key")
	}
	return seq, nil
}

// applyBatch commits b with a WAL fsync. A Pebble fatal error (which Pebble
// reports by calling Logger.Fatalf, see pebbleLogger) is turned into an error.
func (l *Log) applyBatch(b *pebble.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = fe
		}
	}()
	return b.Commit(pebble.Sync)
}

// poison records the first commit failure. Every later write fails with it.
func (l *Log) poison(cause error) error {
	err := fmt.Errorf("%w: %w", ErrFailed, cause)
	if l.failed.CompareAndSwap(nil, &err) {
		l.opts.Logger.Error("eventlog: commit failed; refusing further writes", "err", cause)
	}
	return *l.failed.Load()
}

func (l *Log) failure() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Head returns the highest sequence that is committed and visible. Every
// sequence from 1 to Head is durable.
func (l *Log) Head() uint64 { return l.head.Load() }

// NewID returns a new ULID, strictly greater than every ID this Log
// generated before, with its time part from Options.Clock.
func (l *Log) NewID() ulid.ULID { return l.newID(l.opts.Clock()) }

func (l *Log) newID(t time.Time) ulid.ULID {
	l.idMu.Lock()
	defer l.idMu.Unlock()
	ms := ulid.Timestamp(t)
	if ms < l.idLastMs {
		// The clock went backwards: stay on the last millisecond so that
		// ids keep increasing.
		ms = l.idLastMs
	}
	for {
		id, err := ulid.New(ms, l.entropy)
		if err == nil {
			l.idLastMs = ms
			return id
		}
		if errors.Is(err, ulid.ErrMonotonicOverflow) {
			ms++
			continue
		}
		// The caller's entropy source failed (for example a finite test
		// reader ran dry). Ids must still be produced; fall back to the
		// system's randomness and say so.
		l.opts.Logger.Error("eventlog: entropy source failed; falling back to crypto/rand", "err", err)
		l.entropy = ulid.Monotonic(rand.Reader, 0)
	}
}

// Checkpoint writes a consistent copy of the log to dir, which must not
// exist, while the log stays open. The copy is a prefix of the log that
// includes at least every event acknowledged before the call; open it with
// Options.ReadOnly for post-mortems. It uses hard links where possible.
func (l *Log) Checkpoint(dir string) error {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return ErrClosed
	}
	if err := l.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("eventlog: checkpoint to %s: %w", dir, err)
	}
	if l.opts.FS == vfs.Default {
		// Pebble creates the directory world-readable; the data is not.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("eventlog: checkpoint to %s: %w", dir, err)
		}
	}
	return nil
}

// Close stops accepting appends, lets the committer finish what is queued,
// ends subscriptions and open iterators (they report ErrClosed) and closes
// the database. Calling Close more than once returns ErrClosed.
func (l *Log) Close() error {
	l.closeMu.Lock()
	if l.closing {
		l.closeMu.Unlock()
		return ErrClosed
	}
	l.closing = true
	if l.reqs != nil {
		close(l.reqs)
	}
	l.closeMu.Unlock()
	<-l.committerDone
	close(l.done)

	l.readMu.Lock()
	defer l.readMu.Unlock()
	l.itersMu.Lock()
	for it := range l.iters {
		it.forceClose(ErrClosed)
	}
	l.iters = nil
	l.itersMu.Unlock()
	l.dbClosed = true
	err := l.closeDB()
	if l.lock != nil {
		if lerr := l.lock.Close(); err == nil {
			err = lerr
		}
	}
	l.release()
	return err
}

// closeDB closes Pebble. After a fatal commit error Pebble may panic on
// close; the log is already poisoned, so that is reported as an error.
func (l *Log) closeDB() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("eventlog: close after failure: %v", r)
		}
	}()
	return l.db.Close()
}
