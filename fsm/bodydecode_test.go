package fsm

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/pegasus-engine/pegasus/internal/codec"
	"github.com/pegasus-engine/pegasus/internal/randfill"
	"github.com/vmihailenco/msgpack/v5"
)

// fill sets every field reachable from v to a non-zero value derived from
// n: strings, numbers, bools, maps of one entry, slices of two elements and
// pointers to filled values. Fields added to a body later are filled too.
func fill(v reflect.Value, n int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(n*7 + 1))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n)
		fill(e, n+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := 0; i < 2; i++ {
			fill(s.Index(i), n*3+i)
		}
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n+1)
		v.Set(p)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n*11+i)
			}
		}
	case reflect.Array: // ulid.ULID
		for i := 0; i < v.Len(); i++ {
			v.Index(i).SetUint(uint64(n + i))
		}
	}
}

// TestBodyReaderMatchesReflection decodes every body type, with every field
// set, and with only some fields set, both with the field-by-field reader
// and with msgpack's reflection, and requires the same result.
func TestBodyReaderMatchesReflection(t *testing.T) {
	for _, et := range EventTypes {
		for variant := 0; variant < 3; variant++ {
			want, _ := newBody(et)
			switch variant {
			case 0:
				fill(reflect.ValueOf(want).Elem(), 1)
			case 1: // first field only: the others are omitted
				fill(reflect.ValueOf(want).Elem().Field(0), 2)
			}
			if in, ok := want.(*Input); ok {
				in.Kind = et
			}
			if r, ok := want.(*DispatchReportBody); ok {
				r.Kind = et
			}
			if r, ok := want.(*ToolCallResultBody); ok && et == ToolCallCompleted {
				r.Error = ""
			}
			if r, ok := want.(*ToolCallResultBody); ok && et == ToolCallFailed && r.Error == "" {
				r.Error = "boom"
			}
			data, err := Encode(want)
			if err != nil {
				t.Fatalf("%s: %v", et, err)
			}
			viaReflection, _ := newBody(et)
			if err := msgpack.Unmarshal(data, viaReflection); err != nil {
				t.Fatalf("%s: reflection: %v", et, err)
			}
			got, err := Decode(et, SchemaVersion, data)
			if err != nil {
				t.Fatalf("%s variant %d: %v", et, variant, err)
			}
			if !reflect.DeepEqual(got, viaReflection) {
				t.Errorf("%s variant %d:\nreader     %+v\nreflection %+v", et, variant, got, viaReflection)
			}
			if variant == 0 && !reflect.DeepEqual(got, want) {
				t.Errorf("%s: decoded %+v, encoded %+v", et, got, want)
			}
		}
	}
}

// TestBodyReaderSkipsUnknownKeys: a body written by a newer build, with a
// key this one does not know, still decodes (forward compatibility).
func TestBodyReaderSkipsUnknownKeys(t *testing.T) {
	data, err := msgpack.Marshal(map[string]any{
		"message": "hi", "future": map[string]any{"nested": []any{1, "x", nil}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode(TaskNotify, SchemaVersion, data)
	if err != nil {
		t.Fatal(err)
	}
	if b.(*TaskNotifyBody).Message != "hi" {
		t.Fatalf("body = %+v", b)
	}
}

// TestBodyReaderMatchesReflectionRandom decodes random bodies of the types
// the reader has a case for and that hold times (every integer width,
// times in every timestamp form and zone, empty and nil fields) both with
// the reader and with msgpack's reflection, and requires the same result.
func TestBodyReaderMatchesReflectionRandom(t *testing.T) {
	rng := randfill.Rand(t, *encodeSeed, "encode.seed", 3)
	for i := range 1000 {
		want := &DispatchCreatedBody{}
		randfill.Fill(rng, reflect.ValueOf(want).Elem())
		data, err := codec.Encode(want)
		if err != nil {
			t.Fatal(err)
		}
		viaReflection := &DispatchCreatedBody{}
		if err := msgpack.Unmarshal(data, viaReflection); err != nil {
			t.Fatalf("%d: reflection: %v", i, err)
		}
		got, err := Decode(DispatchCreated, SchemaVersion, data)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if !reflect.DeepEqual(got, viaReflection) {
			t.Fatalf("%d:\nreader     %+v\nreflection %+v", i, got, viaReflection)
		}
	}
}

// TestBodiesMatchReflectionRandom decodes random bodies of every type, one
// after another through one Bodies (which reuses a value per type), and
// requires each to equal msgpack's reflection of the same bytes. At the
// end every body decoded is compared again through a shallow copy taken
// when it was decoded: a slice, map or pointer that a later decode wrote
// into (which a task would then see change) fails it, and so does a field
// left over from the previous body of the type. The new messages of a
// step's result are the documented exception.
func TestBodiesMatchReflectionRandom(t *testing.T) {
	rng := randfill.Rand(t, *encodeSeed, "encode.seed", 4)
	var bs Bodies
	type decoded struct {
		et      EventType
		shallow reflect.Value
		want    Body
	}
	var all []decoded
	for i := range 3000 {
		et := EventTypes[rng.IntN(len(EventTypes))]
		want, _ := newBody(et)
		if rng.IntN(4) > 0 { // else the empty body
			fillRandom(rng, i, want)
		}
		switch b := want.(type) {
		case *Input:
			b.Kind = et
		case *DispatchReportBody:
			b.Kind = et
		case *ToolCallResultBody:
			if et == ToolCallCompleted {
				b.Error = ""
			} else if b.Error == "" {
				b.Error = "boom"
			}
		}
		data, err := codec.Encode(want)
		if err != nil {
			t.Fatalf("%d %s: %v", i, et, err)
		}
		viaReflection, _ := newBody(et)
		if err := msgpack.Unmarshal(data, viaReflection); err != nil {
			t.Fatalf("%d %s: reflection: %v", i, et, err)
		}
		got, err := bs.DecodeShared(et, SchemaVersion, string(data))
		if err != nil {
			t.Fatalf("%d %s: %v", i, et, err)
		}
		if !reflect.DeepEqual(got, viaReflection) {
			t.Fatalf("%d %s:\nreused     %+v\nreflection %+v", i, et, got, viaReflection)
		}
		shallow := reflect.New(reflect.TypeOf(got).Elem()).Elem()
		shallow.Set(reflect.ValueOf(got).Elem())
		all = append(all, decoded{et, shallow, viaReflection})
	}
	for i, d := range all {
		// The new messages of a step's result are decoded into one
		// reused array (Apply copies them): left out here.
		switch b := d.shallow.Addr().Interface().(type) {
		case *StepCompletedBody:
			b.NewMessages, d.want.(*StepCompletedBody).NewMessages = nil, nil
		case *ToolCallResultBody:
			b.NewMessages, d.want.(*ToolCallResultBody).NewMessages = nil, nil
		}
		if !reflect.DeepEqual(d.shallow.Addr().Interface(), d.want) {
			t.Fatalf("%d %s: changed by a later decode:\nnow  %+v\nwant %+v", i, d.et, d.shallow.Interface(), d.want)
		}
	}
}

// fillRandom fills b with randfill, or with fill for the bodies that hold
// a type randfill has no rule for (floats).
func fillRandom(rng *rand.Rand, n int, b Body) {
	defer func() {
		if recover() != nil {
			v := reflect.ValueOf(b).Elem()
			v.Set(reflect.Zero(v.Type()))
			fill(v, n)
		}
	}()
	randfill.Fill(rng, reflect.ValueOf(b).Elem())
}

// TestDecodedListsEndAtTheirLength decodes bodies whose lists share one
// allocation with the body (newBodyIn), each list shorter, as long as,
// and longer than the array kept for it, and requires every list to end
// at its length: an append to one must take a new array, not write into
// the next list's elements.
func TestDecodedListsEndAtTheirLength(t *testing.T) {
	call := func(i int) ToolCall { return ToolCall{ID: fmt.Sprint("c", i), Name: "echo", Arguments: "{}"} }
	for n := range 4 {
		var calls []ToolCall
		for i := range n {
			calls = append(calls, call(i))
		}
		steps := []PlanStep{{Index: 0, ActionType: ActionRespond, ActionParams: map[string]string{"text": "x"}}}
		for i := range n {
			steps = append(steps, PlanStep{Index: i + 1, ActionType: ActionToolCall, ActionParams: map[string]string{"tool": "echo"}})
		}
		msgs := []Message{{Role: "user", Content: "hi"}}
		for range n {
			msgs = append(msgs, Message{Role: "assistant", ToolCalls: calls})
		}
		bodies := []Body{
			&ReasonDoneBody{Reasoning: Reasoning{Text: "t", ToolCalls: calls}, Plan: Plan{Steps: steps}, NewMessages: msgs},
			&ModelCalledBody{Model: "m", ToolCalls: calls},
			&ToolCallResultBody{Result: "r", NewMessages: msgs},
			&ToolCallResultBody{Error: "e", NewMessages: msgs},
		}
		for _, want := range bodies {
			data, err := Encode(want)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(want.EventType(), SchemaVersion, data)
			if err != nil {
				t.Fatal(err)
			}
			before, err := Encode(got)
			if err != nil {
				t.Fatal(err)
			}
			// Append to every list of the decoded body, then encode it
			// without the appended elements: a list that shared its spare
			// room with another would show here.
			var ls []*[]ToolCall
			var ms []*[]Message
			var ss []*[]PlanStep
			switch b := got.(type) {
			case *ReasonDoneBody:
				ls = append(ls, &b.Reasoning.ToolCalls)
				ms = append(ms, &b.NewMessages)
				ss = append(ss, &b.Plan.Steps)
			case *ModelCalledBody:
				ls = append(ls, &b.ToolCalls)
			case *ToolCallResultBody:
				ms = append(ms, &b.NewMessages)
			}
			for _, m := range ms {
				for i := range *m {
					ls = append(ls, &(*m)[i].ToolCalls)
				}
			}
			for _, l := range ls {
				if len(*l) > 0 && cap(*l) != len(*l) {
					t.Fatalf("%d calls: %s: a list of %d calls has room for %d", n, want.EventType(), len(*l), cap(*l))
				}
				_ = append(*l, call(99))
			}
			for _, m := range ms {
				_ = append(*m, Message{Role: "intruder"})
			}
			for _, s := range ss {
				_ = append(*s, PlanStep{Description: "intruder"})
			}
			after, err := Encode(got)
			if err != nil {
				t.Fatal(err)
			}
			if string(before) != string(after) {
				t.Fatalf("%d calls: %s: an append to one list changed another", n, want.EventType())
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%d calls: %s:\ngot  %+v\nwant %+v", n, want.EventType(), got, want)
			}
		}
	}
}
