package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/internal/codec"
)

// sampleBodies returns a populated body of every event type.
func sampleBodies(t testing.TB) map[EventType]Body {
	acting := Task{Context: Context{Plan: &Plan{Steps: []PlanStep{{Index: 0, ActionType: ActionToolCall, ActionParams: map[string]string{"tool": "search"}}}}}}
	out := map[EventType]Body{}
	for _, et := range EventTypes {
		a := &args{et: et, kv: map[string]string{"meta": "b:2,a:1,c:3", "episode": "ep", "facts": "2", "machine": "pegasus.task/1"}, used: map[string]bool{}}
		if et == ToolCallFailed {
			a.kv["error"] = "boom"
		}
		b, err := scriptBody(acting, a)
		if err != nil || b == nil {
			t.Fatalf("%s: %v", et, err)
		}
		out[et] = b
	}
	return out
}

func TestCodecRoundTrip(t *testing.T) {
	for et, b := range sampleBodies(t) {
		data, err := Encode(b)
		if err != nil {
			t.Fatalf("%s: %v", et, err)
		}
		got, err := Decode(et, SchemaVersion, data)
		if err != nil {
			t.Fatalf("%s: %v", et, err)
		}
		if !reflect.DeepEqual(got, b) {
			t.Errorf("%s: round trip\n got %#v\nwant %#v", et, got, b)
		}
		if got.EventType() != et {
			t.Errorf("%s: decoded body says %s", et, got.EventType())
		}
		again, _ := Encode(got)
		if !bytes.Equal(again, data) {
			t.Errorf("%s: re-encoding differs", et)
		}
	}
}

// TestEncodeCanonical: equal bodies give equal bytes whatever the map
// insertion order, and nil and empty collections encode alike.
func TestEncodeCanonical(t *testing.T) {
	m1, m2 := map[string]string{}, map[string]string{}
	for i := range 50 {
		m1[fmt.Sprintf("k%02d", i)] = "v"
		m2[fmt.Sprintf("k%02d", 49-i)] = "v"
	}
	a, _ := Encode(&TaskCreatedBody{Metadata: m1, InputMetadata: map[string]string{}})
	b, _ := Encode(&TaskCreatedBody{Metadata: m2})
	if !bytes.Equal(a, b) {
		t.Fatal("equal bodies encode differently")
	}
	for range 20 { // Go randomizes map iteration; any order dependence shows
		c, _ := Encode(&TaskCreatedBody{Metadata: m1})
		if !bytes.Equal(a, c) {
			t.Fatal("encoding depends on map iteration order")
		}
	}
	x, _ := EncodeTask(Task{History: []Transition{}, Context: Context{Messages: []Message{}, ActionsDone: []ActionResult{}}})
	y, _ := EncodeTask(Task{})
	if !bytes.Equal(x, y) {
		t.Fatal("empty and nil slices encode differently")
	}
}

func TestDecodeRefusals(t *testing.T) {
	good, _ := Encode(&TaskSuspendedBody{Reason: "r"})
	failed, _ := Encode(&ToolCallResultBody{StepIndex: 1, Error: "x"})
	webhook, _ := Encode(&Input{Kind: WebhookTriggered, Text: "t"})
	cases := []struct {
		name   string
		et     EventType
		schema uint16
		data   []byte
		want   error
	}{
		{"unknown type", "NOPE", 1, good, ErrUnknownEvent},
		{"schema 0", TaskSuspended, 0, good, ErrSchema},
		{"schema 2", TaskSuspended, 2, good, ErrSchema},
		{"trailing bytes", TaskSuspended, 1, append(append([]byte{}, good...), 0xc0), ErrMalformed},
		{"empty", TaskSuspended, 1, nil, ErrMalformed},
		{"not a map", TaskSuspended, 1, []byte{0x01}, ErrMalformed},
		{"truncated", TaskSuspended, 1, good[:len(good)-1], ErrMalformed},
		{"wrong field type", TaskSuspended, 1, []byte{0x81, 0xa6, 'r', 'e', 'a', 's', 'o', 'n', 0x01}, ErrMalformed},
		{"failure under COMPLETED", ToolCallCompleted, 1, failed, ErrMalformed},
		{"input of another kind", MessageReceived, 1, webhook, ErrMalformed},
	}
	for _, c := range cases {
		_, err := Decode(c.et, c.schema, c.data)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := Encode(nil); err == nil {
		t.Error("Encode(nil) succeeded")
	}
	if _, err := Encode((*Input)(nil)); err == nil {
		t.Error("Encode of a nil *Input succeeded")
	}
}

func TestDecodeInputKinds(t *testing.T) {
	data, _ := Encode(&Input{Text: "hi"}) // no kind in the body
	for _, et := range []EventType{MessageReceived, WebhookTriggered, ScheduleFired} {
		b, err := Decode(et, SchemaVersion, data)
		if err != nil {
			t.Fatal(err)
		}
		in, ok := b.(*Input)
		if !ok || in.Kind != et || in.EventType() != et || in.Text != "hi" {
			t.Errorf("%s: got %#v", et, b)
		}
	}
}

// TestEncodeTaskTimesUTC: a fold of events stamped in another zone encodes
// like one stamped in UTC, and decodes back to UTC.
func TestEncodeTaskTimesUTC(t *testing.T) {
	zone := time.FixedZone("UTC+5", 5*3600)
	build := func(loc *time.Location) Task {
		var s stepper
		var task Task
		for _, line := range []string{"TASK_CREATED", "REASON_DONE plan=respond", "STEP_COMPLETED"} {
			ev, err := parseEvent(&s, task, line)
			if err != nil {
				t.Fatal(err)
			}
			ev.Time = ev.Time.In(loc)
			if task, err = Apply(task, ev); err != nil {
				t.Fatal(err)
			}
		}
		return task
	}
	a, b := mustEncode(t, build(zone)), mustEncode(t, build(time.UTC))
	if !bytes.Equal(a, b) {
		t.Fatal("encoding depends on the events' time zone")
	}
	got, err := DecodeTask(a)
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.Location() != time.UTC || got.History[0].Timestamp.Location() != time.UTC {
		t.Fatalf("decoded times not in UTC: %v", got.CreatedAt)
	}
	if !reflect.DeepEqual(got, build(time.UTC)) {
		t.Fatalf("decoded task differs:\n%s\n%s", Describe(got), Describe(build(time.UTC)))
	}
	if _, err := DecodeTask([]byte{0xc1}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("DecodeTask of garbage: %v", err)
	}
}

// FuzzDecode feeds hostile bytes to Decode and DecodeTask and applies what
// decodes to tasks in every state: nothing may panic; what decodes
// re-encodes stably; Apply refuses with a *TransitionError exactly when
// CanTransition is false.
func FuzzDecode(f *testing.F) {
	for i, et := range EventTypes {
		data, err := Encode(sampleBodies(f)[et])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), data)
	}
	f.Add(uint8(0), []byte{0x81, 0xa4, 'k', 'i', 'n', 'd', 0xc0})
	f.Add(uint8(4), []byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(0), []byte{0xdd, 0x7f, 0xff, 0xff, 0xff})
	f.Add(uint8(4), []byte{0x81, 0xac, 'n', 'e', 'w', '_', 'm', 'e', 's', 's', 'a', 'g', 'e', 's', 0x91, 0x81, 0xa4, 'r', 'o', 'l', 'e', 0xa4, 'u', 's', 'e', 'r'})
	var s stepper
	var tasks []Task
	for _, m := range Machines() {
		for _, v := range variants(m) {
			if v.shape.done == 0 && len(v.shape.kinds) == 2 {
				tasks = append(tasks, v.build())
			}
		}
	}
	f.Fuzz(func(t *testing.T, idx uint8, data []byte) {
		et := EventTypes[int(idx)%len(EventTypes)]
		if tk, err := DecodeTask(data); err == nil {
			enc := mustEncode(t, tk)
			again, err := DecodeTask(enc)
			if err != nil || !bytes.Equal(enc, mustEncode(t, again)) {
				t.Fatalf("task re-encoding unstable: %v", err)
			}
			_ = Describe(tk)
		}
		b, err := Decode(et, SchemaVersion, data)
		if err != nil {
			if b != nil {
				t.Fatal("Decode returned a body with an error")
			}
			return
		}
		enc, err := Encode(b)
		if err != nil {
			t.Fatalf("decoded body does not encode: %v", err)
		}
		b2, err := Decode(et, SchemaVersion, enc)
		if err != nil {
			t.Fatalf("re-decoding: %v", err)
		}
		if enc2, _ := Encode(b2); !bytes.Equal(enc, enc2) {
			t.Fatal("body re-encoding unstable")
		}
		for _, tk := range tasks {
			ev := s.envelope(tk, et, b)
			_, err := Apply(tk, ev)
			var te *TransitionError
			if errors.As(err, &te) == tk.CanTransition(et) {
				t.Fatalf("%s in %s: CanTransition disagrees with %v", et, tk.State, err)
			}
			_ = DescribeEvent(ev)
		}
	})
}

// TestDescribeEventEveryType keeps DescribeEvent one line for every body.
func TestDescribeEventEveryType(t *testing.T) {
	for et, b := range sampleBodies(t) {
		line := DescribeEvent(Event{Type: et, Body: b})
		if strings.Contains(line, "\n") || !strings.HasPrefix(line, string(et)) || strings.Contains(line, "(*fsm.") {
			t.Errorf("%s: %q", et, line)
		}
	}
	long := strings.Repeat("é", 500) + "\nsecond line"
	line := DescribeEvent(Event{Type: TaskNotify, Body: &TaskNotifyBody{Message: long}})
	if strings.Contains(line, "\n") || len([]rune(line)) > 120 {
		t.Errorf("long text not cut: %d runes", len([]rune(line)))
	}
	if got := DescribeEvent(Event{Type: ReasonDone}); got != "REASON_DONE (no body)" {
		t.Errorf("no body: %q", got)
	}
}

// TestDecodeHostileLengths: declared lengths larger than the data, and deep
// nesting, are refused before the decoder allocates or recurses.
func TestDecodeHostileLengths(t *testing.T) {
	key := func(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }
	body := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	deep := body([]byte{0x81}, key("zzz"), bytes.Repeat([]byte{0x91}, 100000), []byte{0xc0})
	cases := map[string][]byte{
		"array32 of 2^32-1 messages": body([]byte{0x81}, key("new_messages"), []byte{0xdd, 0xff, 0xff, 0xff, 0xff}),
		"map32 of 2^32-1 entries":    body([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}),
		"str32 of 4 GiB":             body([]byte{0x81}, key("reason"), []byte{0xdb, 0xff, 0xff, 0xff, 0xff}),
		"ext32 of 4 GiB":             body([]byte{0x81}, key("reason"), []byte{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}),
		"nesting 100000 deep":        deep,
		"never-used code 0xc1":       {0xc1},
	}
	for name, data := range cases {
		for _, et := range []EventType{ReasonDone, TaskSuspended} {
			if _, err := Decode(et, SchemaVersion, data); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s as %s: got %v", name, et, err)
			}
		}
		if _, err := DecodeTask(data); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s as task: got %v", name, err)
		}
	}
	// Nesting up to the bound still decodes (unknown fields are skipped).
	ok := body([]byte{0x81}, key("zzz"), bytes.Repeat([]byte{0x91}, codec.MaxDepth-1), []byte{0xc0})
	if _, err := Decode(TaskSuspended, SchemaVersion, ok); err != nil {
		t.Errorf("nesting %d: %v", codec.MaxDepth, err)
	}
}

// TestKnownBody requires Encode's check of a body's type to agree with
// the list of event types that have a body: the bodies it knows by their
// Go type alone are of types in the list, and an input of any other kind
// is refused.
func TestKnownBody(t *testing.T) {
	for _, et := range EventTypes {
		b, ok := newBody(et)
		if !ok {
			t.Fatalf("%s: no body", et)
		}
		if in, ok := b.(*Input); ok {
			in.Kind = et
		}
		if r, ok := b.(*ToolCallResultBody); ok && et == ToolCallFailed {
			r.Error = "e"
		}
		if !knownBody(b) {
			t.Errorf("%s: %T not known", et, b)
		}
		if _, ok := bodyTypes[b.EventType()]; !ok {
			t.Errorf("%s: %T says %s, not in EventTypes", et, b, b.EventType())
		}
	}
	if _, err := Encode(&Input{Kind: "NO_SUCH_EVENT", Text: "x"}); !errors.Is(err, ErrUnknownEvent) {
		t.Fatalf("an input of an unknown kind: %v, want ErrUnknownEvent", err)
	}
}
