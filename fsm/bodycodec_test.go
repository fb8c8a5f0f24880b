package fsm

import (
	"bytes"
	"errors"
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
	rng := randfill.Rand(t, *encodeSeed, "encode.seed", 2)
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
		func() Body { return &DispatchCreatedBody{} },
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
			enc, err := Encode(b)
			if err != nil || !bytes.Equal(enc, want) {
				t.Fatalf("%T %d: Encode differs from the reflection encoder (%v):\n got %x\nwant %x", b, i, err, enc, want)
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

// TestEncodeOwnsItsBytes: what Encode and AppendTask return is the
// caller's, never the buffer Encode encodes in, which the next body
// reuses (AppendTask borrows its encoder).
func TestEncodeOwnsItsBytes(t *testing.T) {
	bodies := benchBodies()
	var s stepper
	task, _ := foldLines(t, &s, Task{}, fullLife...)
	wantTask, err := codec.Encode(task)
	if err != nil {
		t.Fatal(err)
	}
	var got, want [][]byte
	for range 3 {
		got = append(got, AppendTask([]byte("prefix"), &task))
		want = append(want, append([]byte("prefix"), wantTask...))
		for _, b := range bodies {
			enc, err := Encode(b)
			if err != nil {
				t.Fatal(err)
			}
			w, err := codec.Encode(b)
			if err != nil {
				t.Fatal(err)
			}
			got, want = append(got, enc), append(want, w)
		}
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("body %d changed after later encodings:\n got %x\nwant %x", i, got[i], want[i])
		}
		if i%(len(bodies)+1) != 0 && len(got[i]) != cap(got[i]) { // a body, not a task
			t.Errorf("body %d: %d bytes in an array of %d", i, len(got[i]), cap(got[i]))
		}
	}
}

// TestEncodeKnowsEveryType: Encode accepts a body exactly when its event
// type has a body (newBody), without building one.
func TestEncodeKnowsEveryType(t *testing.T) {
	types := append([]EventType{"", "NOPE", "message_received", "TASK_CREATED ", "DISPATCH_"}, EventTypes...)
	for _, et := range types {
		_, want := newBody(et)
		if _, got := bodyTypes[et]; got != want {
			t.Errorf("%q: Encode knows it %v, newBody %v", et, got, want)
		}
		in := &Input{Kind: et} // of type MESSAGE_RECEIVED when et is ""
		_, want = newBody(in.EventType())
		_, err := Encode(in)
		if known := !errors.Is(err, ErrUnknownEvent); known != want {
			t.Errorf("Encode of an input of kind %q: %v, want known %v", et, err, want)
		}
	}
}

// benchBodies are the bodies of a task that calls one tool, as the agent
// records them.
func benchBodies() []Body {
	calls := []ToolCall{{ID: "call_1", Name: "everything__echo", Arguments: `{"message":"hello"}`}}
	return []Body{
		&TaskCreatedBody{Machine: MachineRef{Name: MachineName, Version: 1}, TaskType: "general", InputText: "say hello", Source: "bench", TypeVersion: "sha256:0123456789abcdef", Model: "default"},
		&ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "bench", LatencyMS: 3, Status: 200, PromptTokens: 120, CompletionTokens: 20, ToolCalls: calls, FinishReason: "tool_calls"},
		&ReasonDoneBody{Reasoning: Reasoning{ToolCalls: calls, Model: "bench"},
			Plan: Plan{Goal: "say hello", Steps: []PlanStep{{Index: 0, Description: "call everything__echo", ActionType: ActionToolCall,
				ActionParams: map[string]string{"tool": "everything__echo", "arguments": `{"message":"hello"}`, "tool_call_id": "call_1"}}}},
			NewMessages: []Message{{Role: "user", Content: "say hello"}, {Role: "assistant", ToolCalls: calls}}},
		&ToolCallStartedBody{Tool: "everything__echo", ToolCallID: "call_1", Arguments: `{"message":"hello"}`, IdempotencyKey: "01JN8EY5K80000000000000001:1:0", Source: "mcp:everything"},
		&ToolCallResultBody{Tool: "everything__echo", ToolCallID: "call_1", IdempotencyKey: "01JN8EY5K80000000000000001:1:0", Result: "Echo: hello", DurationMS: 1,
			NewMessages: []Message{{Role: "tool", Content: "Echo: hello", ToolCallID: "call_1"}}, Source: "mcp:everything"},
		&StepCompletedBody{Result: "Echo: hello", NewMessages: []Message{{Role: "assistant", Content: "Echo: hello"}}},
		&TaskCompletedBody{Result: "Echo: hello"},
	}
}

// BenchmarkEncodeBodies encodes the bodies of a one-call task (an op is
// all of them) with Encode; BenchmarkEncodeBodiesReflection with the
// reflection encoder Encode used before: compare the two in one run.
func BenchmarkEncodeBodies(b *testing.B) {
	bodies := benchBodies()
	b.ReportAllocs()
	for b.Loop() {
		for _, x := range bodies {
			if _, err := Encode(x); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkEncodeBodiesReflection(b *testing.B) {
	bodies := benchBodies()
	b.ReportAllocs()
	for b.Loop() {
		for _, x := range bodies {
			if _, err := codec.Encode(x); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// appendBody appends b's encoding to dst when b is one of the bodies
// encoded by hand, and reports whether it was.
func appendBody(dst []byte, b Body) ([]byte, bool) {
	e := taskEncoder{b: dst}
	ok := encBody(&e, b)
	return e.b, ok
}
