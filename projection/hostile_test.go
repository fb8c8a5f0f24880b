package projection

import (
	"errors"
	"runtime"
	"testing"
)

// hostile returns a one-entry map whose value under key claims 2^31 array
// elements (or map entries) in 5 bytes: what a corrupt or forged persisted
// record can say.
func hostile(key string, code byte) []byte {
	b := append([]byte{0x81, 0xa0 | byte(len(key))}, key...)
	return append(b, code, 0x7f, 0xff, 0xff, 0xff)
}

// TestHostileLengthsAreErrorsNotAllocations: every decoder of a persisted
// read model refuses forged lengths before allocating for them. Without the
// shape check, "facts" alone asked the runtime for 206 GB.
func TestHostileLengthsAreErrorsNotAllocations(t *testing.T) {
	const arr32, map32 = 0xdd, 0xdf
	cases := []struct {
		name   string
		data   []byte
		decode func([]byte) error
	}{
		{"memory facts", hostile("facts", arr32), func(b []byte) error { _, err := DecodeMemoryState(b); return err }},
		{"memory episodes", hostile("episodes", arr32), func(b []byte) error { _, err := DecodeMemoryState(b); return err }},
		{"progress steps", hostile("completed_steps", arr32), func(b []byte) error { _, err := DecodeProgress(b); return err }},
		{"stats by type", hostile("by_type", map32), func(b []byte) error { _, err := DecodeStats(b, StatsOptions{}); return err }},
		{"summary", hostile("task_id", arr32), func(b []byte) error { _, err := DecodeSummary(b); return err }},
		{"memory body", hostile("content", arr32), func(b []byte) error {
			_, err := DecodeMemory(MemoryWritten, MemorySchemaVersion, b)
			return err
		}},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := c.decode(c.data)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", c.name, err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Errorf("%s: allocated %d bytes for a %d-byte record", c.name, got, len(c.data))
		}
	}
}
