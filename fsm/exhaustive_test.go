package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// referenceTable is the machine written down a second time, by hand and
// independently of legalV1 and Apply, from the spec's tables. Cells:
//
//	(dash)       refused: *TransitionError
//	<state>      the event moves the task to that state
//	tool, step   step event for a tool_call step (tool) or a respond or
//	             generate step (step): completion routing, else *EventError
//	saved        back to Context.SuspendedState
//	fact         accepted, state and History unchanged
//	fact-tool    a fact for the current tool_call step, else *EventError
//	once-result  a fact while no final result is recorded, else *EventError
//	once-refl    a fact while no reflection is recorded, else *EventError
//	new-idle     the input creates the task in idle, with no History entry
//
// Column "none" is the zero Task (StateNone): no event applied yet.
const referenceTable = `
event                none       idle       reasoning  acting     suspended  completed    failed
PERCEIVE_DONE        -          -          -          -          -          -            -
THINK_DONE           -          -          -          -          -          -            -
PLAN_DONE            -          -          -          -          -          -            -
ACT_DONE             -          -          -          -          -          -            -
REFLECT_DONE         -          -          -          -          -          -            -
SUB_TASK_CREATED     -          -          -          -          -          -            -
TASK_CREATED         reasoning  reasoning  -          -          -          -            -
REASON_DONE          -          -          acting     -          -          -            -
NEED_MORE_INFO       -          -          suspended  -          -          -            -
MESSAGE_RECEIVED     new-idle   -          -          -          reasoning  -            -
WEBHOOK_TRIGGERED    new-idle   -          -          -          -          -            -
SCHEDULE_FIRED       new-idle   -          -          -          -          -            -
TOOL_CALL_COMPLETED  -          -          -          tool       -          -            -
TOOL_CALL_FAILED     -          -          -          tool       -          -            -
STEP_COMPLETED       -          -          -          step       -          -            -
TASK_SUSPENDED       -          -          suspended  suspended  -          -            -
TASK_RESUMED         -          -          -          -          saved      -            -
TASK_FAILED          -          failed     failed     failed     failed     -            -
TOOL_CALL_STARTED    -          -          -          fact-tool  -          -            -
MODEL_CALLED         -          -          fact       -          -          fact         -
TASK_NOTIFY          -          -          fact       fact       -          -            -
BUDGET_EXCEEDED      -          -          fact       -          -          -            -
TASK_COMPLETED       -          -          -          -          -          once-result  -
REFLECTION_COMPLETE  -          -          -          -          -          once-refl    -
NOT_AN_EVENT         -          -          -          -          -          -            -
`

// referenceTableV0 is the legacy machine (version 0) written down by hand
// from the static, dynamic and special tables of
// pegasus-task-fsm-v1.zh.md, in the cells of referenceTable, plus:
//
//	act        ACT_DONE: for a generate step, or a sub_task step whose
//	           child exists, -> reflecting; else *EventError
//	fact-sub   SUB_TASK_CREATED: a fact for a current sub_task step with
//	           no child yet, else *EventError
//	verdict    REFLECT_DONE with verdict complete -> completed (the
//	           continue and replan rows are in the scripts)
//
// Its tool cell routes: more steps -> acting, else reflecting.
const referenceTableV0 = `
event                none        idle        perceiving  thinking    planning    acting      reflecting  suspended   completed    failed
TASK_CREATED         perceiving  perceiving  -           -           -           -           -           -           -            -
PERCEIVE_DONE        -           -           thinking    -           -           -           -           -           -            -
THINK_DONE           -           -           -           planning    -           -           -           -           -            -
NEED_MORE_INFO       -           -           -           suspended   -           -           -           -           -            -
PLAN_DONE            -           -           -           -           acting      -           -           -           -            -
ACT_DONE             -           -           -           -           -           act         -           -           -            -
TOOL_CALL_COMPLETED  -           -           -           -           -           tool        -           -           -            -
TOOL_CALL_FAILED     -           -           -           -           -           tool        -           -           -            -
REFLECT_DONE         -           -           -           -           -           -           verdict     -           -            -
MESSAGE_RECEIVED     new-idle    -           -           -           -           -           -           thinking    -            -
WEBHOOK_TRIGGERED    new-idle    -           -           -           -           -           -           -           -            -
SCHEDULE_FIRED       new-idle    -           -           -           -           -           -           -           -            -
TASK_SUSPENDED       -           -           suspended   suspended   suspended   suspended   suspended   -           -            -
TASK_RESUMED         -           -           -           -           -           -           -           saved       -            -
TASK_FAILED          -           failed      failed      failed      failed      failed      failed      failed      -            -
TOOL_CALL_STARTED    -           -           -           -           -           fact-tool   -           -           -            -
SUB_TASK_CREATED     -           -           -           -           -           fact-sub    -           -           -            -
MODEL_CALLED         -           -           fact        fact        fact        -           fact        -           -            -
TASK_NOTIFY          -           -           fact        fact        fact        fact        fact        -           -            -
BUDGET_EXCEEDED      -           -           fact        fact        fact        -           fact        -           -            -
TASK_COMPLETED       -           -           -           -           -           -           -           -           once-result  -
REASON_DONE          -           -           -           -           -           -           -           -           -            -
STEP_COMPLETED       -           -           -           -           -           -           -           -           -            -
REFLECTION_COMPLETE  -           -           -           -           -           -           -           -           -            -
NOT_AN_EVENT         -           -           -           -           -           -           -           -           -            -
`

func parseReference(t *testing.T, table string) (types []EventType, cell map[State]map[EventType]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	header := strings.Fields(lines[0])[1:]
	cell = map[State]map[EventType]string{}
	for i, h := range header {
		if h == "none" {
			header[i] = string(StateNone)
		}
		cell[State(header[i])] = map[EventType]string{}
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != len(header)+1 {
			t.Fatalf("bad reference row %q", l)
		}
		et := EventType(f[0])
		types = append(types, et)
		for i, h := range header {
			cell[State(h)][et] = f[i+1]
		}
	}
	return types, cell
}

// shape is a plan shape: step kinds and how many are done.
type shape struct {
	kinds []ActionType
	done  int
}

func (s shape) String() string {
	parts := make([]string, len(s.kinds))
	for i, k := range s.kinds {
		parts[i] = string(k)
		if i < s.done {
			parts[i] += "+"
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func shapes(version int) []shape {
	const T, R, G, S = ActionToolCall, ActionRespond, ActionGenerate, ActionSubTask
	kindSets := [][]ActionType{{T}, {R}, {G}, {T, R}, {R, T}, {G, G}, {T, T}, {R, G}, {G, T, R}}
	if version == 0 {
		kindSets = [][]ActionType{{T}, {G}, {S}, {T, G}, {G, T}, {S, T}, {T, T}, {T, S, G}}
	}
	var out []shape
	for _, ks := range kindSets {
		for d := 0; d <= len(ks); d++ {
			out = append(out, shape{ks, d})
		}
	}
	return out
}

// variant is one task in a given state: plan shape, saved state when
// suspended, recorded facts when completed.
type variant struct {
	machine        Machine
	state          State
	shape          shape
	saved          State
	resultRecorded bool
	reflected      bool
	child          bool // version 0: the current sub_task step has its child
	workerCall     bool // the current tool_call step's call runs as the broker task "worker-1"
}

func (v variant) String() string {
	return fmt.Sprintf("%s %s plan=%s saved=%s result=%v refl=%v child=%v worker=%v", v.machine.Ref(), v.state, v.shape, v.saved, v.resultRecorded, v.reflected, v.child, v.workerCall)
}

// build makes the task directly, without Apply, so the check does not
// depend on the code under test to reach a state.
func (v variant) build() Task {
	switch v.state {
	case StateNone:
		return Task{}
	case StateIdle:
		return Task{ID: "task-1", Machine: v.machine.Ref(), State: StateIdle, Version: 1, Context: Context{InputText: "queued"}}
	}
	p := &Plan{Goal: "g"}
	for i, k := range v.shape.kinds {
		st := PlanStep{Index: i, ActionType: k, Completed: i < v.shape.done}
		if k == ActionToolCall {
			st.ActionParams = map[string]string{"tool": fmt.Sprintf("tool%d", i)}
		}
		p.Steps = append(p.Steps, st)
	}
	first := v.machine.States()[1]
	t := Task{
		ID:      "task-1",
		Machine: v.machine.Ref(),
		State:   v.state,
		Version: 5,
		Context: Context{Plan: p, Iteration: 3, SuspendedState: v.saved, ResultRecorded: v.resultRecorded},
		History: []Transition{{From: StateIdle, To: first, Event: TaskCreated}},
	}
	if v.state != first {
		t.History = append(t.History, Transition{From: first, To: v.state, Event: "X"})
	}
	if v.child {
		t.Context.PendingSubTask = &SubTaskCreatedBody{StepIndex: v.shape.done, TaskID: "child-1"}
	}
	if v.workerCall {
		t.Context.PendingCall = &ToolCallStartedBody{StepIndex: v.shape.done, Tool: fmt.Sprintf("tool%d", v.shape.done),
			IdempotencyKey: "k", Source: "worker:w", Task: "worker-1"}
	}
	if v.reflected {
		t.Context.PostReflection = &PostTaskReflection{Assessment: "a"}
	}
	return t
}

func variants(m Machine) []variant {
	var out []variant
	for _, s := range append([]State{StateNone}, m.States()...) {
		if s == StateNone || s == StateIdle {
			out = append(out, variant{machine: m, state: s})
			continue
		}
		for _, sh := range shapes(m.Ref().Version) {
			switch s {
			case StateSuspended:
				for _, saved := range m.States() {
					if saved.IsActive() {
						out = append(out, variant{machine: m, state: s, shape: sh, saved: saved})
					}
				}
			case StateCompleted:
				for _, rr := range []bool{false, true} {
					for _, rf := range []bool{false, true} {
						out = append(out, variant{machine: m, state: s, shape: sh, resultRecorded: rr, reflected: rf})
					}
				}
			case StateActing:
				out = append(out, variant{machine: m, state: s, shape: sh})
				if sh.done < len(sh.kinds) && sh.kinds[sh.done] == ActionSubTask {
					out = append(out, variant{machine: m, state: s, shape: sh, child: true})
				}
				if sh.done < len(sh.kinds) && sh.kinds[sh.done] == ActionToolCall {
					out = append(out, variant{machine: m, state: s, shape: sh, workerCall: true})
				}
			default:
				out = append(out, variant{machine: m, state: s, shape: sh})
			}
		}
	}
	return out
}

// TestExhaustive applies a well-formed event of every type to a task in
// every state with every plan shape, and checks the outcome against
// referenceTable, including the completion route, the iteration rule and
// the History rule.
func TestExhaustive(t *testing.T) {
	for _, m := range Machines() {
		t.Run(m.Ref().String(), func(t *testing.T) {
			if m.Ref() == DispatchMachine {
				exhaustiveDispatch(t)
				return
			}
			table := referenceTable
			if m.Ref().Version == 0 {
				table = referenceTableV0
			}
			exhaustive(t, m, table)
		})
	}
}

func exhaustive(t *testing.T, m Machine, table string) {
	types, ref := parseReference(t, table)
	if len(types) != len(EventTypes)-len(DispatchEventTypes)+1 { // dispatch events: see exhaustiveDispatch
		t.Fatalf("reference has %d rows, the package %d event types (+1 unknown)", len(types), len(EventTypes))
	}
	v0 := m.Ref().Version == 0
	checked := 0
	for _, v := range variants(m) {
		for _, et := range types {
			task := v.build()
			s := stepper{n: 50}
			ev := s.envelope(task, et, mustBody(t, task, et))
			if v.state == StateNone && v0 {
				// The creating event names the machine.
				ref := m.Ref()
				switch b := ev.Body.(type) {
				case *TaskCreatedBody:
					b.Machine = ref
				case *Input:
					b.Machine = &ref
				}
			}
			got, err := Apply(task, ev)

			cellv := ref[v.state][et]
			cur := -1
			var curKind ActionType
			if v.shape.done < len(v.shape.kinds) {
				cur, curKind = v.shape.done, v.shape.kinds[v.shape.done]
			}
			want, wantEventErr, isFact := "", false, false
			switch cellv {
			case "-":
			case "tool", "step":
				ok := cur >= 0 && ((cellv == "tool") == (curKind == ActionToolCall))
				switch {
				case !ok:
					wantEventErr = true
				case v0:
					want = refRouteV0(v.shape)
				default:
					want = refRoute(v.shape)
				}
			case "act":
				if cur >= 0 && (curKind == ActionGenerate || (curKind == ActionSubTask && v.child)) {
					want = string(StateReflecting)
				} else {
					wantEventErr = true
				}
			case "fact-sub":
				wantEventErr = cur < 0 || curKind != ActionSubTask || v.child
				want, isFact = string(v.state), true
			case "verdict":
				want = string(StateCompleted)
			case "saved":
				want = string(v.saved)
			case "fact":
				want, isFact = string(v.state), true
			case "fact-tool":
				wantEventErr = cur < 0 || curKind != ActionToolCall
				want, isFact = string(v.state), true
			case "once-result":
				wantEventErr = v.resultRecorded
				want, isFact = string(v.state), true
			case "once-refl":
				wantEventErr = v.reflected
				want, isFact = string(v.state), true
			case "new-idle":
				want, isFact = string(StateIdle), true // no History entry
			default:
				want = cellv
			}
			name := fmt.Sprintf("%s / %s", v, et)

			if can := m.CanTransition(v.state, et); can != (cellv != "-") {
				t.Errorf("%s: CanTransition=%v, reference %q", name, can, cellv)
			}
			hist := len(task.History) + 1
			if isFact {
				hist--
			}
			if checkOutcome(t, name, v.state, et, got, err, cellv == "-", wantEventErr, want, hist) {
				if got.Version != ev.Version || got.Seq != ev.Seq || got.LastEvent != ev.ID || !got.UpdatedAt.Equal(ev.Time) {
					t.Errorf("%s: envelope bookkeeping not applied: %+v", name, got)
				}
				wantIter := task.Context.Iteration
				if et == TaskCreated {
					wantIter = 1
				} else if cellv == "new-idle" {
					wantIter = 0
				} else if et == MessageReceived || (!v0 && got.State == StateReasoning && v.state == StateActing) {
					wantIter++
				}
				if got.Context.Iteration != wantIter {
					t.Errorf("%s: iteration %d, want %d", name, got.Context.Iteration, wantIter)
				}
			}
			if err != nil {
				if a, b := mustEncode(t, got), mustEncode(t, v.build()); string(a) != string(b) {
					t.Errorf("%s: refused event changed the task", name)
				}
			}
			checked++
		}
	}
	t.Logf("checked %d (state, plan shape, event type) combinations", checked)
}

// refRouteV0 is version 0's routing after a tool call: more steps ->
// acting, else reflecting.
func refRouteV0(s shape) string {
	if s.done+1 < len(s.kinds) {
		return "acting"
	}
	return "reflecting"
}

// refRoute is the completion routing, written from the spec: after the
// current step, more steps -> acting; all done with a tool_call step ->
// reasoning; otherwise completed.
func refRoute(s shape) string {
	if s.done+1 < len(s.kinds) {
		return "acting"
	}
	for _, k := range s.kinds {
		if k == ActionToolCall {
			return "reasoning"
		}
	}
	return "completed"
}

func mustBody(t *testing.T, task Task, et EventType) Body {
	t.Helper()
	a := &args{et: et, kv: map[string]string{}, used: map[string]bool{}}
	b, err := scriptBody(task, a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEncode(t testing.TB, task Task) []byte {
	t.Helper()
	b, err := EncodeTask(task)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkOutcome checks what Apply returned for an event of type et in state
// from against a reference table's verdict: refused (a *TransitionError),
// wantErr (an *EventError), or else the state want with hist History
// entries. It reports whether the event was applied, for the caller's
// further checks.
func checkOutcome(t *testing.T, name string, from State, et EventType, got Task, err error, refused, wantErr bool, want string, hist int) (applied bool) {
	t.Helper()
	var te *TransitionError
	var ee *EventError
	switch {
	case refused:
		if !errors.As(err, &te) || te.From != from || te.Event != et || !errors.Is(err, ErrInvalidTransition) {
			t.Errorf("%s: want *TransitionError, got %v", name, err)
		}
	case wantErr:
		if !errors.As(err, &ee) || !errors.Is(err, ErrInvalidEvent) || errors.Is(err, ErrInvalidTransition) {
			t.Errorf("%s: want *EventError, got %v", name, err)
		}
	case err != nil:
		t.Errorf("%s: want %s, got %v", name, want, err)
	default:
		if string(got.State) != want {
			t.Errorf("%s: state %s, want %s", name, got.State, want)
		}
		if len(got.History) != hist {
			t.Errorf("%s: history %d entries, want %d", name, len(got.History), hist)
		}
		return true
	}
	return false
}
