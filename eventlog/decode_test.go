package eventlog

import (
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
)

// decodeModes are every combination of the decoder's modes.
var decodeModes = []decodeMode{0, decodeBorrow, decodeTrusted, decodeBorrow | decodeTrusted}

// checkDecodeCompact compares decodeCompact with decodeCareful on rec in
// every mode: what the fast path accepts, the careful one accepts and
// decodes to the same event; what the careful one accepts as a compact
// record without metadata, the fast path accepts. It reports whether the
// careful path accepted rec.
func checkDecodeCompact(t *testing.T, rec []byte) bool {
	t.Helper()
	accepted := false
	for _, mode := range decodeModes {
		var fast, careful Event
		// The fast path must leave ev alone when it declines.
		fast.Seq, fast.Stream = 99, "untouched"
		ok := decodeCompact(rec, &fast, mode)
		err := decodeCareful(rec, &careful, mode)
		switch {
		case ok && err != nil:
			t.Fatalf("mode %d: the fast path accepted %x, the careful one refused it: %v", mode, rec, err)
		case ok && !reflect.DeepEqual(fast, careful):
			t.Fatalf("mode %d: %x decodes to\n%+v (fast)\n%+v (careful)", mode, rec, fast, careful)
		case !ok && (fast.Seq != 99 || fast.Stream != "untouched"):
			t.Fatalf("mode %d: the fast path declined %x and changed the event: %+v", mode, rec, fast)
		case !ok && err == nil && rec[4] == RecordFormatCompact && careful.Metadata == nil:
			t.Fatalf("mode %d: the fast path declined %x, a compact record without metadata", mode, rec)
		}
		var whole Event
		werr := decodeRecordAs(rec, &whole, mode)
		if (werr == nil) != (err == nil) || (err == nil && !reflect.DeepEqual(whole, careful)) {
			t.Fatalf("mode %d: decodeRecordAs gives %+v, %v; the careful path %+v, %v", mode, whole, werr, careful, err)
		}
		if err == nil {
			accepted = true
			if mode&decodeBorrow == 0 && len(whole.Body) > 0 && &whole.Body[0] == &rec[len(rec)-len(whole.Body)] {
				t.Fatalf("mode %d: an owned event's body aliases the record", mode)
			}
		}
	}
	return accepted
}

// randomEvent is an event the log could store: every field drawn, with
// each of the compact record's cases (no causation, a correlation equal to
// the id, to the causation, or to neither) and metadata sometimes.
func randomEvent(rng *rand.Rand) Event {
	word := func(max int) string {
		b := make([]byte, 1+rng.Intn(max))
		for i := range b {
			b[i] = byte('!' + rng.Intn(94))
		}
		return string(b)
	}
	big := func() uint64 { return rng.Uint64() >> rng.Intn(64) }
	ev := Event{
		ID: idFrom(big() + 1), Seq: big(), Stream: word(40), Version: big(), Type: word(30),
		Time:   time.Unix(0, rng.Int63()-rng.Int63()).UTC(),
		Schema: uint16(rng.Intn(3) * rng.Intn(70000)),
	}
	if rng.Intn(2) == 0 {
		ev.Causation = idFrom(big() + 2)
	}
	switch rng.Intn(3) {
	case 0:
		ev.Correlation = impliedCorrelation(ev.ID, ev.Causation)
	case 1:
		ev.Correlation = idFrom(big() + 3)
	}
	if rng.Intn(8) == 0 {
		ev.Metadata = map[string]string{word(10): word(20)}
	}
	if n := rng.Intn(4); n > 0 {
		ev.Body = make([]byte, rng.Intn(300*n))
		rng.Read(ev.Body)
	}
	if strings.IndexByte(ev.Stream, 0) >= 0 {
		panic("word drew a NUL")
	}
	return ev
}

// TestDecodeCompactMatchesCareful decodes random records of both formats,
// and each with bytes changed, cut or added (checksum recomputed and not),
// both ways.
func TestDecodeCompactMatchesCareful(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var sound, damaged int
	for range 3000 {
		ev := randomEvent(rng)
		encode := EncodeCompactRecord
		if rng.Intn(4) == 0 {
			encode = EncodeRecord
		}
		rec, err := encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !checkDecodeCompact(t, rec) {
			t.Fatalf("a record of %+v does not decode", ev)
		}
		sound++
		for range 20 {
			bad := append([]byte(nil), rec...)
			switch rng.Intn(4) {
			case 0:
				bad[rng.Intn(len(bad))] ^= byte(1 << rng.Intn(8))
			case 1:
				bad[rng.Intn(len(bad))] = byte(rng.Intn(256))
			case 2:
				bad = bad[:rng.Intn(len(bad))]
			case 3:
				at := rng.Intn(len(bad))
				bad = append(bad[:at], append([]byte{byte(rng.Intn(256))}, bad[at:]...)...)
			}
			if rng.Intn(2) == 0 && len(bad) >= 4 {
				reseal(bad)
			}
			if !checkDecodeCompact(t, bad) {
				damaged++
			}
		}
	}
	t.Logf("%d sound records, %d damaged ones refused", sound, damaged)
}

// TestDecodeCompactRefusesNonCanonical builds compact records that only
// the compact checks refuse (each resealed) and requires both paths to
// refuse them.
func TestDecodeCompactRefusesNonCanonical(t *testing.T) {
	ev := Event{
		ID: idFrom(1), Seq: 300, Stream: "task-1", Version: 200, Type: "T", Time: time.Unix(0, 5).UTC(),
		Causation: idFrom(2), Correlation: idFrom(3), Body: []byte("body"),
	}
	rec, err := EncodeCompactRecord(ev)
	if err != nil {
		t.Fatal(err)
	}
	// 6 + id 16, seq 2, stream 1+6, version 2, type 1+1, time 8.
	causationAt := 6 + 16 + 2 + 7 + 2 + 2 + 8
	patch := func(f func(b []byte)) []byte {
		b := append([]byte(nil), rec...)
		f(b)
		return reseal(b)
	}
	cases := map[string][]byte{
		"zero causation stored": patch(func(b []byte) { clear(b[causationAt : causationAt+16]) }),
		"implied correlation stored": patch(func(b []byte) {
			copy(b[causationAt+16:], b[causationAt:causationAt+16])
		}),
		"unknown flag":         patch(func(b []byte) { b[5] |= 4 }),
		"non-minimal seq":      patch(func(b []byte) { b[22], b[23] = 0x80|b[22], 0x80 }),
		"metadata count 0x80":  patch(func(b []byte) { b[causationAt+32+2] = 0x80 }),
		"NUL in stream":        patch(func(b []byte) { b[6+16+2+3] = 0 }),
		"stream length 0":      patch(func(b []byte) { b[6+16+2] = 0 }),
		"body shorter by one":  patch(func(b []byte) { b[causationAt+32+3]-- }),
		"body longer by one":   patch(func(b []byte) { b[causationAt+32+3]++ }),
		"type length too long": patch(func(b []byte) { b[6+16+2+7+2] = 0x7f }),
	}
	if !checkDecodeCompact(t, rec) {
		t.Fatal("the record before the patches does not decode")
	}
	for name, bad := range cases {
		if checkDecodeCompact(t, bad) {
			t.Errorf("%s: decoded", name)
		}
	}
}
