package projection

import (
	"reflect"
	"testing"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestApplyToMatchesApply folds one sequence twice: with Apply, a fresh
// Change per event, and with ApplyTo into one Change reused for every
// event, as the fold does. Each step must say the same: nothing of the
// previous event (a task before and after, a refusal, a warning) may stay
// in the reused Change.
func TestApplyToMatchesApply(t *testing.T) {
	sc := newScript()
	evs := []fsm.Event{sc.ev("", created("cli"))}
	a := evs[0].Stream
	refuse := func(ev fsm.Event) fsm.Event {
		sc.tasks[ev.Stream]-- // a refused event does not move the stream's version
		return ev
	}
	evs = append(evs,
		sc.ev(a, toolPlan()),
		// A task before this one, no task in it.
		sc.ev(MemoryStream, &MemoryWrittenBody{Path: "user.md", Content: "likes tea"}),
		refuse(sc.ev(a, &fsm.TaskCompletedBody{Result: "too early"})),
		// A warning, then a task event.
		sc.ev(MemoryStream, &MemoryPatchedBody{Path: "user.md", Old: "tea", New: "coffee", Content: "likes juice"}),
		sc.ev(a, &fsm.ToolCallStartedBody{StepIndex: 0, Tool: "web_search", ToolCallID: "c1"}),
		sc.ev(SystemStream, &fsm.TaskNotifyBody{Message: "system"}),
		sc.ev("", created("api")),
		sc.ev(InputsStream, &fsm.Input{Kind: fsm.MessageReceived, Text: "hi"}),
		sc.ev(MemoryStream, &MemoryWrittenBody{Content: "no path"}), // refused, not a task
		sc.ev(a, &fsm.ToolCallResultBody{StepIndex: 0, Tool: "web_search", ToolCallID: "c1", Result: "3 papers"}),
	)
	fresh, reused := NewSet(Options{SnapshotEvery: 2}), NewSet(Options{SnapshotEvery: 2})
	var ch Change
	refused, warned := 0, 0
	for i, ev := range evs {
		want := fresh.Apply(ev)
		reused.ApplyTo(&ch, ev)
		if !reflect.DeepEqual(ch, want) {
			t.Fatalf("event %d (%s on %s): ApplyTo\n%+v\nApply\n%+v", i, ev.Type, ev.Stream, ch, want)
		}
		if want.Err != nil {
			refused++
		}
		if want.Warn != nil {
			warned++
		}
	}
	if refused != 2 || warned != 1 {
		t.Fatalf("the sequence lost its point: %d refused (want 2), %d warned (want 1)", refused, warned)
	}
	if !reflect.DeepEqual(fresh.Stats().Report(), reused.Stats().Report()) {
		t.Fatalf("stats differ:\n%+v\n%+v", fresh.Stats().Report(), reused.Stats().Report())
	}
}
