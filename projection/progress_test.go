package projection

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestProgressStoredWithoutTheInput: the persisted progress leaves out a
// description that is its task's input text, and gets it back from the
// task; a description that is not the input is kept as it is.
func TestProgressStoredWithoutTheInput(t *testing.T) {
	input := strings.Repeat("a large input ", 10_000)
	task := fsm.Task{ID: "01JD0000000000000000000000"}
	task.Context.InputText = input
	at := time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)
	cases := []struct {
		name, desc string
		marker     byte
	}{
		{"the input", input, storedDescInput},
		{"changed by TASK_CREATED", "the first message's text", storedDescOwn},
		{"empty, the input not", "", storedDescOwn},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := Progress{TaskID: task.ID, State: fsm.StateReasoning, Description: c.desc,
				CompletedSteps: []string{"search"}, UpdatedAt: at}
			stored, err := p.EncodeStored(&task)
			if err != nil {
				t.Fatal(err)
			}
			if stored[0] != c.marker {
				t.Fatalf("marker %q, want %q", stored[0], c.marker)
			}
			if c.marker == storedDescInput && len(stored) > 200 {
				t.Fatalf("stored progress is %d bytes: it holds the input again", len(stored))
			}
			got, err := DecodeStored(stored, &task)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, p) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, p)
			}
			full, _ := p.Encode()
			again, _ := got.Encode()
			if !bytes.Equal(full, again) {
				t.Fatal("the restored progress does not encode as the original")
			}
		})
	}
	for _, bad := range [][]byte{nil, {'x', 0x80}, append([]byte{storedDescInput}, mustEncode(t, Progress{Description: "x"})...)} {
		if _, err := DecodeStored(bad, &task); !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodeStored(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func mustEncode(t *testing.T, p Progress) []byte {
	t.Helper()
	b, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProgressIsMultiStep: is_multi_step is the old proposal's isMultiStep,
// its isTaskActive(): true from the task's start to its end, whether it is
// reasoning (no plan yet), acting or waiting for the user, false once it
// has ended.
func TestProgressIsMultiStep(t *testing.T) {
	s := NewSet(Options{})
	sc := newScript()
	id := mustApply(t, s, sc.ev("", created("cli"))).After.ID
	check := func(want bool) {
		t.Helper()
		p, _ := s.Progress(id)
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		if got, ok := m["is_multi_step"].(bool); !ok || got != want || p.IsMultiStep() != want {
			t.Fatalf("%s: is_multi_step = %v (%v), IsMultiStep() = %v, want %v", p.State, m["is_multi_step"], ok, p.IsMultiStep(), want)
		}
	}
	check(true) // reasoning
	mustApply(t, s, sc.ev(id, toolPlan()))
	check(true) // acting
	mustApply(t, s, sc.ev(id, &fsm.TaskSuspendedBody{Reason: "operator"}))
	check(true) // suspended: waiting for the user, not ended
	mustApply(t, s, sc.ev(id, &fsm.TaskResumedBody{}))
	mustApply(t, s, sc.ev(id, &fsm.TaskFailedBody{Reason: "cancelled"}))
	check(false)
}

// TestProgressCopiesKeepTheirLists: a Progress taken from the Set (what a
// checkpoint or a reader holds) keeps its step and tool lists as they were
// while the fold goes on appending to the Set's own.
func TestProgressCopiesKeepTheirLists(t *testing.T) {
	s := NewSet(Options{})
	sc := newScript()
	id := mustApply(t, s, sc.ev("", created("cli"))).After.ID
	plan := &fsm.ReasonDoneBody{Plan: fsm.Plan{Goal: "g"}}
	for i := 0; i < 6; i++ {
		plan.Plan.Steps = append(plan.Plan.Steps, fsm.PlanStep{Index: i, Description: "step " + string(rune('a'+i)),
			ActionType: fsm.ActionToolCall, ActionParams: map[string]string{"tool": "tool_" + string(rune('a'+i))}})
	}
	mustApply(t, s, sc.ev(id, plan))
	type taken struct {
		p                 Progress
		done, tools, next string
	}
	var copies []taken
	take := func() {
		p, _ := s.Progress(id)
		copies = append(copies, taken{p, strings.Join(p.CompletedSteps, "|"), strings.Join(p.ToolsUsed, "|"), strings.Join(p.NextSteps, "|")})
	}
	for i := 0; i < 6; i++ {
		take()
		mustApply(t, s, sc.ev(id, &fsm.ToolCallStartedBody{StepIndex: i, Tool: "tool_" + string(rune('a'+i)), IdempotencyKey: "k"}))
		mustApply(t, s, sc.ev(id, &fsm.ToolCallResultBody{StepIndex: i, Tool: "tool_" + string(rune('a'+i)), Result: "r"}))
	}
	take()
	for i, c := range copies {
		if got := strings.Join(c.p.CompletedSteps, "|"); got != c.done || len(c.p.CompletedSteps) != i {
			t.Fatalf("copy %d: completed steps %q, were %q", i, got, c.done)
		}
		if got := strings.Join(c.p.ToolsUsed, "|"); got != c.tools {
			t.Fatalf("copy %d: tools %q, were %q", i, got, c.tools)
		}
		if got := strings.Join(c.p.NextSteps, "|"); got != c.next {
			t.Fatalf("copy %d: next steps %q, were %q", i, got, c.next)
		}
		var want []string
		for j := i; j < 6 && i < 6; j++ {
			want = append(want, "step "+string(rune('a'+j)))
		}
		if c.next != strings.Join(want, "|") {
			t.Fatalf("copy %d: next steps %q, want %q", i, c.next, strings.Join(want, "|"))
		}
	}
	if last := copies[len(copies)-1].p; last.StepCount != 6 || len(last.ToolsUsed) != 6 {
		t.Fatalf("final progress: %+v", last)
	}
}
