package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// foldLines folds script lines (see parseEvent) from the zero task.
func foldLines(t testing.TB, s *stepper, task Task, lines ...string) (Task, []Event) {
	t.Helper()
	var evs []Event
	for _, l := range lines {
		ev, err := parseEvent(s, task, l)
		if err != nil {
			t.Fatal(err)
		}
		if task, err = Apply(task, ev); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		evs = append(evs, ev)
	}
	return task, evs
}

var fullLife = []string{
	"TASK_CREATED meta=a:1",
	"MODEL_CALLED",
	"REASON_DONE plan=tool_call:search,tool_call:fetch",
	"TOOL_CALL_STARTED",
	"TOOL_CALL_COMPLETED",
	"TOOL_CALL_STARTED",
	"TOOL_CALL_FAILED",
	"MODEL_CALLED",
	"REASON_DONE plan=respond",
	"STEP_COMPLETED",
	"TASK_COMPLETED",
	"REFLECTION_COMPLETE episode=e facts=2",
}

// TestApplyLeavesInputUntouched: Apply never writes memory its input task
// can see (the plan's step marks included), nor the event bodies it reads.
func TestApplyLeavesInputUntouched(t *testing.T) {
	var s stepper
	task, evs := foldLines(t, &s, Task{}, fullLife[:3]...)
	before := mustEncode(t, task)
	body, _ := Encode(evs[2].Body)
	next, _ := foldLines(t, &s, task, "TOOL_CALL_COMPLETED", "TOOL_CALL_COMPLETED")
	if next.State != StateReasoning {
		t.Fatalf("state %s", next.State)
	}
	if !bytes.Equal(before, mustEncode(t, task)) {
		t.Fatal("Apply changed its input task")
	}
	if after, _ := Encode(evs[2].Body); !bytes.Equal(body, after) {
		t.Fatal("Apply changed a REASON_DONE body")
	}
}

// TestCloneIsDeep: changing every reachable value of a clone leaves the
// original's encoding as it was.
func TestCloneIsDeep(t *testing.T) {
	var s stepper
	task, _ := foldLines(t, &s, Task{}, fullLife...)
	task.Context.Reflections = []Reflection{{Verdict: "v"}}
	task.Context.InputMetadata = map[string]string{"k": "v"}
	task.Context.PendingCall = &ToolCallStartedBody{Tool: "t"}
	task.Context.Reasoning.ToolCalls = []ToolCall{{Name: "n"}}
	task.Context.Plan.Steps = append(task.Context.Plan.Steps, PlanStep{ActionParams: map[string]string{"tool": "x"}})
	before := mustEncode(t, task)
	c := task.Clone()
	if !reflect.DeepEqual(c, task) {
		t.Fatal("clone differs")
	}
	scribble(reflect.ValueOf(&c).Elem())
	if bytes.Equal(before, mustEncode(t, c)) {
		t.Fatal("scribble changed nothing")
	}
	if !bytes.Equal(before, mustEncode(t, task)) {
		t.Fatal("changing the clone changed the original: they share memory")
	}
}

// TestCloneKeepsEmptiness: a clone keeps nil and empty slices apart, as
// the original has them, and appending to one message's tool calls in a
// clone leaves the next message's alone (they share one array).
func TestCloneKeepsEmptiness(t *testing.T) {
	calls := []ToolCall{{ID: "1"}, {ID: "2"}}
	for _, rc := range [][]ToolCall{nil, {}, calls[:1], calls, append(calls, calls...)} {
		task := Task{Context: Context{
			Reasoning: &Reasoning{Text: "r", ToolCalls: rc},
			Plan:      &Plan{Goal: "g"},
			Messages:  []Message{{Content: "a", ToolCalls: rc}, {Content: "b", ToolCalls: []ToolCall{}}, {Content: "c"}, {Content: "d", ToolCalls: calls}},
		}}
		c := task.Clone()
		if !reflect.DeepEqual(c, task) {
			t.Fatalf("tool calls %v: clone differs:\n got %#v\nwant %#v", rc, c, task)
		}
		c.Context.Messages[0].ToolCalls = append(c.Context.Messages[0].ToolCalls, ToolCall{ID: "new"})
		if !reflect.DeepEqual(c.Context.Messages[3].ToolCalls, calls) {
			t.Fatalf("tool calls %v: appending to a message's calls changed the next one's: %v", rc, c.Context.Messages[3].ToolCalls)
		}
	}
}

// scribble overwrites every settable string, bool and number reachable
// from v, through pointers, slices and maps.
func scribble(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			scribble(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				scribble(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			scribble(v.Index(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			scribble(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			v.SetMapIndex(k, reflect.ValueOf("scribbled").Convert(v.Type().Elem()))
		}
	case reflect.String:
		v.SetString("scribbled")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 7)
	case reflect.Uint8, reflect.Uint64:
		v.SetUint(v.Uint() + 7)
	}
}

// TestForkWithClone: Apply has append semantics, so two branches from one
// task share spare capacity unless one is cloned first.
func TestForkWithClone(t *testing.T) {
	var s stepper
	base, _ := foldLines(t, &s, Task{}, "TASK_CREATED", "REASON_DONE plan=respond,respond")
	base.Context.ActionsDone = make([]ActionResult, 0, 4) // spare capacity, as a long fold has
	branches := func(second Task) (string, string) {
		s1, s2 := s, s
		a, _ := foldLines(t, &s1, base, "STEP_COMPLETED result=A")
		b, _ := foldLines(t, &s2, second, "STEP_COMPLETED result=B")
		return a.Context.ActionsDone[0].Result, b.Context.ActionsDone[0].Result
	}
	if a, b := branches(base.Clone()); a != "A" || b != "B" {
		t.Fatalf("cloned branches interfere: %q %q", a, b)
	}
	if a, b := branches(base.Fork()); a != "A" || b != "B" {
		t.Fatalf("forked branches interfere: %q %q", a, b)
	}
	if a, _ := branches(base); a != "B" {
		t.Fatalf("without a clone the branches should share memory (documented); got %q", a)
	}
}

func TestErrors(t *testing.T) {
	te := error(&TransitionError{From: StateCompleted, Event: ToolCallCompleted})
	if te.Error() != "fsm: invalid transition: completed -(TOOL_CALL_COMPLETED)->" {
		t.Errorf("message %q", te.Error())
	}
	if !errors.Is(te, ErrInvalidTransition) || errors.Is(te, ErrInvalidEvent) {
		t.Error("TransitionError unwraps wrongly")
	}
	ee := error(&EventError{State: StateActing, Event: StepCompleted, Reason: "step 2 is not the current step 1"})
	if ee.Error() != "fsm: invalid event: STEP_COMPLETED in acting: step 2 is not the current step 1" {
		t.Errorf("message %q", ee.Error())
	}
	if !errors.Is(ee, ErrInvalidEvent) || errors.Is(ee, ErrInvalidTransition) || errors.Is(ee, ErrUnknownMachine) {
		t.Error("EventError unwraps wrongly")
	}
	var s stepper
	_, err := Apply(Task{}, s.envelope(Task{}, TaskCreated, &TaskCreatedBody{Machine: MachineRef{Name: "legacy.task", Version: 1}}))
	if !errors.Is(err, ErrInvalidEvent) || !errors.Is(err, ErrUnknownMachine) {
		t.Errorf("unknown machine in TASK_CREATED: %v", err)
	}
}

func TestMachines(t *testing.T) {
	m, err := MachineFor(CurrentMachine)
	if err != nil || m.Ref() != (MachineRef{Name: "pegasus.task", Version: 1}) {
		t.Fatalf("MachineFor(current) = %v, %v", m, err)
	}
	if _, err := MachineFor(MachineRef{}); !errors.Is(err, ErrUnknownMachine) {
		t.Errorf("empty ref resolved: %v", err)
	}
	var s stepper
	task, _ := foldLines(t, &s, Task{}, "TASK_CREATED")
	if task.Machine != CurrentMachine {
		t.Errorf("empty ref in TASK_CREATED recorded as %+v", task.Machine)
	}
	if !task.CanTransition(ReasonDone) || task.CanTransition(StepCompleted) {
		t.Error("Task.CanTransition wrong")
	}
	// A task recorded under a machine this build lacks is refused, unchanged.
	alien := task
	alien.Machine = MachineRef{Name: "broker.lifecycle", Version: 3}
	ev, _ := parseEvent(&s, alien, "MODEL_CALLED")
	got, err := Apply(alien, ev)
	if !errors.Is(err, ErrUnknownMachine) || !reflect.DeepEqual(got, alien) {
		t.Errorf("alien machine: %v", err)
	}
	if alien.CanTransition(ModelCalled) {
		t.Error("CanTransition true under an unknown machine")
	}
	// Legal returns a copy.
	l := m.Legal(StateIdle)
	l[0] = "MUTATED"
	if m.Legal(StateIdle)[0] != TaskCreated {
		t.Error("Legal exposes the machine's table")
	}
}

// TestTaskCreatedEnvelope: the task's identity and times come from the
// event, never from a clock.
func TestTaskCreatedEnvelope(t *testing.T) {
	var s stepper
	task, evs := foldLines(t, &s, Task{}, "TASK_CREATED type=plan priority=3 text=hi source=cli meta=x:y")
	ev := evs[0]
	want := Task{
		ID: ev.ID.String(), Machine: CurrentMachine, Type: "plan", State: StateReasoning,
		CreatedAt: ev.Time, UpdatedAt: ev.Time, Priority: 3, Metadata: map[string]string{"x": "y"},
		Version: 1, Seq: ev.Seq, LastEvent: ev.ID,
		Context: Context{InputText: "hi", Source: "cli", Iteration: 1},
		History: []Transition{{From: StateIdle, To: StateReasoning, Event: TaskCreated, EventID: ev.ID, Timestamp: ev.Time}},
	}
	if !reflect.DeepEqual(task, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", task, want)
	}
}

func TestPlanHelpers(t *testing.T) {
	var nilPlan *Plan
	if nilPlan.CurrentStep() != nil || nilPlan.HasMoreSteps() || nilPlan.HasToolCall() {
		t.Error("nil plan")
	}
	p := &Plan{Steps: []PlanStep{{Index: 0, Completed: true}, {Index: 1, ActionType: ActionGenerate}, {Index: 2, ActionType: ActionToolCall, ActionParams: map[string]string{"tool": "x"}}}}
	if cs := p.CurrentStep(); cs == nil || cs.Index != 1 || !p.HasMoreSteps() || !p.HasToolCall() || p.Steps[2].Tool() != "x" {
		t.Errorf("current step %+v", cs)
	}
	for i := range p.Steps {
		p.Steps[i].Completed = true
	}
	if p.CurrentStep() != nil || p.HasMoreSteps() {
		t.Error("all done")
	}
}

// TestDescribeStable: Describe shows every section of a full task, and the
// same task always renders the same text.
func TestDescribeStable(t *testing.T) {
	var s stepper
	task, _ := foldLines(t, &s, Task{}, fullLife...)
	d := Describe(task)
	for _, want := range []string{"state=completed", "iteration=2", "metadata: a=\"1\"", "[x] 0 respond", "actions:", "tool_call fetch failed", "messages:", "result:", "reflection:", "episode=\"e\"", "history:", "acting -(TOOL_CALL_FAILED)-> reasoning"} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe lacks %q:\n%s", want, d)
		}
	}
	for range 10 {
		if Describe(task.Clone()) != d {
			t.Fatal("Describe is not stable")
		}
	}
}

// TestMachineRefString: the machines of this build and any other print
// as NAME@VERSION.
func TestMachineRefString(t *testing.T) {
	for _, m := range Machines() {
		ref := m.Ref()
		if got, want := ref.String(), ref.Name+"@"+strconv.Itoa(ref.Version); got != want {
			t.Errorf("%+v: %q, want %q", ref, got, want)
		}
	}
	for _, ref := range []MachineRef{{Name: MachineName, Version: 7}, {Name: "x", Version: 1}, {}} {
		if got, want := ref.String(), ref.Name+"@"+strconv.Itoa(ref.Version); got != want {
			t.Errorf("%+v: %q, want %q", ref, got, want)
		}
	}
}
