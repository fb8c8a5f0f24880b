package replay

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// TestHandoverTakesOnlyWhatTheLogHolds hands a View the bodies of a
// history's task events, some paired with bytes the log does not hold for
// that id, and checks that the fold takes exactly the others and ends in
// the state of a fold that decodes every body.
func TestHandoverTakesOnlyWhatTheLogHolds(t *testing.T) {
	evs := replaytest.Generate(testSeed(t), replaytest.Config{Tasks: 30, Concurrency: 8, Finish: true})
	ref := dump(t, foldMem(t, mustMem(t, evs)))
	l, _ := logWith(t, evs)
	defer l.Close()
	v, err := NewView(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[ulid.ULID]bool{}
	wrong := 0
	var prev *eventlog.Event // the last task event handed over, by type
	for i := range evs {
		ev := &evs[i]
		if projection.KindOf(ev.Stream) != projection.KindTask {
			continue
		}
		fe, err := Decode(*ev)
		if err != nil || fe.Body == nil {
			continue
		}
		switch {
		case i%2 == 0 && prev != nil && prev.Type == ev.Type && string(prev.Body) != string(ev.Body):
			// Another event's body and bytes: the log holds other bytes.
			other, err := Decode(*prev)
			if err != nil {
				t.Fatal(err)
			}
			v.Expect(ev.ID, prev.Body, other.Body)
			wrong++
		default:
			v.Expect(ev.ID, ev.Body, fe.Body)
			want[ev.ID] = decodedForm(fe.Body) // a type it takes
		}
		prev = ev
	}
	maps.DeleteFunc(want, func(_ ulid.ULID, taken bool) bool { return !taken })
	if wrong == 0 || len(want) == 0 {
		t.Fatalf("%d bodies handed over with their bytes, %d with other bytes; want some of each", len(want), wrong)
	}
	taken := map[ulid.ULID]bool{}
	handoverCheck = func(ev eventlog.Event, _ fsm.Body) { taken[ev.ID] = true }
	defer func() { handoverCheck = nil }()
	if _, err := Fold(context.Background(), v, FromLog(l), FoldOptions{}); err != nil {
		t.Fatal(err)
	}
	sameState(t, "fold with bodies handed over", ref, dump(t, v))
	if len(taken) != len(want) {
		t.Errorf("the fold took %d handed-over bodies; want %d", len(taken), len(want))
	}
	for id := range taken {
		if !want[id] {
			t.Errorf("event %s: the fold took a body whose bytes the log does not hold", id)
		}
	}
	if n := v.hand.n.Load(); n != 0 {
		t.Errorf("%d handed-over bodies left after the fold; want 0", n)
	}
}

// TestHandoverForgetsOldBodies: bodies handed over for events never
// folded are dropped after two generations.
func TestHandoverForgetsOldBodies(t *testing.T) {
	var h handover
	b := &fsm.TaskCompletedBody{Result: "r"}
	for i := range 5 * handoverGen {
		var id ulid.ULID
		id[0], id[1], id[2] = byte(i), byte(i>>8), byte(i>>16)
		h.put(id, nil, b)
	}
	if n := h.n.Load(); n > 2*handoverGen || n != int64(len(h.cur)+len(h.old)) {
		t.Fatalf("%d bodies held (%d + %d); want at most %d", n, len(h.cur), len(h.old), 2*handoverGen)
	}
}

// TestHandoverForgetsUnfoldedBodies: a body whose event is never folded
// goes after two generations of task events folded.
func TestHandoverForgetsUnfoldedBodies(t *testing.T) {
	var h handover
	h.put(ulid.ULID{1}, nil, &fsm.TaskCompletedBody{Result: "never appended"})
	ev := eventlog.Event{Stream: ulid.ULID{2}.String(), Type: string(fsm.TaskCompleted)}
	for range 2 * handoverGen {
		if h.take(&ev) != nil {
			t.Fatal("took a body handed over for another event")
		}
	}
	if n := h.n.Load(); n != 0 || len(h.cur)+len(h.old) != 0 {
		t.Fatalf("%d bodies held after two generations of events folded; want 0", n)
	}
}

// TestDecodedFormCoversEveryList lists every field of the bodies the fold
// takes when handed over that may hold something decoding does not give
// back as it was (a list or a map, which an empty one decodes to nil; a
// pointer, an interface, a time, a float): it fails when one of these
// types gains such a field, which decodedForm must then check.
func TestDecodedFormCoversEveryList(t *testing.T) {
	checked := map[string][]string{ // the lists decodedForm checks, by type
		"ModelCalledBody":    {"ToolCalls"},
		"ReasonDoneBody":     {"Reasoning.ToolCalls", "Plan.Steps", "Plan.Steps[].ActionParams", "NewMessages", "NewMessages[].ToolCalls"},
		"StepCompletedBody":  {"NewMessages", "NewMessages[].ToolCalls"},
		"ToolCallResultBody": {"NewMessages", "NewMessages[].ToolCalls", "Parts"},
		"TaskCompletedBody":  nil,
	}
	var walk func(path string, ty reflect.Type, out *[]string)
	walk = func(path string, ty reflect.Type, out *[]string) {
		switch ty.Kind() {
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int64:
		case reflect.Slice:
			*out = append(*out, path)
			if e := ty.Elem(); e.Kind() == reflect.Struct {
				walk(path+"[]", e, out)
			} else if e.Kind() != reflect.String {
				*out = append(*out, path+"[] of "+e.String())
			}
		case reflect.Map:
			*out = append(*out, path)
			if ty.Key().Kind() != reflect.String || ty.Elem().Kind() != reflect.String {
				*out = append(*out, path+" of "+ty.String())
			}
		case reflect.Struct:
			for i := range ty.NumField() {
				f := ty.Field(i)
				p := f.Name
				if path != "" {
					p = path + "." + f.Name
				}
				walk(p, f.Type, out)
			}
		default:
			*out = append(*out, path+" of kind "+ty.Kind().String())
		}
	}
	bodies := []fsm.Body{&fsm.ModelCalledBody{}, &fsm.ReasonDoneBody{}, &fsm.StepCompletedBody{},
		&fsm.ToolCallResultBody{}, &fsm.TaskCompletedBody{}}
	for _, b := range bodies {
		ty := reflect.TypeOf(b).Elem()
		var got []string
		walk("", ty, &got)
		want := checked[ty.Name()]
		if !slices.Equal(got, want) {
			t.Errorf("%s: fields decoding may not give back as they were: %q; decodedForm checks %q", ty.Name(), got, want)
		}
		if !decodedForm(b) {
			t.Errorf("%s: the zero body is not in decoded form", ty.Name())
		}
	}
	if len(bodies) != len(checked) {
		t.Fatalf("%d types checked, %d listed", len(bodies), len(checked))
	}
	// And what an empty list that is not nil does to each.
	empty := []fsm.Body{
		&fsm.ModelCalledBody{ToolCalls: []fsm.ToolCall{}},
		&fsm.ReasonDoneBody{Reasoning: fsm.Reasoning{ToolCalls: []fsm.ToolCall{}}},
		&fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{}}},
		&fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{ActionParams: map[string]string{}}}}},
		&fsm.ReasonDoneBody{NewMessages: []fsm.Message{}},
		&fsm.StepCompletedBody{NewMessages: []fsm.Message{{ToolCalls: []fsm.ToolCall{}}}},
		&fsm.ToolCallResultBody{Parts: []fsm.ToolPart{}},
		&fsm.TaskCreatedBody{},
	}
	for _, b := range empty {
		if decodedForm(b) {
			t.Errorf("%T %+v: taken as in decoded form", b, b)
		}
	}
}
