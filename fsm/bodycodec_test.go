package fsm

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/internal/randfill"
)

// TestEncodeBodyMatchesReflection: the bodies Encode writes by hand are
// the bytes msgpack's reflection encoder (internal/codec) writes, for
// random bodies with every field filled or empty, and they decode back
// to the body.
func TestEncodeBodyMatchesReflection(t *testing.T) {
	seed := *encodeSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-encode.seed to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	bodies := []func() Body{
		func() Body { return &Input{Kind: MessageReceived} },
		func() Body { return &TaskCreatedBody{} },
		func() Body { return &ModelCalledBody{} },
		func() Body { return &ReasonDoneBody{} },
		func() Body { return &ToolCallStartedBody{} },
		func() Body { return &ToolCallResultBody{} },
		func() Body { return &StepCompletedBody{} },
		func() Body { return &TaskCompletedBody{} },
		func() Body { return &TaskNotifyBody{} },
	}
	for _, mk := range bodies {
		check := func(i int, b Body) {
			t.Helper()
			want, err := codec.Encode(b)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := appendBody(nil, b)
			if !ok {
				t.Fatalf("%T is not encoded by hand", b)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%T %d: differs from the reflection encoder:\n got %x\nwant %x", b, i, got, want)
			}
			back, err := Decode(b.EventType(), SchemaVersion, got)
			if err != nil {
				t.Fatalf("%T %d: %v", b, i, err)
			}
			if again, _ := Encode(back); !bytes.Equal(again, got) {
				t.Fatalf("%T %d: decoded and encoded again, the bytes differ", b, i)
			}
		}
		check(-1, mk())
		for i := range 300 {
			b := mk()
			randfill.Fill(rng, reflect.ValueOf(b).Elem())
			if in, ok := b.(*Input); ok {
				in.Kind = []EventType{MessageReceived, WebhookTriggered, ScheduleFired}[i%3] // an input's type is its kind
			}
			check(i, b)
		}
	}
}
