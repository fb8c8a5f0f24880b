package eventlog

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// forward, and only after every lower sequence is durable (with
	// Options.Unsynced: committed, see synced).
	head atomic.Uint64
	// synced is, with Options.Unsynced, the highest sequence a synced
	// write covered (durableHead).
	synced atomic.Uint64

	idMu     sync.Mutex
	idLastMs uint64
	// idEntropy receives the random part of the id drawID draws.
	idEntropy [10]byte
	// fresh holds ids NewID handed out that no append has used yet, as an
	// event's id or as a stream's name (at most maxFresh; guarded by
	// idMu): the first append that uses one skips the index read that
	// would only find nothing (fresh.go).
	fresh map[ulid.ULID]freshUse
	// keyMu serialises the bindings of idempotency keys (idempotency.go).
	keyMu   keyLocks
	entropy ulid.MonotonicReader

	// reqs carries append requests to the committer. closeMu guards sending
	// on it against Close closing it.
	reqs          chan *appendReq
	closeMu       sync.RWMutex
	closing       bool
	committerDone chan struct{}
	// failed holds the error that poisoned the log, if any; failedCh is
	// closed when it is set.
	failed   atomic.Pointer[error]
	failedCh chan struct{}
	// damage holds the first damage found in the data, if any: records
	// missing below the head at Open, or corruption Pebble found in a
	// file while running (a bad sstable block). It matches ErrDamaged and
	// wraps the *CorruptionError; appends fail with it.
	damage atomic.Pointer[error]

	// mark is the head marker as last written, guarded by markMu (see
	// updateMarker); loss is what Open found missing (read-only) or
	// accepted (Options.AcceptDataLoss).
	markMu    sync.Mutex
	mark      marker
	markAt    time.Time     // when mark was written
	markEvery time.Duration // markerInterval; tests shorten it
	// reserving is set while a reservation written ahead of need runs
	// (reserve); reserveWG lets Close wait for it before the last marker.
	reserving atomic.Bool
	reserveWG sync.WaitGroup
	loss      *DataLossError

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
	// testHookRetire, if set, is called by Retire after its checks, before
	// the request is queued.
	testHookRetire func()
	// testHookWAL, if set, is called by walCreated after the marker write.
	testHookWAL func(pebble.WALCreateInfo)
	// testHookReserve, if set, is called by a background reservation
	// before it writes the marker.
	testHookReserve func()

	// readMu guards the DB against Close while reads use it; iters lets
	// Close end open iterators, which Pebble requires before closing.
	readMu   sync.RWMutex
	dbClosed bool
	itersMu  sync.Mutex
	iters    map[*Iterator]struct{}
	audits   map[*Audit]struct{} // NewAudit's, under itersMu too
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
		failedCh:      make(chan struct{}),
		markEvery:     markerInterval,
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
	if l.loss != nil && !l.readOnly {
		if err := l.recordLoss(); err != nil {
			l.Close()
			return nil, err
		}
	}
	// After an accepted loss is recorded: that records the tail lost,
	// this refuses writes over records lost below it.
	missing, err := l.findMissing(l.Head())
	if err != nil {
		l.Close()
		return nil, err
	}
	if missing != nil {
		if !l.readOnly {
			o.Logger.Error("eventlog: records are missing below the head; refusing writes until the log is restored", "err", missing)
		}
		l.noteDamage(missing)
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
	mk, mkFound, mkErr := readMarker(o.FS, l.dir)
	if mkErr != nil && !mkFound {
		return fmt.Errorf("eventlog: read %s: %w", MarkerFile, mkErr)
	}
	if mkFound && mkErr == nil {
		l.mark = mk
	}
	// Pebble creates a database wherever it finds none. Where there was
	// one (a marker, or Pebble's own files) a missing MANIFEST must be
	// reported, not papered over with an empty log.
	mustExist := l.readOnly || mkFound || hasPebbleFiles(o.FS, l.dir, true)

	// A writable open flushes what the WAL replays and deletes the WALs,
	// so it would destroy the evidence of a damaged one. Look first,
	// read-only: the head it recovers, compared with the marker.
	var loss *DataLossError
	if !l.readOnly && mustExist {
		found, err := l.inspect(mk, mkFound, mkErr)
		if err != nil {
			return err
		}
		if loss = found.loss; loss != nil && !o.AcceptDataLoss {
			return loss
		}
		// pebble.Open flushes the replayed WALs and may delete the
		// marker's WAL before it creates the next one (walCreated then
		// records it): a crash in between must not look like a deleted
		// WAL. So the marker forgets its WAL first, and records the head
		// just recovered instead, which covers every event in it. A loss
		// being accepted keeps the marker's head, so that it is still
		// seen if the process stops before recordLoss has filled it.
		if err := l.updateMarker(func(m *marker) {
			m.head = max(m.head, found.head)
			m.reserved = max(m.reserved, m.head)
			if loss != nil {
				m.reserved = max(m.reserved, loss.Reserved)
			}
			m.wal = 0
		}); err != nil {
			return fmt.Errorf("eventlog: write %s: %w", MarkerFile, err)
		}
	}
	db, err := l.openPebble(fs, mustExist)
	if err != nil {
		return l.openError(err, mkFound)
	}
	l.db = db
	format, err := l.checkFormat()
	if err != nil {
		return err
	}
	head, err := l.loadHead()
	if err != nil {
		return err
	}
	l.head.Store(head)
	l.synced.Store(head) // pebble.Open flushed what it replayed
	expected, err := l.hasMarkerKey()
	if err != nil {
		return err
	}
	if l.readOnly {
		l.loss = assessLoss(head, mk, mkFound, mkErr, expected, l.endsInFill(head), nil, o.FS, l.dir)
		return nil
	}
	if loss != nil {
		l.loss = loss
		o.Logger.Warn("eventlog: accepting data loss", "err", loss)
	}
	removeIngestLeftovers(o.FS, l.dir, o.Logger)
	if err := l.updateMarker(func(m *marker) {
		m.head = max(m.head, head)
		m.reserved = max(m.reserved, m.head)
	}); err != nil {
		return fmt.Errorf("eventlog: write %s: %w", MarkerFile, err)
	}
	if !expected {
		b := l.db.NewBatch()
		defer b.Close()
		b.Set(markerKey, []byte{1}, nil)
		if err := l.applyBatch(b); err != nil {
			return fmt.Errorf("eventlog: write marker key: %w", err)
		}
	}
	return l.upgradeFormat(format)
}

// inspection is what inspect found: the head the database recovers and
// what is missing, if anything.
type inspection struct {
	head uint64
	loss *DataLossError
}

// inspect opens the existing database read-only and compares the head it
// recovers with the marker. With Options.AcceptDataLoss a WAL that Pebble
// refuses (a corrupt chunk before synced data) is cut at its last good
// record first.
func (l *Log) inspect(mk marker, mkFound bool, mkErr error) (inspection, error) {
	o := &l.opts
	ro := readOnlyFS{FS: o.FS, dir: l.dir}
	db, err := l.openPebbleRO(ro)
	var cut *walDamage
	if err != nil && o.AcceptDataLoss && pebble.IsCorruptionError(err) {
		if cut, _ = scanWALs(o.FS, l.dir); cut != nil {
			lost := o.FS.PathJoin(l.dir, "lost-"+strings.TrimSuffix(cut.file, ".log"))
			o.Logger.Warn("eventlog: accepting data loss: cutting the WAL at its last good record",
				"file", cut.file, "offset", cut.offset, "copy", lost, "err", cut.err)
			if cerr := cutWALs(o.FS, l.dir, lost, cut); cerr != nil {
				return inspection{}, fmt.Errorf("eventlog: cut damaged WAL %s: %w", cut.file, cerr)
			}
			db, err = l.openPebbleRO(ro)
		}
	}
	if err != nil {
		return inspection{}, l.openError(err, mkFound)
	}
	l.db = db
	defer func() {
		db.Close()
		l.db = nil
	}()
	head, err := l.loadHead()
	if err != nil {
		return inspection{}, err
	}
	expected, err := l.hasMarkerKey()
	if err != nil {
		return inspection{}, err
	}
	filling := l.endsInFill(head)
	return inspection{head: head, loss: assessLoss(head, mk, mkFound, mkErr, expected, filling, cut, o.FS, l.dir)}, nil
}

// endsInFill reports whether the log ends in a SEQ_LOST event: recordLoss
// was stopped before it appended the DATA_LOST that always follows the
// fill (the fill may take several appends). The loss is then not recorded
// yet, and the fill may not have reached every sequence handed out.
func (l *Log) endsInFill(head uint64) bool {
	if head == 0 {
		return false
	}
	ev, err := l.readEvent(head)
	return err == nil && ev.Type == TypeSeqLost && ev.Stream == SystemStream
}

func (l *Log) openPebbleRO(fs vfs.FS) (*pebble.DB, error) {
	po := l.opts.pebbleOptions(fs, func(err error) { l.poison(err) }, l.noteCorruption)
	po.Lock = l.lock
	po.ReadOnly = true
	po.ErrorIfNotExists = true
	return pebble.Open(l.dir, po)
}

func (l *Log) openPebble(fs vfs.FS, mustExist bool) (*pebble.DB, error) {
	po := l.opts.pebbleOptions(fs, func(err error) { l.poison(err) }, l.noteCorruption)
	po.Lock = l.lock
	po.ErrorIfNotExists = mustExist
	if !l.readOnly {
		po.EventListener.WALCreated = l.walCreated
	}
	return pebble.Open(l.dir, po)
}

// hasPebbleFiles reports whether dir holds files only a Pebble database
// leaves: tables and WALs, and, unless dataOnly, MANIFESTs. Open asks
// for data only: a MANIFEST alone, with neither its pointer
// (marker.manifest) nor the head marker, is a creation that stopped
// before Pebble wrote its pointer (Pebble writes the MANIFEST, then the
// pointer, then the first WAL), so nothing was ever written to it and
// Pebble may create the database over it.
func hasPebbleFiles(fs vfs.FS, dir string, dataOnly bool) bool {
	names, err := fs.List(dir)
	if err != nil {
		return false
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".sst") || strings.HasSuffix(n, ".log") || (!dataOnly && strings.HasPrefix(n, "MANIFEST-")) {
			return true
		}
	}
	return false
}

// openError translates Pebble's refusal to open into eventlog's errors, so
// that no caller needs to import Pebble. Messages name files, never the
// directory's path beyond what the caller passed.
func (l *Log) openError(err error, mkFound bool) error {
	switch {
	case l.readOnly && isLockConflict(err):
		return l.lockError(err)
	case errors.Is(err, pebble.ErrDBDoesNotExist) && !mkFound && !hasPebbleFiles(l.opts.FS, l.dir, false):
		// The caller names the directory.
		return fmt.Errorf("%w: no Pegasus log in it", ErrFormat)
	case errors.Is(err, pebble.ErrDBDoesNotExist):
		return &CorruptionError{File: "marker.manifest", Offset: -1, Reason: "Pebble's pointer to its MANIFEST is missing " +
			"while the directory holds a log (" + MarkerFile + ", tables or WALs): the database cannot be found"}
	case strings.Contains(err.Error(), "unknown to the objstorage provider"):
		// The MANIFEST lists a table that is not there: the MANIFEST is
		// damaged (a flipped byte can still checksum as another record
		// boundary) or the table was deleted.
		return &CorruptionError{File: currentManifest(l.opts.FS, l.dir), Offset: -1,
			Reason: "the MANIFEST lists a table that does not exist (the MANIFEST is damaged or the table was deleted): " + tableAfter(err.Error(), "file ")}
	case strings.Contains(err.Error(), "object size mismatch"):
		// A table is not the size the MANIFEST records: truncated,
		// extended or replaced.
		return &CorruptionError{File: tableBefore(err.Error(), ": object size mismatch"), Offset: -1,
			Reason: "the table's size on disk is not the size the MANIFEST records (truncated or replaced?)" + sizesOf(err.Error())}
	case errors.Is(err, os.ErrNotExist) && strings.Contains(err.Error(), "MANIFEST"):
		return &CorruptionError{File: manifestName(err.Error()), Offset: -1,
			Reason: "the MANIFEST (the list of the database's files) is missing"}
	case pebble.IsCorruptionError(err):
		if d, _ := scanWALs(l.opts.FS, l.dir); d != nil {
			return d.corruption("a WAL record does not read back before the end of the log: " +
				"events after it, acknowledged or not, cannot be recovered")
		}
		ce := &CorruptionError{Offset: -1, Reason: err.Error()}
		if strings.Contains(err.Error(), "MANIFEST") {
			ce.File = manifestName(err.Error())
		}
		return ce
	}
	return fmt.Errorf("eventlog: open %s: %w", l.dir, err)
}

// currentManifest is the MANIFEST Pebble's marker points to, or "MANIFEST".
func currentManifest(fs vfs.FS, dir string) string {
	names, _ := fs.List(dir)
	for _, n := range names {
		if strings.HasPrefix(n, "marker.manifest.") {
			return manifestName(n)
		}
	}
	return "MANIFEST"
}

// tableAfter names the table whose number follows marker in Pebble's
// message ("file 000005 (type sstable)", "backing file 000005 error: ..."),
// or "a table".
func tableAfter(msg, marker string) string {
	i := strings.Index(msg, marker)
	if i < 0 {
		return "a table"
	}
	num := msg[i+len(marker):]
	j := 0
	for j < len(num) && num[j] >= '0' && num[j] <= '9' {
		j++
	}
	if j == 0 {
		return "a table"
	}
	return num[:j] + ".sst"
}

// tableBefore names the table whose number precedes marker in Pebble's
// message ("L0: 000005: object size mismatch"), or "a table".
func tableBefore(msg, marker string) string {
	i := strings.Index(msg, marker)
	j := i
	for j > 0 && msg[j-1] >= '0' && msg[j-1] <= '9' {
		j--
	}
	if i < 0 || j == i {
		return "a table"
	}
	return msg[j:i] + ".sst"
}

// sizesOf is Pebble's ": 14255 (disk) != 14285 (MANIFEST)", without the
// path Pebble puts before it, or "".
func sizesOf(msg string) string {
	i := strings.LastIndex(msg, "): ")
	if i < 0 || !strings.Contains(msg[i:], "(disk)") {
		return ""
	}
	return msg[i+1:]
}

func manifestName(msg string) string {
	if i := strings.Index(msg, "MANIFEST-"); i >= 0 {
		j := i + len("MANIFEST-")
		for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
			j++
		}
		return msg[i:j]
	}
	return "MANIFEST"
}

func (l *Log) hasMarkerKey() (bool, error) {
	_, closer, err := l.db.Get(markerKey)
	if err == nil {
		closer.Close()
		return true, nil
	}
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	return false, storageError("read marker key", err)
}

// assessLoss compares the head a log recovered with its head marker. A head
// below the marker's means acknowledged events are gone (a damaged last WAL
// block, a deleted WAL); so does the WAL the marker names as the newest
// being gone with nothing newer (walMissing), whatever the head: it held
// every event written after it was created, which the marker's head may
// not cover after a crash. A marker that the log says was written but
// that is missing or unreadable means nobody can tell. filling says the
// log ends in an unfinished SEQ_LOST fill (endsInFill). cut is the WAL cut
// by AcceptDataLoss, if any. The result locates the damage for the
// operator.
func assessLoss(head uint64, mk marker, mkFound bool, mkErr error, expected, filling bool, cut *walDamage, fs vfs.FS, dir string) *DataLossError {
	var gone string
	if mkFound && mkErr == nil {
		if name, missing, err := walMissing(fs, dir, mk.wal); err == nil && missing {
			gone = name
		}
	}
	var loss *DataLossError
	switch {
	case mkFound && mkErr == nil && (head < mk.head || gone != ""):
		loss = &DataLossError{Head: head, Acknowledged: mk.head, Reserved: mk.reserved, Offset: -1}
		switch d, _ := scanWALs(fs, dir); {
		case cut != nil:
			loss.File, loss.Offset = cut.file, cut.offset
			loss.Reason = fmt.Sprintf("WAL %s was cut at offset %d (%v)", cut.file, cut.offset, cut.err)
		case gone != "":
			loss.File = gone
			loss.Reason = fmt.Sprintf("WAL %s is missing (deleted?): %s records it as the newest WAL the log "+
				"wrote to, no later WAL exists, and Pebble never deletes its newest WAL; every event written to it is lost", gone, MarkerFile)
		case d != nil:
			loss.File, loss.Offset = d.file, d.offset
			loss.Reason = fmt.Sprintf("WAL %s reads back only up to offset %d (%v)", d.file, d.offset, d.err)
		default:
			loss.Reason = "every WAL reads back to its end, so a WAL file is missing (deleted?)"
			if n := newestWAL(fs, dir); n != "" {
				loss.Reason += "; the newest present is " + n
			}
		}
	case mkFound && mkErr != nil:
		loss = &DataLossError{Head: head, Reserved: head, Offset: -1, File: MarkerFile,
			Reason: fmt.Sprintf("%s is unreadable (%v): how far the log was acknowledged is unknown", MarkerFile, mkErr)}
	case !mkFound && expected:
		loss = &DataLossError{Head: head, Reserved: head, Offset: -1, File: MarkerFile,
			Reason: MarkerFile + " is missing: how far the log was acknowledged is unknown"}
	case filling:
		loss = &DataLossError{Head: head, Reserved: head, Offset: -1,
			Reason: "an accepted data loss was being recorded when the log stopped: it ends in " + TypeSeqLost +
				" without the " + TypeDataLost + " that follows the fill"}
		if mkFound && mkErr == nil {
			loss.Acknowledged, loss.Reserved = mk.head, max(head, mk.reserved)
		}
	case cut != nil:
		// A cut without a marker (a directory from an older build): what
		// was lost is unknown.
		loss = &DataLossError{Head: head, Reserved: head, File: cut.file, Offset: cut.offset,
			Reason: fmt.Sprintf("WAL %s was cut at offset %d (%v)", cut.file, cut.offset, cut.err)}
	}
	return loss
}

func (l *Log) lockError(err error) error {
	if isLockConflict(err) {
		return fmt.Errorf("%w (%s: %v)", ErrLocked, l.dir, err)
	}
	return fmt.Errorf("eventlog: lock %s: %w", l.dir, err)
}

// checkFormat verifies the format key, or writes it into a brand-new DB,
// and returns the format version the log is at.
func (l *Log) checkFormat() (uint32, error) {
	v, closer, err := l.db.Get(FormatKey)
	switch {
	case err == nil:
		defer closer.Close()
		if len(v) != 4 {
			return 0, fmt.Errorf("%w: %s is not a Pegasus log (bad format key)", ErrFormat, l.dir)
		}
		ver := binary.BigEndian.Uint32(v)
		switch {
		case ver > FormatVersionArchived:
			return 0, fmt.Errorf("%w: %s has format version %d, newer than this build supports (%d)",
				ErrFormat, l.dir, ver, FormatVersionArchived)
		case !knownFormat(ver):
			return 0, fmt.Errorf("%w: %s has unknown format version %d", ErrFormat, l.dir, ver)
		}
		return ver, nil
	case !errors.Is(err, pebble.ErrNotFound):
		return 0, storageError("read format version", err)
	}
	empty, err := l.dbEmpty()
	if err != nil {
		return 0, err
	}
	if !empty || l.readOnly {
		return 0, fmt.Errorf("%w: %s is not a Pegasus log (no format version)", ErrFormat, l.dir)
	}
	if l.mark.head > 0 {
		// Unreachable while Open passes ErrorIfNotExists with a marker;
		// kept so that an empty database never replaces a log.
		return 0, &DataLossError{Head: 0, Acknowledged: l.mark.head, Reserved: l.mark.reserved, Offset: -1,
			Reason: "the database is empty"}
	}
	if err := l.writeFormat(FormatVersion); err != nil {
		return 0, fmt.Errorf("eventlog: write format version: %w", err)
	}
	return FormatVersion, nil
}

// writeFormat records format version v in the format key.
func (l *Log) writeFormat(v uint32) error {
	b := l.db.NewBatch()
	defer b.Close()
	b.Set(FormatKey, binary.BigEndian.AppendUint32(nil, v), nil)
	return l.applyBatch(b)
}

// upgradeFormat records a log at format 1 or 3 (2 or 4 with holes), the
// format checkFormat found, as format 5 (6): the layout of the older
// formats is a part of it (full records, one stream index entry per
// event), so nothing is rewritten. Called by a writable Open once the log
// is known to be whole, before the first append, so that an older build
// refuses the log (ErrFormat) instead of calling compact records or
// stream index entries of several events corruption.
func (l *Log) upgradeFormat(format uint32) error {
	up := FormatVersion
	switch format {
	case FormatVersion1, FormatVersion3:
	case FormatVersion1Archived, FormatVersion3Archived:
		up = FormatVersionArchived
	default:
		return nil
	}
	if err := l.writeFormat(up); err != nil {
		return fmt.Errorf("eventlog: upgrade format version %d to %d: %w", format, up, err)
	}
	l.opts.Logger.Info("eventlog: upgraded the format version", "dir", l.dir, "from", format, "to", up)
	return nil
}

func (l *Log) dbEmpty() (bool, error) {
	it, err := l.db.NewIter(nil)
	if err != nil {
		return false, err
	}
	defer it.Close()
	if it.First() {
		return false, nil
	}
	if err := it.Error(); err != nil {
		return false, storageError("read", err)
	}
	return true, nil
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
		if err := it.Error(); err != nil {
			return 0, storageError("read the head", err)
		}
		return 0, nil
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
	defer recoverFatal(&err)
	return b.Commit(pebble.Sync)
}

// applyGroup commits a group of appends: synced, or not with
// Options.Unsynced.
func (l *Log) applyGroup(b *pebble.Batch) (err error) {
	if !l.opts.Unsynced {
		return l.applyBatch(b)
	}
	defer recoverFatal(&err)
	return b.Commit(pebble.NoSync)
}

// durableHead is the head a marker may record: every sequence up to it
// is on disk. It is the head, except with Options.Unsynced, where it is
// the head the last sync covered.
func (l *Log) durableHead() uint64 {
	if l.opts.Unsynced {
		return l.synced.Load()
	}
	return l.head.Load()
}

// syncHead makes every committed append durable, with Options.Unsynced
// (a synced empty write flushes the WAL up to it), and returns
// durableHead.
func (l *Log) syncHead() (head uint64, err error) {
	if !l.opts.Unsynced {
		return l.head.Load(), nil
	}
	head = l.head.Load()
	defer recoverFatal(&err)
	if err := l.db.LogData(nil, pebble.Sync); err != nil {
		return l.synced.Load(), err
	}
	if head > l.synced.Load() {
		l.synced.Store(head)
	}
	return head, nil
}

// recoverFatal turns the panic of pebbleLogger.Fatalf in a commit into an
// error in *err. Other panics go on.
func recoverFatal(err *error) {
	if r := recover(); r != nil {
		fe, ok := r.(fatalError)
		if !ok {
			panic(r)
		}
		*err = fe
	}
}

// checkpoint is Pebble's Checkpoint, which commits (it flushes the WAL with
// a synced empty batch): a failed commit poisons the log.
func (l *Log) checkpoint(dir string) (err error) {
	defer func() {
		var fe fatalError
		if errors.As(err, &fe) {
			err = l.poison(fe)
		}
	}()
	defer recoverFatal(&err)
	return l.db.Checkpoint(dir, pebble.WithFlushedWAL())
}

// poison records the first commit failure. Every later write fails with it.
func (l *Log) poison(cause error) error {
	err := fmt.Errorf("%w: %w", ErrFailed, cause)
	if l.failed.CompareAndSwap(nil, &err) {
		l.opts.Logger.Error("eventlog: commit failed; refusing further writes", "err", cause)
		close(l.failedCh)
	}
	return *l.failed.Load()
}

// noteCorruption records corruption Pebble found in a file while running
// (Pebble's DataCorruption event). The read that found it fails on its
// own; this makes Health report it.
func (l *Log) noteCorruption(info pebble.DataCorruptionInfo) {
	l.noteDamage(&CorruptionError{File: filepath.Base(info.Path), Offset: -1, Reason: detailsOf(info.Details)})
}

// noteDamage records the first damage found in the data: from then on
// appends fail with ErrDamaged and Health reports it.
func (l *Log) noteDamage(ce *CorruptionError) {
	err := fmt.Errorf("%w: %w", ErrDamaged, ce)
	l.damage.CompareAndSwap(nil, &err)
}

// detailsOf is Pebble's corruption message without the path Pebble adds
// as a hint.
func detailsOf(err error) string {
	if err == nil {
		return "corrupt"
	}
	return err.Error()
}

// Health reports whether the log can be trusted to serve: nil, or the error
// that poisoned it (matching ErrFailed: a commit, a WAL or MANIFEST write
// or sync failed, for example on a full disk; the log refuses writes until
// it is reopened), or else the damage found in its data (matching
// ErrDamaged and wrapping a *CorruptionError: records missing below the
// head found at Open, naming the first, or the first corruption Pebble
// found in a file while running, naming the file; the log refuses writes,
// reads of the damaged data fail, and the log must be restored). Appends
// fail with the same error. Health never changes back to nil.
func (l *Log) Health() error {
	if err := l.failure(); err != nil {
		return err
	}
	if p := l.damage.Load(); p != nil {
		return *p
	}
	return nil
}

// Failed returns a channel that is closed when the log starts refusing
// writes (Health then matches ErrFailed).
func (l *Log) Failed() <-chan struct{} { return l.failedCh }

// DataLoss reports acknowledged events found missing at Open: for a
// read-only log what is missing (Verify reports it too), for a writable one
// what Options.AcceptDataLoss accepted. Nil when nothing was.
func (l *Log) DataLoss() *DataLossError { return l.loss }

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
func (l *Log) NewID() ulid.ULID {
	t := l.opts.Clock()
	l.idMu.Lock()
	defer l.idMu.Unlock()
	id := l.drawID(t)
	l.noteFresh(id)
	return id
}

func (l *Log) newID(t time.Time) ulid.ULID {
	l.idMu.Lock()
	defer l.idMu.Unlock()
	return l.drawID(t)
}

// drawID is newID with idMu held.
func (l *Log) drawID(t time.Time) ulid.ULID {
	ms := ulid.Timestamp(t)
	if ms < l.idLastMs {
		// The clock went backwards: stay on the last millisecond so that
		// ids keep increasing.
		ms = l.idLastMs
	}
	for {
		// ulid.New, without the allocation its interface call makes of
		// the id's entropy part: the entropy is read into the Log.
		var id ulid.ULID
		err := id.SetTime(ms)
		if err == nil {
			err = l.entropy.MonotonicRead(ms, l.idEntropy[:])
		}
		if err == nil {
			copy(id[6:], l.idEntropy[:])
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
	head := l.Head()
	if err := l.checkpoint(dir); err != nil {
		return fmt.Errorf("eventlog: checkpoint to %s: %w", dir, err)
	}
	// The copy holds at least every event acknowledged before the call;
	// its marker says so, so that the copy opens (and a restored copy
	// detects loss) like the original.
	if err := writeMarker(l.opts.FS, dir, marker{head: head, reserved: head, clean: true}); err != nil {
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
	l.reserveWG.Wait() // its marker must not follow the clean one
	close(l.done)

	l.readMu.Lock()
	defer l.readMu.Unlock()
	l.itersMu.Lock()
	for it := range l.iters {
		it.forceClose(ErrClosed)
	}
	l.iters = nil
	for a := range l.audits {
		a.release()
	}
	l.audits = nil
	l.itersMu.Unlock()
	l.dbClosed = true
	var merr error
	if !l.readOnly && l.failure() == nil {
		// Every acknowledged append is synced (with Options.Unsynced,
		// now): the head is exact (unless an accepted loss could not be
		// recorded, whose head stays).
		if head, serr := l.syncHead(); serr != nil {
			merr = serr
		} else {
			merr = l.updateMarker(func(m *marker) {
				m.clean = head >= m.head
				m.head = max(m.head, head)
				m.reserved = max(m.reserved, m.head)
			})
		}
	}
	err := l.closeDB()
	if err == nil && merr != nil {
		err = fmt.Errorf("eventlog: write %s: %w", MarkerFile, merr)
	}
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
