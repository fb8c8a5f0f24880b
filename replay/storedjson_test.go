package replay

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/internal/randfill"
)

var storedSeed = flag.Uint64("stored-seed", 0, "TestAppendStoredMatchesReflection's seed (0: a new one)")

// randomText is a string of pieces that every JSON escaping rule meets:
// plain ASCII, quotes and backslashes, control characters, HTML
// characters, multi-byte runes, U+2028 and U+2029, and invalid UTF-8.
func randomText(rng *rand.Rand) string {
	pieces := []string{"a", "task-1", "$system", `"`, `\`, "\x00", "\x01", "\x1f", "\b", "\f", "\n", "\r", "\t", "\x7f",
		"<", ">", "&", "é", "日本", "🙂", "\u2028", "\u2029", "\xff", "\xe2\x80", " ", "/"}
	var b strings.Builder
	for range rng.IntN(12) {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

func randomID(rng *rand.Rand) ulid.ULID {
	var id ulid.ULID
	if rng.IntN(4) != 0 {
		for i := range id {
			id[i] = byte(rng.IntN(256))
		}
	}
	return id
}

// randomEvent is an event with every field drawn: zero and not, times in
// other zones, before 1970, with and without nanoseconds, and outside the
// years JSON's time form allows.
func randomEvent(rng *rand.Rand) eventlog.Event {
	secs := []int64{0, 1, -1, 1 << 33, rng.Int64N(4e9), -62135596800, -62135596801, 253402300799, 253402300800}[rng.IntN(9)]
	tm := time.Unix(secs, int64(rng.IntN(3))*int64(rng.IntN(1e9)))
	if rng.IntN(2) == 0 {
		tm = tm.In(time.FixedZone("X", 3600*(rng.IntN(27)-13)))
	}
	ev := eventlog.Event{
		ID: randomID(rng), Seq: []uint64{0, 1, 1 << 40, ^uint64(0)}[rng.IntN(4)], Stream: randomText(rng),
		Version: []uint64{0, 7, ^uint64(0)}[rng.IntN(3)], Type: randomText(rng), Schema: uint16(rng.IntN(1 << 16)), Time: tm,
		Causation: randomID(rng), Correlation: randomID(rng),
	}
	if n := []int{0, 0, 1, 3}[rng.IntN(4)]; n > 0 || rng.IntN(2) == 0 {
		ev.Metadata = map[string]string{}
		for range n {
			ev.Metadata[randomText(rng)] = randomText(rng)
		}
	}
	switch rng.IntN(3) {
	case 0:
	case 1:
		ev.Body = []byte{}
	default:
		ev.Body = make([]byte, rng.IntN(300))
		for i := range ev.Body {
			ev.Body[i] = byte(rng.IntN(256))
		}
	}
	return ev
}

// The clustered log's messages are built by AppendStored, not by
// reflection: they must be byte for byte what encoding/json makes of the
// stored form, for every event.
func TestAppendStoredMatchesReflection(t *testing.T) {
	rng := randfill.Rand(t, *storedSeed, "stored-seed", 1)
	prefix := []byte("prefix")
	reflected := func(ev eventlog.Event) ([]byte, error) {
		j := storedJSON(ev)
		return marshalJSON(&j)
	}
	for i := range 20000 {
		ev := randomEvent(rng)
		want, werr := reflected(ev)
		got, gerr := AppendStored(append([]byte(nil), prefix...), ev)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("event %d %+v: error %v, reflection's %v", i, ev, gerr, werr)
		}
		if werr != nil {
			continue
		}
		if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("event %d %+v:\n got %s\nwant %s", i, ev, got[len(prefix):], want)
		}
	}
	// Events as the clustered log carries them (UTC, no sequence or
	// version, no empty metadata or body).
	loc := time.FixedZone("X", 3600)
	for _, ev := range []eventlog.Event{
		{ID: ulid.Make(), Stream: "task-1", Type: "TASK_CREATED", Schema: 3, Time: time.Now().UTC().Round(0), Body: []byte{0x80}},
		{ID: ulid.Make(), Stream: "task-1", Type: "X", Time: time.Date(2026, 1, 2, 3, 4, 5, 6, loc).UTC(),
			Causation: ulid.Make(), Correlation: ulid.Make()},
		{ID: ulid.Make(), Stream: "task-1", Type: "Y", Schema: 12, Time: time.Now().UTC().Round(0), Body: []byte("b")},
		{ID: ulid.Make(), Stream: "$system", Type: "SYSTEM_STARTED", Schema: 1, Time: time.Now().UTC().Round(0), Metadata: map[string]string{"k": "v"}, Body: []byte("not msgpack")},
	} {
		want, _ := reflected(ev)
		if got, err := AppendStored(nil, ev); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %s (%v)\nwant %s", ev, got, err, want)
		}
	}
}

// BenchmarkStoredForm prices one event's stored JSON form, by reflection
// and by AppendStored, for an event of a task's size: ids, a time, a
// metadata entry and a 400-byte body.
func BenchmarkStoredForm(b *testing.B) {
	ev := eventlog.Event{ID: ulid.Make(), Stream: ulid.Make().String(), Type: "MODEL_CALLED", Schema: 2, Time: time.Now().UTC().Round(0),
		Causation: ulid.Make(), Correlation: ulid.Make(), Metadata: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		Body: bytes.Repeat([]byte{0xa5}, 400)}
	b.Run("reflection", func(b *testing.B) {
		for b.Loop() {
			j := storedJSON(ev)
			if _, err := marshalJSON(&j); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = AppendStored(buf[:0], ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
