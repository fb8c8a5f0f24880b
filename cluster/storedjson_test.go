package cluster

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
	"github.com/pegasus-engine/pegasus/replay"
)

var storedSeed = flag.Uint64("stored-seed", 0, "TestAppendStoredMatchesMarshalStored's seed (0: a new one)")

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

// The stream's messages are built by appendStored, not by reflection: they
// must be byte for byte what replay.MarshalStored gives, for every event.
func TestAppendStoredMatchesMarshalStored(t *testing.T) {
	rng := randfill.Rand(t, *storedSeed, "stored-seed", 1)
	prefix := []byte("prefix")
	for i := range 20000 {
		ev := randomEvent(rng)
		want, werr := replay.MarshalStored(ev)
		got, gerr := appendStored(append([]byte(nil), prefix...), ev)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("event %d %+v: error %v, MarshalStored's %v", i, ev, gerr, werr)
		}
		if werr != nil {
			continue
		}
		if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want) {
			t.Fatalf("event %d %+v:\n got %s\nwant %s", i, ev, got[len(prefix):], want)
		}
	}
	for _, ev := range wireEvents() {
		ev = onWire(ev)
		want, _ := replay.MarshalStored(ev)
		if got, err := appendStored(nil, ev); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %s (%v)\nwant %s", ev, got, err, want)
		}
	}
}

// BenchmarkStoredForm prices one event's stored JSON form, by reflection
// (replay.MarshalStored) and by appendStored, for an event of a task's
// size: ids, a time, a metadata entry and a 400-byte body.
func BenchmarkStoredForm(b *testing.B) {
	ev := onWire(eventlog.Event{ID: ulid.Make(), Stream: ulid.Make().String(), Type: "MODEL_CALLED", Schema: 2, Time: time.Now(),
		Causation: ulid.Make(), Correlation: ulid.Make(), Metadata: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		Body: bytes.Repeat([]byte{0xa5}, 400)})
	b.Run("reflection", func(b *testing.B) {
		for b.Loop() {
			if _, err := replay.MarshalStored(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hand", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = appendStored(buf[:0], ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
