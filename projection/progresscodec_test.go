package projection

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/internal/randfill"
)

// TestEncodeProgressMatchesReflection: the hand encoder of Progress writes
// exactly the bytes of the canonical reflection encoder (internal/codec),
// for random progress records with every field filled or empty (the
// awaited tool nil, empty or filled), so that persisted records, and
// verify's byte comparison, do not change with it; EncodeStored's output
// decodes back to the record.
func TestEncodeProgressMatchesReflection(t *testing.T) {
	rng := randfill.Rand(t, *summarySeed, "summary.seed", 4)
	for i := range 2000 {
		var p Progress // every field by reflection: a new one is filled, and must be encoded
		randfill.Fill(rng, reflect.ValueOf(&p).Elem())
		if i%7 == 0 {
			p.AwaitingTool = &PendingTool{}
		}
		want, err := codec.Encode(&p)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendProgress(nil, &p); !bytes.Equal(got, want) {
			t.Fatalf("progress %d: hand encoding differs from reflection\n got %x\nwant %x\n%+v", i, got, want, p)
		}
		if got, err := p.Encode(); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("progress %d: Encode differs from reflection (%v)", i, err)
		}
		task := &fsm.Task{}
		if i%2 == 0 {
			task.Context.InputText = p.Description
		}
		stored, err := p.EncodeStored(task)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeStored(stored, task)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := back.EncodeStored(task)
		if !bytes.Equal(again, stored) {
			t.Fatalf("progress %d does not decode to itself", i)
		}
	}
}
