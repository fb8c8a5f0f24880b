package fsm

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"testing"
	"time"
)

var seedFlag = flag.Int64("seed", 0, "seed for the randomized fsm tests (0: pick one and print it)")

func testSeed(t *testing.T) int64 {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	return seed
}

// randomEvent returns a mostly well-formed event for t, legal in its state
// more often than not, with occasional defects: a wrong step, a wrong tool,
// a missing or mismatched body, a bad version, a wrong stream, a bad plan.
func randomEvent(rng *rand.Rand, s *stepper, m Machine, t Task) Event {
	var et EventType
	legal := m.Legal(t.State)
	switch r := rng.Intn(10); {
	case r < 7 && len(legal) > 0:
		et = legal[rng.Intn(len(legal))]
		for i := 0; i < 3 && (et == TaskFailed || et == TaskSuspended); i++ {
			et = legal[rng.Intn(len(legal))] // most walks should live long enough to finish
		}
	case r == 9:
		et = "NOT_AN_EVENT"
	default:
		et = EventTypes[rng.Intn(len(EventTypes))]
	}
	a := &args{et: et, kv: map[string]string{}, used: map[string]bool{}}
	if t.State == StateNone && rng.Intn(20) != 0 {
		a.kv["machine"] = fmt.Sprintf("%s/%d", m.Ref().Name, m.Ref().Version)
	}
	if et == ReasonDone || et == PlanDone {
		kinds := []string{"tool_call:search", "tool_call:fetch", "respond", "generate"}
		if et == PlanDone {
			kinds = []string{"tool_call:search", "tool_call:fetch", "sub_task", "generate"}
		}
		n := 1 + rng.Intn(4)
		spec := ""
		for i := range n {
			if i > 0 {
				spec += ","
			}
			spec += kinds[rng.Intn(len(kinds))]
		}
		if rng.Intn(20) == 0 {
			spec = []string{"", "tool_call", "dance", "respond+"}[rng.Intn(4)]
		}
		a.kv["plan"] = spec
	}
	if rng.Intn(15) == 0 {
		a.kv["step"] = fmt.Sprint(rng.Intn(4) - 1)
	}
	if rng.Intn(20) == 0 {
		a.kv["tool"] = "other"
	}
	if et == DispatchCreated {
		// Short deadlines and few retries, so that walks reach timed_out
		// and the dead-letter queue.
		a.kv["timeout"] = fmt.Sprint(1 + rng.Intn(4))
		a.kv["max_retries"] = fmt.Sprint(rng.Intn(3))
		a.kv["heartbeat"] = fmt.Sprint(rng.Intn(3))
		a.kv["backoff"] = fmt.Sprint(rng.Intn(2))
	}
	if et == DispatchFailed && rng.Intn(3) == 0 {
		a.kv["retry"] = "false"
	}
	if rng.Intn(25) == 0 && (et == DispatchStarted || et == DispatchCompleted || et == DispatchFailed || et == DispatchProgress) {
		a.kv["agent"] = "intruder"
	}
	if et == ReflectDone {
		a.kv["verdict"] = []string{VerdictComplete, VerdictContinue, VerdictReplan, "maybe"}[rng.Intn(4)]
	}
	body, _ := scriptBody(t, a)
	switch rng.Intn(40) {
	case 0:
		body = nil
	case 1:
		body = &TaskNotifyBody{Message: "wrong body"}
	case 2:
		body = (*ToolCallResultBody)(nil)
	case 3:
		body = (*Input)(nil)
	}
	ev := s.envelope(t, et, body)
	switch rng.Intn(40) {
	case 0:
		ev.Version += uint64(1 + rng.Intn(2))
	case 1:
		ev.Version--
	case 2:
		ev.Stream = "another-stream"
	}
	return ev
}

// TestPropertyRandomWalks folds random event sequences and checks the
// invariants after every event: refusals are typed and agree with
// CanTransition, leave the task unchanged, terminal states are absorbing,
// facts keep the state and History, History is consistent with the state,
// Describe never panics. At the end of each walk, folding the accepted
// events again (from zero, from a decoded snapshot, and on a clone) gives
// byte-identical encodings.
func TestPropertyRandomWalks(t *testing.T) {
	seed := testSeed(t)
	for _, m := range Machines() {
		t.Run(m.Ref().String(), func(t *testing.T) { randomWalks(t, m, seed) })
	}
}

func randomWalks(t *testing.T, m Machine, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	walks, length := 100, 80 // per machine; walks live long (see randomEvent)
	if testing.Short() {
		walks = 50
	}
	reached := map[State]int{}
	for w := range walks {
		var (
			s        stepper
			task     Task
			accepted []Event
		)
		snapAt := rng.Intn(length)
		var snap []byte
		var fork, branch Task
		var forkAt int
		var branchEnc []byte
		// branchRng draws the events of a branch forked (Task.Fork) at the
		// snapshot, apart from the walk's own.
		branchRng := rand.New(rand.NewSource(seed + int64(w) + 1))
		for i := range length {
			if i == snapAt {
				snap = mustEncode(t, task)
				fork = task.Clone()
				branch = forkBranch(t, branchRng, s, m, task.Fork(), 3)
				branchEnc = mustEncode(t, branch)
				forkAt = len(accepted)
			}
			ev := randomEvent(rng, &s, m, task)
			before := mustEncode(t, task)
			next, err := Apply(task, ev)
			where := fmt.Sprintf("walk %d event %d (%s in %s)", w, i, ev.Type, task.State)
			from := task.State
			can := task.CanTransition(ev.Type)
			var te *TransitionError
			isTE := errors.As(err, &te)
			if isTE != !can {
				t.Fatalf("%s: CanTransition=%v but Apply error %v", where, can, err)
			}
			if err != nil {
				if !isTE && !errors.Is(err, ErrInvalidEvent) {
					t.Fatalf("%s: untyped refusal %v", where, err)
				}
				if !bytes.Equal(before, mustEncode(t, next)) {
					t.Fatalf("%s: refused event changed the task", where)
				}
				continue
			}
			if task.IsTerminal() && next.State != from && ev.Type != DispatchRequeued { // a requeue revives a dead letter
				t.Fatalf("%s: left terminal state for %s", where, next.State)
			}
			isFact := len(next.History) == len(task.History)
			created := from == StateNone && next.State == StateIdle // an input creates the task in idle
			if isFact && next.State != task.State && !created {
				t.Fatalf("%s: state changed without a History entry", where)
			}
			if bad := checkHistory(next); bad != "" {
				t.Fatalf("%s: %s", where, bad)
			}
			if next.Version != ev.Version || next.LastEvent != ev.ID {
				t.Fatalf("%s: version/last event not recorded", where)
			}
			_ = Describe(next)
			_ = DescribeEvent(ev)
			if act := Next(&next); act.Kind == ActRunStep {
				if st := next.Context.Plan.CurrentStep(); st == nil || st.Index != act.Step || st.ActionType != act.StepType {
					t.Fatalf("%s: Next %s is not the current step", where, act)
				}
			}
			task = next
			accepted = append(accepted, ev)
			reached[task.State]++
		}
		want := mustEncode(t, task)

		refold := fold(t, Task{}, accepted)
		if !bytes.Equal(want, mustEncode(t, refold)) {
			t.Fatalf("walk %d: folding the same %d events again differs", w, len(accepted))
		}
		if snap != nil {
			restored, err := DecodeTask(snap)
			if err != nil {
				t.Fatalf("walk %d: decode snapshot: %v", w, err)
			}
			if got := fold(t, restored, accepted[forkAt:]); !bytes.Equal(want, mustEncode(t, got)) {
				t.Fatalf("walk %d: fold from snapshot at %d differs", w, forkAt)
			}
			if got := fold(t, fork, accepted[forkAt:]); !bytes.Equal(want, mustEncode(t, got)) {
				t.Fatalf("walk %d: fold from clone at %d differs", w, forkAt)
			}
			// The branch forked at the snapshot shares the walk's arrays:
			// the walk must not have written into its own, nor may it
			// write into the walk's as it goes on.
			if !bytes.Equal(branchEnc, mustEncode(t, branch)) {
				t.Fatalf("walk %d: the walk changed the branch forked at %d", w, forkAt)
			}
			forkBranch(t, branchRng, s, m, branch, 3)
			if !bytes.Equal(want, mustEncode(t, task)) {
				t.Fatalf("walk %d: the branch forked at %d changed the task", w, forkAt)
			}
		}
		if got, err := DecodeTask(want); err != nil || !bytes.Equal(want, mustEncode(t, got)) {
			t.Fatalf("walk %d: EncodeTask/DecodeTask round trip differs (%v)", w, err)
		}
	}
	for _, st := range m.States()[1:] {
		if reached[st] == 0 && walks >= 50 {
			t.Errorf("no walk reached %s: the generator is too weak", st)
		}
	}
	t.Logf("states after accepted events: %v", reached)
}

// forkBranch applies up to n random events to task, a fork, with a
// stepper of its own, and returns it.
func forkBranch(t *testing.T, rng *rand.Rand, s stepper, m Machine, task Task, n int) Task {
	t.Helper()
	for range n {
		if next, err := Apply(task, randomEvent(rng, &s, m, task)); err == nil {
			task = next
		}
	}
	return task
}

func fold(t *testing.T, task Task, evs []Event) Task {
	t.Helper()
	for _, ev := range evs {
		var err error
		if task, err = Apply(task, ev); err != nil {
			t.Fatalf("refold: %s v%d: %v", ev.Type, ev.Version, err)
		}
	}
	return task
}
