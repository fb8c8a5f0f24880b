package eventlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The head marker is a small file next to Pebble's, PEGASUS-HEAD, that
// records how far the log is known to have been acknowledged and which WAL
// it writes to. Pebble cannot tell a damaged last WAL block, or a deleted
// newest WAL, from a torn write: it opens the shorter log without a word.
// The marker is the independent witness that lets Open tell the
// difference. docs/format.md specifies it.
//
//	+-------+---------+-------+---------+-------------+---------+---------+
//	| magic | version | flags | head    | reserved    | wal     | crc32c  |
//	| "PGHD"| 1 B = 2 | 1 B   | 8 B BE  | 8 B BE      | 8 B BE  | 4 B BE  |
//	+-------+---------+-------+---------+-------------+---------+---------+
//
// head is a sequence known durable when the marker was written: every
// sequence up to it was acknowledged. reserved bounds every sequence the
// log ever handed out: the committer rewrites the marker (synced) before
// it commits a group that would go beyond it. wal is the file number of the
// newest WAL Pebble created for this log, recorded (synced) before Pebble
// writes a byte to it, or 0 when unknown; Open refuses when that WAL is
// missing and no later one exists, since Pebble never deletes the newest
// WAL. flags bit 0 (clean) says the log was closed cleanly with head as its
// exact head. Version 1 (26 bytes, without wal) is still read.
const (
	// MarkerFile is the name of the head marker in the data directory.
	// Persisted: do not rename.
	MarkerFile = "PEGASUS-HEAD"

	markerMagic   = "PGHD"
	markerVersion = 2
	markerLen     = 4 + 1 + 1 + 8 + 8 + 8 + 4
	markerV1Len   = 4 + 1 + 1 + 8 + 8 + 4
	markerClean   = 1 << 0

	// reserveStep is how far beyond a commit group the marker reserves
	// sequences, so that it is rewritten once per reserveStep events, not
	// per commit. It is also the most a crash can leave the marker's head
	// behind the acknowledged head (refreshMarker usually keeps it closer:
	// a second of appends). At 1024 a busy log (38,000 events/s) wrote the
	// marker 37 times a second, two fsyncs each that a commit group waited
	// for; at 8192, written ahead of need (reserve), it is under five and
	// no group waits (docs/benchmarks.md, "The head marker's reservations").
	reserveStep = 8192
)

// markerKey is the meta key that says a marker was written for this log, so
// that a deleted marker is noticed rather than recreated. Persisted.
var markerKey = []byte{PrefixMeta, 'm', 'a', 'r', 'k', 'e', 'r'}

type marker struct {
	head, reserved uint64
	// wal is the file number of the newest WAL, 0 if unknown (a version 1
	// marker, a checkpoint's, or one written while Pebble opens).
	wal   uint64
	clean bool
}

func (m marker) encode() []byte {
	b := make([]byte, 0, markerLen)
	b = append(b, markerMagic...)
	b = append(b, markerVersion)
	var flags byte
	if m.clean {
		flags |= markerClean
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, m.head)
	b = binary.BigEndian.AppendUint64(b, m.reserved)
	b = binary.BigEndian.AppendUint64(b, m.wal)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeMarker(b []byte) (marker, error) {
	if (len(b) != markerLen && len(b) != markerV1Len) || string(b[:4]) != markerMagic {
		return marker{}, fmt.Errorf("%s is not a head marker (%d bytes)", MarkerFile, len(b))
	}
	n := len(b)
	if crc32.Checksum(b[:n-4], castagnoli) != binary.BigEndian.Uint32(b[n-4:]) {
		return marker{}, fmt.Errorf("%s: checksum mismatch", MarkerFile)
	}
	switch {
	case b[4] == 1 && n == markerV1Len:
	case b[4] == markerVersion && n == markerLen:
	case b[4] == 1 || b[4] == markerVersion:
		return marker{}, fmt.Errorf("%s: version %d with %d bytes", MarkerFile, b[4], n)
	default:
		return marker{}, fmt.Errorf("%s: unknown version %d", MarkerFile, b[4])
	}
	m := marker{
		clean:    b[5]&markerClean != 0,
		head:     binary.BigEndian.Uint64(b[6:14]),
		reserved: binary.BigEndian.Uint64(b[14:22]),
	}
	if b[4] == markerVersion {
		m.wal = binary.BigEndian.Uint64(b[22:30])
	}
	if m.reserved < m.head {
		return marker{}, fmt.Errorf("%s: reserved %d below head %d", MarkerFile, m.reserved, m.head)
	}
	return m, nil
}

// readMarker returns the marker in dir; found is false if there is none.
func readMarker(fs vfs.FS, dir string) (m marker, found bool, err error) {
	f, err := fs.Open(fs.PathJoin(dir, MarkerFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return marker{}, false, nil
		}
		return marker{}, false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, markerLen+1))
	if err != nil {
		return marker{}, true, err
	}
	m, err = decodeMarker(b)
	return m, true, err
}

// writeMarker replaces the marker atomically and durably: a synced
// temporary file renamed over it, then a synced directory.
func writeMarker(fs vfs.FS, dir string, m marker) error {
	return writeFileSynced(fs, fs.PathJoin(dir, MarkerFile), m.encode())
}

// updateMarker rewrites the log's marker (synced) with what update makes of
// the marker as last written. Its writers run on different goroutines (the
// committer's reserve and refresh, Pebble's WALCreated listener in whatever
// goroutine rotates the WAL, Open and Close): markMu serializes them, and
// each starts from the last marker written, so that no writer undoes
// another's field (a reserve computed before a WAL rotation must not put
// back the previous WAL). Fields only grow, except that update may set
// wal to 0 and clean; clean is false unless update sets it.
func (l *Log) updateMarker(update func(m *marker)) error {
	return l.updateMarkerUnless(nil, update)
}

// updateMarkerUnless is updateMarker that writes nothing when done (if
// not nil) says the marker as last written needs no update.
func (l *Log) updateMarkerUnless(done func(m marker) bool, update func(m *marker)) error {
	l.markMu.Lock()
	defer l.markMu.Unlock()
	if done != nil && done(l.mark) {
		return nil
	}
	m := l.mark
	m.clean = false
	update(&m)
	if err := writeMarker(l.opts.FS, l.dir, m); err != nil {
		return err
	}
	l.mark, l.markAt = m, time.Now()
	return nil
}

// marked returns the marker as last written and when.
func (l *Log) marked() (marker, time.Time) {
	l.markMu.Lock()
	defer l.markMu.Unlock()
	return l.mark, l.markAt
}

// walCreated is Pebble's EventListener.WALCreated on writable opens. Pebble
// calls it synchronously in its WAL manager's Create, after the new file
// exists and its directory is synced, before it hands the writer to the DB:
// so the marker names the new WAL before a single batch is written to it.
// A WAL deleted after a crash is then noticed at Open even if it was
// created and filled after the marker's head was last refreshed (Pebble
// only deletes a WAL after a newer one exists, see walMissing). The head
// is recorded on the way, so every event acknowledged before the rotation
// is covered by the head check too.
//
// The listener cannot fail Pebble's Create; if the marker cannot be
// written the log is poisoned, and the commit that rotated the WAL is not
// acknowledged (commitGroup checks), rather than going on unprotected.
// It costs one marker write (two fsyncs) per WAL, that is, per memtable.
func (l *Log) walCreated(info pebble.WALCreateInfo) {
	if info.Err != nil {
		return // Pebble panics or fails the open itself
	}
	head := l.head.Load()
	if err := l.updateMarker(func(m *marker) {
		m.wal = uint64(info.FileNum)
		m.head = max(m.head, head)
		m.reserved = max(m.reserved, m.head)
	}); err != nil {
		l.poison(fmt.Errorf("record the new WAL %s in %s: %w", filepath.Base(info.Path), MarkerFile, err))
	}
	if l.testHookWAL != nil {
		l.testHookWAL(info)
	}
}

// SystemStream is the stream Options.AcceptDataLoss records a loss on. It
// is the daemon's "$system" stream (projection.SystemStream).
const SystemStream = "$system"

// Event types of an accepted data loss. Persisted: never change a value.
const (
	// TypeSeqLost fills one sequence that may have been handed out before
	// it was lost. It has no body.
	TypeSeqLost = "SEQ_LOST"
	// TypeDataLost records an accepted loss. It has no body; its metadata
	// says what was lost: "first_lost" and "last_lost" (the sequences
	// filled, empty if none), "acknowledged" (the head the marker
	// recorded, or "unknown"), "file" and "offset" (the first damage
	// found), "reason".
	TypeDataLost = "DATA_LOST"
)

// fillBatch bounds the SEQ_LOST events of one append.
const fillBatch = 1024

// recordLoss appends what Options.AcceptDataLoss accepted: SEQ_LOST events
// up to the reserved sequence, then DATA_LOST.
func (l *Log) recordLoss() error {
	ctx := context.Background()
	loss := l.loss
	first := l.Head() + 1
	for l.Head() < loss.Reserved {
		n := min(loss.Reserved-l.Head(), fillBatch)
		evs := make([]Event, n)
		for i := range evs {
			evs[i] = Event{Type: TypeSeqLost}
		}
		if _, err := l.Append(ctx, SystemStream, Any, evs...); err != nil {
			return fmt.Errorf("eventlog: record data loss: %w", err)
		}
	}
	md := map[string]string{"reason": loss.Reason, "acknowledged": "unknown"}
	if loss.Acknowledged != 0 {
		md["acknowledged"] = strconv.FormatUint(loss.Acknowledged, 10)
	}
	if last := l.Head(); last >= first {
		md["first_lost"], md["last_lost"] = strconv.FormatUint(first, 10), strconv.FormatUint(last, 10)
	}
	if loss.File != "" {
		md["file"] = loss.File
		if loss.Offset >= 0 {
			md["offset"] = strconv.FormatInt(loss.Offset, 10)
		}
	}
	if len(md["reason"]) > MaxMetadataValueLen {
		md["reason"] = md["reason"][:MaxMetadataValueLen]
	}
	if _, err := l.Append(ctx, SystemStream, Any, Event{Type: TypeDataLost, Metadata: md}); err != nil {
		return fmt.Errorf("eventlog: record data loss: %w", err)
	}
	return nil
}
