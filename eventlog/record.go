package eventlog

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// RecordFormat is the record format byte of EncodeRecord: format 1, the
// full envelope. An archive manifest's hash is taken over it, and logs at
// format version 1 and 2 store it. Persisted: do not renumber.
const RecordFormat byte = 1

// RecordFormatCompact is the record format byte of EncodeCompactRecord,
// what the log stores since format version 3: format 1 without the fields
// it can imply (a zero causation, a correlation equal to the id or to the
// causation). Persisted: do not renumber.
const RecordFormatCompact byte = 2

// Flags of a compact record (the byte after the format byte). A flag that
// is clear means the field is not stored: a zero causation; a correlation
// equal to the causation when there is one, else to the id.
const (
	flagCausation   byte = 1 << 0
	flagCorrelation byte = 1 << 1
	flagsKnown           = flagCausation | flagCorrelation
)

// maxRecordLen bounds a record's size so that lengths always fit in an int on
// every platform and hostile inputs cannot claim absurd sizes.
const maxRecordLen = 1 << 30

// recordFixedLen is the size of a record with empty strings, no metadata and
// an empty body: crc, format, id, seq, stream len, version, type len, time,
// causation, correlation, schema, metadata count, body len (varints at their
// one-byte minimum).
const recordFixedLen = 4 + 1 + 16 + 1 + 1 + 1 + 1 + 8 + 16 + 16 + 2 + 1 + 1

// compactFixedLen is recordFixedLen for a compact record: a flags byte,
// and neither causation nor correlation.
const compactFixedLen = recordFixedLen + 1 - 32

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeRecord returns the stored form of ev (see docs/format.md):
//
//	crc32c(4, big-endian, over everything after it) | format(1) | id(16) |
//	uvarint seq | uvarint len, stream | uvarint version | uvarint len, type |
//	time unix nanos (8, big-endian, signed) | causation(16) | correlation(16) |
//	schema(2, big-endian) | uvarint n, n*(uvarint len, key, uvarint len, value)
//	with keys strictly ascending | uvarint len, body
//
// It validates the fields the decoder validates, so that every record it
// produces decodes.
func EncodeRecord(ev Event) ([]byte, error) {
	return appendRecord(nil, &ev)
}

// EncodeCompactRecord returns ev in record format 2, what the log stores
// (see docs/format.md): format 1 with a flags byte after the format byte,
// and the causation and correlation stored only when they are not implied:
//
//	crc32c(4) | format(1) = 2 | flags(1) | id(16) | uvarint seq |
//	uvarint len, stream | uvarint version | uvarint len, type | time(8) |
//	[causation(16) if flags&1] | [correlation(16) if flags&2] | schema(2) |
//	metadata as in format 1 | uvarint len, body
//
// A clear flag means: a zero causation; a correlation equal to the
// causation if there is one, else to the id.
func EncodeCompactRecord(ev Event) ([]byte, error) {
	return appendCompactRecord(nil, &ev)
}

func appendRecord(dst []byte, ev *Event) ([]byte, error) {
	return appendRecordAs(dst, ev, RecordFormat)
}

func appendCompactRecord(dst []byte, ev *Event) ([]byte, error) {
	return appendRecordAs(dst, ev, RecordFormatCompact)
}

// impliedCorrelation is the correlation a compact record implies.
func impliedCorrelation(id, causation ulid.ULID) ulid.ULID {
	if causation != (ulid.ULID{}) {
		return causation
	}
	return id
}

func appendRecordAs(dst []byte, ev *Event, format byte) ([]byte, error) {
	if err := validateEnvelope(ev); err != nil {
		return dst, err
	}
	nanos, err := unixNanos(ev.Time)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	var flags byte
	if format == RecordFormatCompact {
		if ev.Causation != (ulid.ULID{}) {
			flags |= flagCausation
		}
		if ev.Correlation != impliedCorrelation(ev.ID, ev.Causation) {
			flags |= flagCorrelation
		}
		dst = append(dst, 0, 0, 0, 0, format, flags)
	} else {
		dst = append(dst, 0, 0, 0, 0, format)
	}
	dst = append(dst, ev.ID[:]...)
	dst = binary.AppendUvarint(dst, ev.Seq)
	dst = binary.AppendUvarint(dst, uint64(len(ev.Stream)))
	dst = append(dst, ev.Stream...)
	dst = binary.AppendUvarint(dst, ev.Version)
	dst = binary.AppendUvarint(dst, uint64(len(ev.Type)))
	dst = append(dst, ev.Type...)
	dst = binary.BigEndian.AppendUint64(dst, uint64(nanos))
	if format == RecordFormat || flags&flagCausation != 0 {
		dst = append(dst, ev.Causation[:]...)
	}
	if format == RecordFormat || flags&flagCorrelation != 0 {
		dst = append(dst, ev.Correlation[:]...)
	}
	dst = binary.BigEndian.AppendUint16(dst, ev.Schema)
	dst = binary.AppendUvarint(dst, uint64(len(ev.Metadata)))
	if len(ev.Metadata) > 0 {
		var keysBuf [16]string
		keys := keysBuf[:0]
		for k := range ev.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v := ev.Metadata[k]
			dst = binary.AppendUvarint(dst, uint64(len(k)))
			dst = append(dst, k...)
			dst = binary.AppendUvarint(dst, uint64(len(v)))
			dst = append(dst, v...)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(ev.Body)))
	dst = append(dst, ev.Body...)
	if len(dst)-start > maxRecordLen {
		return dst[:start], invalidf("record is %d bytes, larger than %d", len(dst)-start, maxRecordLen)
	}
	binary.BigEndian.PutUint32(dst[start:], crc32.Checksum(dst[start+4:], castagnoli))
	return dst, nil
}

// encodedSizeHint estimates the record size of ev without encoding it.
func encodedSizeHint(ev *Event) int {
	n := recordFixedLen + 3*9 + len(ev.Stream) + len(ev.Type) + len(ev.Body) + 5
	for k, v := range ev.Metadata {
		n += len(k) + len(v) + 10
	}
	return n
}

// validateEnvelope checks the limits the decoder enforces.
func validateEnvelope(ev *Event) error {
	if err := ValidateStream(ev.Stream); err != nil {
		return err
	}
	if ev.Type == "" {
		return invalidf("event type is empty")
	}
	if len(ev.Type) > MaxTypeLen {
		return invalidf("event type is %d bytes, longer than %d", len(ev.Type), MaxTypeLen)
	}
	if len(ev.Metadata) > MaxMetadataEntries {
		return invalidf("event has %d metadata entries, more than %d", len(ev.Metadata), MaxMetadataEntries)
	}
	for k, v := range ev.Metadata {
		if k == "" || len(k) > MaxMetadataKeyLen {
			return invalidf("metadata key %q is empty or longer than %d bytes", k, MaxMetadataKeyLen)
		}
		if len(v) > MaxMetadataValueLen {
			return invalidf("metadata value for %q is %d bytes, longer than %d", k, len(v), MaxMetadataValueLen)
		}
	}
	return nil
}

// unixNanos converts t, refusing times that int64 nanoseconds cannot hold
// (before 1678 or after 2262) rather than silently wrapping.
func unixNanos(t time.Time) (int64, error) {
	n := t.UnixNano()
	if !time.Unix(0, n).Equal(t) {
		return 0, invalidf("time %s is outside the range of int64 unix nanoseconds", t)
	}
	return n, nil
}

// DecodeRecord decodes and checks a stored record. It verifies the checksum
// and every length and limit, never panics, and never allocates more than the
// input's size whatever the lengths inside claim. Every failure is a
// *CorruptionError (Seq is 0: the caller knows the position).
func DecodeRecord(rec []byte) (Event, error) {
	var ev Event
	err := decodeRecord(rec, &ev)
	return ev, err
}

type recordReader struct {
	b   []byte
	err string
}

func (r *recordReader) fail(reason string) {
	if r.err == "" {
		r.err = reason
	}
	r.b = nil
}

func (r *recordReader) uvarint(what string) uint64 { return r.uvarintOf(what, "") }

// uvarintOf reads a uvarint; what and suffix name it in an error (joined
// only on failure: this runs several times per record).
func (r *recordReader) uvarintOf(what, suffix string) uint64 {
	if r.err != "" {
		return 0
	}
	if len(r.b) > 0 && r.b[0] < 0x80 {
		v := uint64(r.b[0])
		r.b = r.b[1:]
		return v
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("truncated or overlong varint for " + what + suffix)
		return 0
	}
	if n > 1 && r.b[n-1] == 0 {
		// A zero final byte adds nothing: the encoder never writes it, and
		// accepting it would give one value several encodings.
		r.fail("non-minimal varint for " + what + suffix)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) fixed(n int, what string) []byte {
	if r.err != "" {
		return nil
	}
	if len(r.b) < n {
		r.fail("truncated " + what)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// bytes reads a uvarint length and that many bytes. The length is checked
// against the remaining input before anything is sliced or allocated.
func (r *recordReader) bytes(max int, what string) []byte {
	n := r.uvarintOf(what, " length")
	if r.err != "" {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail(what + " length exceeds the record")
		return nil
	}
	if max > 0 && n > uint64(max) {
		r.fail(what + " is longer than allowed")
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func decodeRecord(rec []byte, ev *Event) error { return decodeRecordAs(rec, ev, 0) }

// decodeMode says how decodeRecordAs decodes.
type decodeMode uint8

const (
	// decodeBorrow makes the event's Stream, Type and Body alias the
	// record instead of a copy (ScanBorrowed).
	decodeBorrow decodeMode = 1 << iota
	// decodeTrusted skips the record's CRC-32C: for bulk scans of
	// records Pebble has just read from a block it checksummed (an
	// sstable block, a WAL chunk at replay) or from its memtable. Verify
	// and point reads check it (format.md, "Which reads check the
	// checksum"). Every other check is made.
	decodeTrusted
)

// decodeRecordAs decodes rec into ev as mode says. A compact record
// without metadata, the common case, takes decodeCompact's path; any other
// record, and every record decodeCompact does not accept, takes
// decodeCareful's, which reports what is wrong.
func decodeRecordAs(rec []byte, ev *Event, mode decodeMode) error {
	if !decodeCompact(rec, ev, mode) {
		*ev = Event{}
		if err := decodeCareful(rec, ev, mode); err != nil {
			return err
		}
	}
	if mode&decodeBorrow == 0 {
		own(ev)
	}
	return nil
}

// own copies ev's Stream, Type and Body, which alias the record they were
// decoded from, into one allocation: decoding is on the hot path of every
// scan.
func own(ev *Event) {
	ls, lt := len(ev.Stream), len(ev.Type)
	buf := make([]byte, ls+lt+len(ev.Body))
	copy(buf, ev.Stream)
	copy(buf[ls:], ev.Type)
	copy(buf[ls+lt:], ev.Body)
	ev.Stream = bytesToString(buf[:ls])
	ev.Type = bytesToString(buf[ls : ls+lt])
	if ev.Body != nil {
		ev.Body = buf[ls+lt:]
	}
}

// decodeCompact decodes a compact record without metadata into ev, in
// place (its Stream, Type and Body alias rec), and reports true, or
// reports false and leaves ev as it was. It accepts
// exactly the records of that shape that decodeCareful accepts and decodes
// them to the same event (TestDecodeCompactMatchesCareful,
// FuzzDecodeRecord); it reads the fields with indexes into rec instead of
// a reader that names each one, since it leaves the naming of a fault to
// decodeCareful.
func decodeCompact(rec []byte, ev *Event, mode decodeMode) bool {
	if len(rec) < compactFixedLen || len(rec) > maxRecordLen || rec[4] != RecordFormatCompact {
		return false
	}
	if mode&decodeTrusted == 0 && crc32.Checksum(rec[4:], castagnoli) != binary.BigEndian.Uint32(rec) {
		return false
	}
	flags := rec[5]
	if flags&^flagsKnown != 0 {
		return false
	}
	id := ulid.ULID(rec[6:22])
	i := 22
	// The sequence, the version and the body's length mostly take more
	// than a byte: straight to the loop.
	seq, i := uvarintLong(rec, i)
	var n uint64
	n, i = uvarintAt(rec, i)
	if i < 0 || n == 0 || n > MaxStreamLen || n > uint64(len(rec)-i) {
		return false
	}
	stream := rec[i : i+int(n)]
	i += int(n)
	version, i := uvarintLong(rec, i)
	n, i = uvarintAt(rec, i)
	if i < 0 || n == 0 || n > MaxTypeLen || n > uint64(len(rec)-i) {
		return false
	}
	typ := rec[i : i+int(n)]
	i += int(n)
	if len(rec)-i < 8 {
		return false
	}
	nanos := int64(binary.BigEndian.Uint64(rec[i:]))
	i += 8
	var causation, correlation ulid.ULID
	if flags&flagCausation != 0 {
		if len(rec)-i < 16 {
			return false
		}
		causation = ulid.ULID(rec[i : i+16])
		i += 16
		if causation == (ulid.ULID{}) {
			return false
		}
	}
	implied := impliedCorrelation(id, causation)
	if flags&flagCorrelation != 0 {
		if len(rec)-i < 16 {
			return false
		}
		correlation = ulid.ULID(rec[i : i+16])
		i += 16
		if correlation == implied {
			return false
		}
	} else {
		correlation = implied
	}
	// The schema, a zero metadata count, then the body to the end.
	if len(rec)-i < 3 || rec[i+2] != 0 {
		return false
	}
	schema := binary.BigEndian.Uint16(rec[i:])
	n, i = uvarintLong(rec, i+3)
	if i < 0 || n != uint64(len(rec)-i) {
		return false
	}
	body := rec[i:]
	if bytes.IndexByte(stream, 0) >= 0 {
		return false
	}
	if len(body) == 0 {
		body = nil
	}
	// Field by field: a composite literal is built aside and copied whole.
	ev.ID, ev.Seq, ev.Stream, ev.Version, ev.Type = id, seq, bytesToString(stream), version, bytesToString(typ)
	ev.Time = time.Unix(0, nanos).UTC()
	ev.Causation, ev.Correlation, ev.Schema = causation, correlation, schema
	ev.Metadata, ev.Body = nil, body
	return true
}

// uvarintAt reads the uvarint at b[i:] and returns it and the index after
// it, or an index of -1 if it is truncated, overlong or not minimal (as
// recordReader.uvarintOf refuses); an index of -1 gives -1.
func uvarintAt(b []byte, i int) (uint64, int) {
	if uint(i) < uint(len(b)) && b[i] < 0x80 {
		return uint64(b[i]), i + 1
	}
	return uvarintLong(b, i)
}

// uvarintLong is uvarintAt without the shortcut for one byte:
// binary.Uvarint's loop, with the minimal encoding required, in place.
func uvarintLong(b []byte, i int) (uint64, int) {
	if i < 0 {
		return 0, -1
	}
	var x uint64
	var s uint
	for j := range binary.MaxVarintLen64 {
		if i+j >= len(b) {
			return 0, -1 // truncated
		}
		c := b[i+j]
		if c < 0x80 {
			if (c == 0 && j > 0) || (j == binary.MaxVarintLen64-1 && c > 1) {
				return 0, -1 // not minimal, or overflow
			}
			return x | uint64(c)<<s, i + j + 1
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	return 0, -1 // overlong
}

// decodeCareful decodes rec into ev (which must be zero), in place (its
// Stream, Type and Body alias rec), naming what is wrong with a record it
// refuses.
func decodeCareful(rec []byte, ev *Event, mode decodeMode) error {
	// The shortest record of any format; each format's own minimum is
	// checked by the reads below.
	if len(rec) < compactFixedLen {
		return &CorruptionError{Reason: "record too short"}
	}
	if len(rec) > maxRecordLen {
		return &CorruptionError{Reason: "record too long"}
	}
	if mode&decodeTrusted == 0 {
		if got, want := crc32.Checksum(rec[4:], castagnoli), binary.BigEndian.Uint32(rec); got != want {
			return &CorruptionError{Reason: "checksum mismatch"}
		}
	}
	var flags byte
	var r recordReader
	switch rec[4] {
	case RecordFormat:
		if len(rec) < recordFixedLen {
			return &CorruptionError{Reason: "record too short"}
		}
		r.b = rec[5:]
	case RecordFormatCompact:
		flags = rec[5]
		if flags&^flagsKnown != 0 {
			return &CorruptionError{Reason: "unknown record flags " + strconv.Itoa(int(flags))}
		}
		r.b = rec[6:]
	default:
		return &CorruptionError{Reason: "unknown record format " + strconv.Itoa(int(rec[4]))}
	}
	copy(ev.ID[:], r.fixed(16, "id"))
	ev.Seq = r.uvarint("seq")
	stream := r.bytes(MaxStreamLen, "stream")
	ev.Version = r.uvarint("version")
	typ := r.bytes(MaxTypeLen, "type")
	if t := r.fixed(8, "time"); t != nil {
		ev.Time = time.Unix(0, int64(binary.BigEndian.Uint64(t))).UTC()
	}
	if rec[4] == RecordFormat {
		copy(ev.Causation[:], r.fixed(16, "causation"))
		copy(ev.Correlation[:], r.fixed(16, "correlation"))
	} else {
		// One encoding per record: a stored field must differ from what
		// its clear flag would imply.
		if flags&flagCausation != 0 {
			copy(ev.Causation[:], r.fixed(16, "causation"))
			if r.err == "" && ev.Causation == (ulid.ULID{}) {
				r.fail("zero causation stored")
			}
		}
		implied := impliedCorrelation(ev.ID, ev.Causation)
		if flags&flagCorrelation != 0 {
			copy(ev.Correlation[:], r.fixed(16, "correlation"))
			if r.err == "" && ev.Correlation == implied {
				r.fail("implied correlation stored")
			}
		} else {
			ev.Correlation = implied
		}
	}
	if s := r.fixed(2, "schema"); s != nil {
		ev.Schema = binary.BigEndian.Uint16(s)
	}
	n := r.uvarint("metadata count")
	if r.err == "" && n > 0 {
		// Each entry takes at least three bytes, which bounds the map size
		// by the input before it is allocated.
		if n > MaxMetadataEntries || n > uint64(len(r.b)/3) {
			r.fail("metadata count exceeds the record or the limit")
		} else {
			ev.Metadata = make(map[string]string, n)
			var prev []byte
			for i := uint64(0); i < n && r.err == ""; i++ {
				k := r.bytes(MaxMetadataKeyLen, "metadata key")
				v := r.bytes(MaxMetadataValueLen, "metadata value")
				if r.err != "" {
					break
				}
				if len(k) == 0 {
					r.fail("empty metadata key")
					break
				}
				if i > 0 && string(k) <= string(prev) {
					r.fail("metadata keys not strictly ascending")
					break
				}
				prev = k
				ev.Metadata[string(k)] = string(v)
			}
		}
	}
	body := r.bytes(0, "body")
	if r.err == "" && len(r.b) != 0 {
		r.fail("trailing bytes after body")
	}
	if r.err != "" {
		*ev = Event{}
		return &CorruptionError{Reason: r.err}
	}
	if len(stream) == 0 {
		return &CorruptionError{Reason: "empty stream name"}
	}
	if strings.IndexByte(string(stream), 0) >= 0 {
		return &CorruptionError{Reason: "stream name contains NUL"}
	}
	if len(typ) == 0 {
		return &CorruptionError{Reason: "empty event type"}
	}
	ev.Stream, ev.Type = bytesToString(stream), bytesToString(typ)
	if len(body) > 0 {
		ev.Body = body
	}
	return nil
}
