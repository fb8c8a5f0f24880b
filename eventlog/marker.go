package eventlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strconv"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The head marker is a small file next to Pebble's, PEGASUS-HEAD, that
// records how far the log is known to have been acknowledged. Pebble cannot
// tell a damaged last WAL block, or a deleted newest WAL, from a torn
// write: it opens the shorter log without a word. The marker is the
// independent witness that lets Open tell the difference. docs/format.md
// specifies it.
//
//	+-------+---------+-------+---------+-------------+---------+
//	| magic | version | flags | head    | reserved    | crc32c  |
//	| "PGHD"| 1 B = 1 | 1 B   | 8 B BE  | 8 B BE      | 4 B BE  |
//	+-------+---------+-------+---------+-------------+---------+
//
// head is a sequence known durable when the marker was written: every
// sequence up to it was acknowledged. reserved bounds every sequence the
// log ever handed out: the committer rewrites the marker (synced) before
// it commits a group that would go beyond it. flags bit 0 (clean) says the
// log was closed cleanly with head as its exact head.
const (
	// MarkerFile is the name of the head marker in the data directory.
	// Persisted: do not rename.
	MarkerFile = "PEGASUS-HEAD"

	markerMagic   = "PGHD"
	markerVersion = 1
	markerLen     = 4 + 1 + 1 + 8 + 8 + 4
	markerClean   = 1 << 0

	// reserveStep is how far beyond a commit group the marker reserves
	// sequences, so that it is rewritten once per reserveStep events, not
	// per commit. It is also the most a crash can leave the marker's head
	// behind the acknowledged head (refreshMarker usually keeps it closer).
	reserveStep = 1024
)

// markerKey is the meta key that says a marker was written for this log, so
// that a deleted marker is noticed rather than recreated. Persisted.
var markerKey = []byte{PrefixMeta, 'm', 'a', 'r', 'k', 'e', 'r'}

type marker struct {
	head, reserved uint64
	clean          bool
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
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeMarker(b []byte) (marker, error) {
	if len(b) != markerLen || string(b[:4]) != markerMagic {
		return marker{}, fmt.Errorf("%s is not a head marker (%d bytes)", MarkerFile, len(b))
	}
	if crc32.Checksum(b[:markerLen-4], castagnoli) != binary.BigEndian.Uint32(b[markerLen-4:]) {
		return marker{}, fmt.Errorf("%s: checksum mismatch", MarkerFile)
	}
	if b[4] != markerVersion {
		return marker{}, fmt.Errorf("%s: unknown version %d", MarkerFile, b[4])
	}
	m := marker{
		clean:    b[5]&markerClean != 0,
		head:     binary.BigEndian.Uint64(b[6:14]),
		reserved: binary.BigEndian.Uint64(b[14:22]),
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
