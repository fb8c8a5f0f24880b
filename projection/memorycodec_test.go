package projection

import (
	"reflect"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/internal/randfill"
	"github.com/vmihailenco/msgpack/v5"
)

// TestDecodeMemoryMatchesReflection decodes random memory bodies (empty
// fields, long strings, unknown keys) both with DecodeMemory's reader and
// with msgpack's reflection, and requires the same result; damaged
// encodings (cut, a byte changed) must be refused by both or by neither.
// A field added to a memory body without a case in memoryField fails it.
func TestDecodeMemoryMatchesReflection(t *testing.T) {
	rng := randfill.Rand(t, *summarySeed, "summary.seed", 5)
	types := []fsm.EventType{MemoryWritten, MemoryPatched, MemoryAppended, EpisodeRecorded}
	for i := range 4000 {
		et := types[rng.IntN(len(types))]
		want, _ := DecodeMemory(et, MemorySchemaVersion, []byte{0x80}) // an empty body of et's type
		if rng.IntN(4) > 0 {
			randfill.Fill(rng, reflect.ValueOf(want).Elem())
		}
		data, err := codec.Encode(want)
		if err != nil {
			t.Fatal(err)
		}
		switch rng.IntN(4) {
		case 0: // a key this build does not know, with a nested value
			extra, err := msgpack.Marshal(map[string]any{"future": []any{1, "x", map[string]any{"y": nil}}})
			if err != nil {
				t.Fatal(err)
			}
			data = append([]byte{data[0] + 1}, append(data[1:], extra[1:]...)...) // a fixmap: one more entry
		case 1: // damaged
			data = append([]byte(nil), data...)
			if rng.IntN(2) == 0 {
				data = data[:rng.IntN(len(data))]
			} else {
				data[rng.IntN(len(data))] = byte(rng.IntN(256))
			}
		}
		viaReflection, _ := DecodeMemory(et, MemorySchemaVersion, []byte{0x80})
		rerr := msgpack.Unmarshal(data, viaReflection)
		if rerr == nil {
			rerr = codec.CheckShape(data)
		}
		got, err := DecodeMemory(et, MemorySchemaVersion, data)
		if (err != nil) != (rerr != nil) {
			t.Fatalf("%d %s %x: reader error %v, reflection error %v", i, et, data, err, rerr)
		}
		if err == nil && !reflect.DeepEqual(got, viaReflection) {
			t.Fatalf("%d %s:\nreader     %+v\nreflection %+v", i, et, got, viaReflection)
		}
	}
}
