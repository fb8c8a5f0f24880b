package eventlog

import (
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// BenchmarkDecodeOwned decodes compact records of ~200-byte bodies as a scan
// does, without Pebble: into owned events (Scan: one allocation per event
// for its stream, type and body) and borrowed ones (ScanBorrowed). The
// events land in a ring, as a reader that keeps a few would.
func BenchmarkDecodeOwned(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	recs := make([][]byte, 4096)
	for i := range recs {
		body := make([]byte, 200)
		for j := range body {
			body[j] = 'a' + byte(rng.Intn(26))
		}
		ev := Event{
			ID: ulid.ULID{byte(i), byte(i >> 8), 1}, Seq: uint64(i + 1), Stream: "task/" + strconv.Itoa(i%200),
			Version: uint64(i/200 + 1), Type: "STEP_COMPLETED", Time: time.Unix(0, int64(i)).UTC(), Body: body,
		}
		ev.Correlation = ev.ID
		rec, err := EncodeCompactRecord(ev)
		if err != nil {
			b.Fatal(err)
		}
		recs[i] = rec
	}
	var ring [64]Event
	for _, c := range []struct {
		name string
		mode decodeMode
	}{{"owned", 0}, {"borrowed", decodeBorrow}, {"owned-trusted", decodeTrusted}, {"borrowed-trusted", decodeBorrow | decodeTrusted}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				rec := recs[i%len(recs)]
				if err := decodeAtAs(rec, uint64(i%len(recs)+1), &ring[i%len(ring)], c.mode); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
