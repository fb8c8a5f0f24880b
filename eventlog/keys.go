package eventlog

import (
	"bytes"
	"encoding/binary"
	"strings"

	"github.com/oklog/ulid/v2"
)

// Key namespace prefixes. Persisted: do not change.
const (
	PrefixCausation byte = 'c' // c | causation ULID (16) | seq (8)      -> empty
	PrefixEvent     byte = 'e' // e | seq (8)                            -> record
	PrefixID        byte = 'i' // i | ULID (16)                          -> seq (8)
	PrefixMeta      byte = 'm' // m | name                               -> value
	PrefixStream    byte = 's' // s | stream | 0x00 | last version (8)   -> first seq (8) [count]
	PrefixAux       byte = 'x' // x | aux key                            -> aux value
)

// FormatVersion is the on-disk format this build writes and the newest it
// reads: version 5, whose records may be compact (RecordFormatCompact) and
// whose stream index has one entry per append and stream (an entry covers
// the consecutive versions one append wrote; see StreamIndexKey).
// Persisted: bump only with a migration.
const FormatVersion uint32 = 5

// FormatVersion3 is the format of logs written before one stream index
// entry per append: compact records, one stream index entry per event.
// Such an entry is an entry of FormatVersion that covers one version, so
// this build reads it as it is, and a writable open records the log as
// FormatVersion (FormatVersion3Archived as FormatVersionArchived) before
// its first append, so that a build that knows only format 3 refuses it
// instead of reading a longer entry as corruption. Nothing is rewritten.
const FormatVersion3 uint32 = 3

// FormatVersion1 is the format of logs written before compact records:
// every record is format 1 (RecordFormat). This build reads it, and a
// writable open upgrades it to FormatVersion (FormatVersion1Archived to
// FormatVersionArchived) before its first append: the layout is the same,
// only new records are compact, so nothing is rewritten.
const FormatVersion1 uint32 = 1

// MaxStreamLen is the longest stream name, in bytes.
const MaxStreamLen = 256

// MaxTypeLen is the longest event type name, in bytes.
const MaxTypeLen = 256

// Limits on Event.Metadata, which is meant to be small.
const (
	MaxMetadataEntries  = 64
	MaxMetadataKeyLen   = 256
	MaxMetadataValueLen = 4096
)

// FormatKey is the key of the format version: "m" "format". Its value is the
// format version as a 4-byte big-endian integer.
var FormatKey = []byte{PrefixMeta, 'f', 'o', 'r', 'm', 'a', 't'}

// EventKey returns the key of the record with global sequence seq.
func EventKey(seq uint64) []byte {
	return appendEventKey(make([]byte, 0, 9), seq)
}

func appendEventKey(dst []byte, seq uint64) []byte {
	dst = append(dst, PrefixEvent)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// StreamIndexKey returns the key of the stream index entry whose last
// version is version. The value (AppendStreamIndexValue) is the sequence of
// the entry's first event and how many consecutive events it covers: the
// versions version-count+1 .. version at the sequences first ..
// first+count-1.
func StreamIndexKey(stream string, version uint64) []byte {
	return appendStreamIndexKey(make([]byte, 0, len(stream)+10), stream, version)
}

func appendStreamIndexKey(dst []byte, stream string, version uint64) []byte {
	dst = appendStreamPrefix(dst, stream)
	return binary.BigEndian.AppendUint64(dst, version)
}

// streamPrefix is "s" stream 0x00: every index key of one stream starts with
// it, and no other stream's keys do because stream names contain no NUL.
func appendStreamPrefix(dst []byte, stream string) []byte {
	dst = append(dst, PrefixStream)
	dst = append(dst, stream...)
	return append(dst, 0)
}

// IDIndexKey returns the key of the id index entry for id. The value is the
// event's sequence as 8 big-endian bytes.
func IDIndexKey(id ulid.ULID) []byte {
	return appendIDIndexKey(make([]byte, 0, 17), id)
}

func appendIDIndexKey(dst []byte, id ulid.ULID) []byte {
	dst = append(dst, PrefixID)
	return append(dst, id[:]...)
}

// CausationIndexKey returns the key recording that the event at seq was
// caused by the event with id causation. The value is empty.
func CausationIndexKey(causation ulid.ULID, seq uint64) []byte {
	return appendCausationIndexKey(make([]byte, 0, 25), causation, seq)
}

func appendCausationIndexKey(dst []byte, causation ulid.ULID, seq uint64) []byte {
	dst = append(dst, PrefixCausation)
	dst = append(dst, causation[:]...)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// AuxKey returns the Pebble key of an aux key.
func AuxKey(key []byte) []byte {
	k := make([]byte, 0, len(key)+1)
	k = append(k, PrefixAux)
	return append(k, key...)
}

// ParseEventKey returns the sequence in an event key.
func ParseEventKey(key []byte) (uint64, bool) {
	if len(key) != 9 || key[0] != PrefixEvent {
		return 0, false
	}
	return binary.BigEndian.Uint64(key[1:]), true
}

// ParseStreamIndexKey returns the stream and version in a stream index key.
func ParseStreamIndexKey(key []byte) (stream string, version uint64, ok bool) {
	if len(key) < 1+1+1+8 || key[0] != PrefixStream || key[len(key)-9] != 0 {
		return "", 0, false
	}
	name := key[1 : len(key)-9]
	if bytes.IndexByte(name, 0) >= 0 {
		return "", 0, false
	}
	return string(name), binary.BigEndian.Uint64(key[len(key)-8:]), true
}

// ParseIDIndexKey returns the id in an id index key.
func ParseIDIndexKey(key []byte) (ulid.ULID, bool) {
	var id ulid.ULID
	if len(key) != 17 || key[0] != PrefixID {
		return id, false
	}
	copy(id[:], key[1:])
	return id, true
}

// ParseCausationIndexKey returns the causation id and sequence in a
// causation index key.
func ParseCausationIndexKey(key []byte) (causation ulid.ULID, seq uint64, ok bool) {
	if len(key) != 25 || key[0] != PrefixCausation {
		return causation, 0, false
	}
	copy(causation[:], key[1:17])
	return causation, binary.BigEndian.Uint64(key[17:]), true
}

// EncodeSeqValue encodes a sequence as an index value (8 bytes, big-endian).
func EncodeSeqValue(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
}

// AppendStreamIndexValue appends a stream index value: the first event's
// sequence, 8 bytes big-endian, then the count as a uvarint only if it is
// more than 1 (an entry of one event is 8 bytes, as in format 3).
func AppendStreamIndexValue(dst []byte, first, count uint64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, first)
	if count > 1 {
		dst = binary.AppendUvarint(dst, count)
	}
	return dst
}

// DecodeStreamIndexValue decodes a stream index value: the first event's
// sequence and the count of events. It refuses a value that is not the one
// encoding AppendStreamIndexValue writes (a stored count of 0 or 1, a
// varint that is not minimal, bytes after it).
func DecodeStreamIndexValue(v []byte) (first, count uint64, ok bool) {
	if len(v) < 8 {
		return 0, 0, false
	}
	first = binary.BigEndian.Uint64(v)
	if len(v) == 8 {
		return first, 1, true
	}
	count, n := binary.Uvarint(v[8:])
	if n <= 0 || 8+n != len(v) || count < 2 || (n > 1 && v[8+n-1] == 0) {
		return 0, 0, false
	}
	return first, count, true
}

// streamEntry is a decoded stream index entry: versions first..last at
// sequences seq..seq+last-first.
type streamEntry struct {
	first, last uint64 // versions
	seq         uint64 // the first version's sequence
}

// parseStreamEntry checks and decodes a stream index entry's key (whose
// stream the caller knows or parses) and value.
func parseStreamEntry(key, val []byte) (streamEntry, bool) {
	if len(key) < 1+1+1+8 || key[0] != PrefixStream || key[len(key)-9] != 0 {
		return streamEntry{}, false
	}
	last := binary.BigEndian.Uint64(key[len(key)-8:])
	seq, count, ok := DecodeStreamIndexValue(val)
	if !ok || count > last || seq+count-1 < seq {
		return streamEntry{}, false
	}
	return streamEntry{first: last - count + 1, last: last, seq: seq}, true
}

// seqOf returns the sequence of version v, which the entry covers.
func (e streamEntry) seqOf(v uint64) uint64 { return e.seq + (v - e.first) }

// DecodeSeqValue decodes an index value.
func DecodeSeqValue(v []byte) (uint64, bool) {
	if len(v) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(v), true
}

// prefixEnd returns the smallest key greater than every key with prefix p, or
// nil if there is none.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// ValidateStream reports whether name is a legal stream name: 1 to
// MaxStreamLen bytes, without NUL (NUL terminates the name in index keys).
func ValidateStream(name string) error {
	switch {
	case name == "":
		return invalidf("empty stream name")
	case len(name) > MaxStreamLen:
		return invalidf("stream name is %d bytes, longer than %d", len(name), MaxStreamLen)
	case strings.IndexByte(name, 0) >= 0:
		return invalidf("stream name %q contains NUL", name)
	}
	return nil
}
