package eventlog

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleEvents() []Event {
	return []Event{
		{ID: idFrom(1), Seq: 1, Stream: "s", Version: 1, Type: "T", Time: time.Unix(0, 0).UTC(), Correlation: idFrom(1)},
		{
			ID: idFrom(2), Seq: 1 << 40, Stream: "task-01J0000000000000000000000", Version: 300, Type: "TASK_CREATED",
			Time: time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC), Causation: idFrom(1), Correlation: idFrom(1),
			Schema: 65535, Metadata: map[string]string{"trace": "abc", "agent": "x", "empty": ""},
			Body: []byte{0x82, 0xa1, 'a', 0x01, 0xa1, 'b', 0xc0},
		},
		{ID: idFrom(3), Seq: 7, Stream: "$inputs", Version: 7, Type: "INPUT", Time: time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), Body: bytes.Repeat([]byte{0xff}, 1000)},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, e := range sampleEvents() {
		rec, err := EncodeRecord(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("round trip\n got %+v\nwant %+v", got, e)
		}
	}
}

// reseal recomputes the checksum so that a test can reach the checks behind
// it.
func reseal(rec []byte) []byte {
	binary.BigEndian.PutUint32(rec, crc32.Checksum(rec[4:], castagnoli))
	return rec
}

func TestDecodeRecordRejects(t *testing.T) {
	good, _ := EncodeRecord(sampleEvents()[1])
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	// header builds a record by hand up to the metadata count.
	header := func(stream string) []byte {
		b := []byte{0, 0, 0, 0, RecordFormat}
		b = append(b, make([]byte, 16)...)
		b = binary.AppendUvarint(b, 1)
		b = binary.AppendUvarint(b, uint64(len(stream)))
		b = append(b, stream...)
		b = binary.AppendUvarint(b, 1)
		b = binary.AppendUvarint(b, 1)
		b = append(b, 'T')
		b = append(b, make([]byte, 8+16+16+2)...)
		return b
	}
	cases := map[string]struct {
		rec    []byte
		reason string
	}{
		"empty":            {nil, "too short"},
		"short":            {good[:20], "too short"},
		"flipped bit":      {mutate(func(b []byte) []byte { b[30] ^= 4; return b }), "checksum"},
		"truncated":        {reseal(mutate(func(b []byte) []byte { return b[:len(b)-1] })), "exceeds the record"},
		"trailing":         {reseal(mutate(func(b []byte) []byte { return append(b, 0) })), "trailing"},
		"format":           {reseal(mutate(func(b []byte) []byte { b[4] = 9; return b })), "unknown record format 9"},
		"huge body length": {reseal(binary.AppendUvarint(append(header("s"), 0), 1<<40)), "body length exceeds"},
		"huge metadata":    {reseal(binary.AppendUvarint(header("s"), 1<<40)), "metadata count"},
		"overlong varint":  {reseal(append(append(header("s"), 0), bytes.Repeat([]byte{0xff}, 11)...)), "varint"},
		"non-minimal":      {reseal(append(append(header("s"), 0), 0x80, 0x00)), "non-minimal"},
		"empty stream":     {reseal(append(header(""), 0, 0)), "empty stream"},
		"NUL in stream":    {reseal(append(header("a\x00"), 0, 0)), "NUL"},
		"long stream":      {reseal(append(header(strings.Repeat("s", 257)), 0, 0)), "stream is longer"},
		"unsorted metadata": {reseal(append(header("s"), 2, 1, 'b', 0, 1, 'a', 0, 0)),
			"ascending"},
		"empty metadata key": {reseal(append(header("s"), 1, 0, 0, 0)), "empty metadata key"},
	}
	for name, c := range cases {
		_, err := DecodeRecord(c.rec)
		if !IsCorruption(err) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want %q", name, err, c.reason)
		}
	}
}

// TestDecodeRecordHostileLengths checks that lengths claimed by the input do
// not drive allocation.
func TestDecodeRecordHostileLengths(t *testing.T) {
	b := []byte{0, 0, 0, 0, RecordFormat}
	b = append(b, make([]byte, 16)...)
	b = append(b, 1, 1, 's', 1, 1, 'T')
	b = append(b, make([]byte, 8+16+16+2)...)
	for _, rec := range [][]byte{
		reseal(binary.AppendUvarint(append([]byte(nil), b...), 1<<62)),            // metadata count
		reseal(binary.AppendUvarint(append(append([]byte(nil), b...), 0), 1<<62)), // body length
	} {
		allocs := testing.AllocsPerRun(100, func() { DecodeRecord(rec) })
		if allocs > 3 {
			t.Errorf("decoding a hostile record allocated %v times", allocs)
		}
	}
}

// FuzzDecodeRecord checks that the decoder never panics, reports every bad
// input as corruption, and accepts only canonical encodings. With fixCRC the
// checksum is recomputed first, so that mutations reach the parser behind it.
// The seed corpus is in testdata/fuzz/FuzzDecodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	for _, e := range sampleEvents() {
		rec, _ := EncodeRecord(e)
		f.Add(rec, false)
		f.Add(rec[:len(rec)/2], true)
		rec, _ = EncodeCompactRecord(e)
		f.Add(rec, false)
		f.Add(rec[:len(rec)/2], true)
	}
	f.Fuzz(func(t *testing.T, rec []byte, fixCRC bool) {
		if fixCRC && len(rec) >= 4 {
			reseal(rec)
		}
		if len(rec) > 4 {
			checkDecodeCompact(t, rec)
		}
		e, err := DecodeRecord(rec)
		if err != nil {
			if !IsCorruption(err) {
				t.Fatalf("error is not a corruption: %v", err)
			}
			return
		}
		// Whatever decodes re-encodes to the same bytes: one encoding per
		// record, so checksums and comparisons are meaningful.
		encode := EncodeRecord
		if rec[4] == RecordFormatCompact {
			encode = EncodeCompactRecord
		}
		again, err := encode(e)
		if err != nil {
			t.Fatalf("decoded record does not re-encode: %v", err)
		}
		if !bytes.Equal(again, rec) {
			t.Fatalf("re-encoding differs:\n%x\n%x", rec, again)
		}
	})
}

// TestFormatDocExample pins the worked example in docs/format.md.
func TestFormatDocExample(t *testing.T) {
	var id [16]byte
	id[0] = 1
	rec, err := EncodeRecord(Event{ID: id, Seq: 1, Stream: "s", Version: 1, Type: "T", Time: time.Unix(0, 0), Correlation: id})
	if err != nil {
		t.Fatal(err)
	}
	want := "01" + "01000000000000000000000000000000" + "01" + "0173" + "01" + "0154" +
		"0000000000000000" + "00000000000000000000000000000000" + "01000000000000000000000000000000" +
		"0000" + "00" + "00"
	if got := hex.EncodeToString(rec[4:]); got != want || len(rec) != 71 {
		t.Fatalf("record %d bytes\n got %s\nwant %s", len(rec), got, want)
	}
	if got := hex.EncodeToString(rec[:4]); got != "b8b60aff" {
		t.Fatalf("checksum %s; update docs/format.md", got)
	}
	if recordFixedLen != 69 {
		t.Fatalf("recordFixedLen %d; update docs/format.md", recordFixedLen)
	}
}
