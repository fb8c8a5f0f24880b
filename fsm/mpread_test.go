package fsm

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestMPReaderMatchesMsgpack: for values of every msgpack encoding, each
// primitive of the byte-slice reader returns what msgpack's Decoder does
// (value, error or not) and consumes the same bytes.
func TestMPReaderMatchesMsgpack(t *testing.T) {
	var vals []any
	for _, n := range []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64} {
		vals = append(vals, n, int8(max(min(n, 127), -128)), int16(max(min(n, 32767), -32768)), int32(max(min(n, math.MaxInt32), math.MinInt32)))
	}
	vals = append(vals, uint8(200), uint16(60000), uint32(4e9), uint64(math.MaxUint64), float32(1.5), 2.5, true, false, nil,
		"", "a", strings.Repeat("x", 31), strings.Repeat("y", 32), strings.Repeat("z", 300), strings.Repeat("w", 70000),
		[]byte{}, []byte("bin"), bytes.Repeat([]byte("b"), 300), bytes.Repeat([]byte("c"), 70000),
		[]int{}, []int{1, 2, 3}, make([]string, 20), make([]bool, 70000),
		map[string]int{}, map[string]int{"a": 1}, map[string]any{"k": []any{1, "x", map[string]int{"z": 2}}},
		map[int]bool{}, func() map[int]int {
			m := map[int]int{}
			for i := range 20 {
				m[i] = i
			}
			return m
		}(),
		msgpack.RawMessage{0xd4, 1, 2}, msgpack.RawMessage{0xc7, 3, 5, 1, 2, 3}, msgpack.RawMessage{0xd6, 9, 0x81, 0xa1, 'k', 7},
		msgpack.RawMessage{0xc1}, msgpack.RawMessage{0xcd, 1}, msgpack.RawMessage{0xdb, 0, 0, 1})
	type op struct {
		name string
		mine func(d *mpReader) (any, error)
		ref  func(d *msgpack.Decoder) (any, error)
	}
	ops := []op{
		{"int64", func(d *mpReader) (any, error) { return d.DecodeInt64() }, func(d *msgpack.Decoder) (any, error) { return d.DecodeInt64() }},
		{"int", func(d *mpReader) (any, error) { return d.DecodeInt() }, func(d *msgpack.Decoder) (any, error) { return d.DecodeInt() }},
		{"bool", func(d *mpReader) (any, error) { return d.DecodeBool() }, func(d *msgpack.Decoder) (any, error) { return d.DecodeBool() }},
		{"string", func(d *mpReader) (any, error) { return d.DecodeString() }, func(d *msgpack.Decoder) (any, error) { return d.DecodeString() }},
		{"bytes len", func(d *mpReader) (any, error) { return d.DecodeBytesLen() }, func(d *msgpack.Decoder) (any, error) { return d.DecodeBytesLen() }},
		{"map len", func(d *mpReader) (any, error) { return d.DecodeMapLen() }, func(d *msgpack.Decoder) (any, error) { return d.DecodeMapLen() }},
		{"array len", func(d *mpReader) (any, error) { return d.DecodeArrayLen() }, func(d *msgpack.Decoder) (any, error) { return d.DecodeArrayLen() }},
		{"nil", func(d *mpReader) (any, error) { return nil, d.DecodeNil() }, func(d *msgpack.Decoder) (any, error) { return nil, d.DecodeNil() }},
		{"peek", func(d *mpReader) (any, error) { return d.PeekCode() }, func(d *msgpack.Decoder) (any, error) { return d.PeekCode() }},
		{"skip", func(d *mpReader) (any, error) { return nil, d.Skip() }, func(d *msgpack.Decoder) (any, error) { return nil, d.Skip() }},
	}
	for _, v := range vals {
		var data []byte
		if raw, ok := v.(msgpack.RawMessage); ok {
			data = raw
		} else {
			var err error
			if data, err = msgpack.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		for _, o := range ops {
			var d mpReader
			d.reset(string(data))
			got, gotErr := o.mine(&d)
			br := bytes.NewReader(data)
			want, wantErr := o.ref(msgpack.NewDecoder(br))
			if (gotErr != nil) != (wantErr != nil) || (gotErr == nil && (fmt.Sprint(got) != fmt.Sprint(want) || d.p != len(data)-br.Len())) {
				t.Errorf("%s of % x: got %v, %v after %d bytes; msgpack %v, %v after %d", o.name, data[:min(len(data), 12)],
					got, gotErr, d.p, want, wantErr, len(data)-br.Len())
			}
		}
	}
}

// TestDecodeDoesNotAliasInput: a decoded body's strings are its own (one
// copy per body), so a caller may reuse the bytes it decoded.
func TestDecodeDoesNotAliasInput(t *testing.T) {
	data, err := Encode(&StepCompletedBody{StepIndex: 2, Result: "the result", NewMessages: []Message{{Role: "tool", Content: "said"}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode(StepCompleted, SchemaVersion, data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 'X'
	}
	sc := b.(*StepCompletedBody)
	if sc.Result != "the result" || sc.NewMessages[0].Role != "tool" || sc.NewMessages[0].Content != "said" {
		t.Fatalf("decoded strings changed with the input: %+v", sc)
	}
}

// TestDecodeSharedMatchesDecode: decoding a body held in a string gives
// what Decode gives, for every event type the fold reads most.
func TestDecodeSharedMatchesDecode(t *testing.T) {
	for _, b := range []Body{
		&TaskCreatedBody{TaskType: "t", InputText: "in", Metadata: map[string]string{"a": "b"}, Machine: MachineRef{Name: "pegasus.task", Version: 1}},
		&ReasonDoneBody{Reasoning: Reasoning{Text: "why", Model: "m"}, Plan: Plan{Goal: "g", Steps: []PlanStep{{Index: 0, Description: "d", ActionType: ActionRespond, ActionParams: map[string]string{"k": "v"}}}}},
		&StepCompletedBody{StepIndex: 1, Result: "r", NewMessages: []Message{{Role: "tool", Content: "c", ToolCalls: []ToolCall{{ID: "1", Name: "n", Arguments: "{}"}}}}},
		&ModelCalledBody{Purpose: "reason", Attempt: 2, LatencyMS: -5, Status: 200, Content: strings.Repeat("x", 300)},
		&TaskCompletedBody{},
	} {
		data, err := Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		want, err1 := Decode(b.EventType(), SchemaVersion, data)
		got, err2 := DecodeShared(b.EventType(), SchemaVersion, string(data))
		if err1 != nil || err2 != nil || fmt.Sprintf("%#v", want) != fmt.Sprintf("%#v", got) {
			t.Fatalf("%s: Decode %#v, %v; DecodeShared %#v, %v", b.EventType(), want, err1, got, err2)
		}
	}
}
