package fsm

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// dispatchScriptBody builds a well-formed dispatch.task body for a.et, with
// the seed's defaults, which the arguments can bend:
//
//	DISPATCH_CREATED    title= desc= agent=alice owner= caps=a,b priority=0 timeout=300
//	                    max_retries=3 retry_eligible=true source= parent= meta=k:v,...
//	                    run_at=SECONDS (after the test epoch) heartbeat=0 backoff=0
//	DISPATCH_ASSIGNED   worker=w1 agent=$broker
//	reports             agent=(the assigned worker) message= result={"ok":true} error=boom retry=true|false
//	DISPATCH_TIMED_OUT  agent=$broker
//	DISPATCH_RETRIED    jitter=MS
//	DISPATCH_DEAD_LETTERED reason=(the machine's)
//	DISPATCH_REQUEUED, DISPATCH_UPDATED agent=operator meta=k:v,...
//
// It returns nil for a type that is not a dispatch event.
func dispatchScriptBody(t Task, a *args) (Body, error) {
	num := func(k string, def int) int {
		n, err := a.num(k, def)
		if err != nil {
			return -999 // refused by the machine, visibly
		}
		return n
	}
	worker := ""
	if t.Dispatch != nil {
		worker = t.Dispatch.AssignedAgent
	}
	switch a.et {
	case DispatchCreated:
		b := DispatchCreatedBody{
			AgentID: a.str("agent", "alice"), Title: a.str("title", "resize images"), Description: a.str("desc", ""),
			Owner: a.str("owner", ""), Priority: num("priority", DefaultPriority), TimeoutSeconds: num("timeout", 0),
			MaxRetries: num("max_retries", DefaultMaxRetries), RetryEligible: a.str("retry_eligible", "true") == "true",
			Source: a.str("source", ""), ParentTaskID: a.str("parent", ""),
			HeartbeatSeconds: num("heartbeat", 0), RetryBackoffSeconds: num("backoff", 0),
			Metadata: metaArg(a.str("meta", "")),
		}
		if c := a.str("caps", ""); c != "" {
			b.RequiredCapabilities = strings.Split(c, ",")
		}
		if a.has("run_at") {
			b.RunAt = baseTime.Add(time.Duration(num("run_at", 0)) * time.Second)
		}
		b = DispatchDefaults(b)
		return &b, nil
	case DispatchAssigned:
		return &DispatchAssignedBody{AgentID: a.str("agent", "$broker"), Worker: a.str("worker", "w1")}, nil
	case DispatchStarted, DispatchProgress, DispatchCompleted, DispatchFailed:
		b := &DispatchReportBody{Kind: a.et, AgentID: a.str("agent", worker), Message: a.str("message", "")}
		switch a.et {
		case DispatchCompleted:
			b.Result = a.str("result", `{"ok":true}`)
		case DispatchFailed:
			b.Error = a.str("error", "boom")
			if r := a.str("retry", ""); r != "" {
				v := r == "true"
				b.RetryEligible = &v
			}
		}
		return b, nil
	case DispatchTimedOut:
		return &DispatchTimedOutBody{AgentID: a.str("agent", "$broker")}, nil
	case DispatchRetried:
		return &DispatchRetriedBody{AgentID: a.str("agent", "$broker"), JitterMS: int64(num("jitter", 0))}, nil
	case DispatchDeadLettered:
		_, why := DispatchRetryDue(&t)
		return &DispatchDeadLetteredBody{AgentID: a.str("agent", "$broker"), Reason: a.str("reason", why)}, nil
	case DispatchRequeued:
		return &DispatchRequeuedBody{AgentID: a.str("agent", "operator"), Reason: a.str("reason", "")}, nil
	case DispatchUpdated:
		return &DispatchUpdatedBody{AgentID: a.str("agent", "operator"), Metadata: metaArg(a.str("meta", "stage:qa"))}, nil
	case DispatchCancelled:
		return &DispatchCancelledBody{AgentID: a.str("agent", "parent"), Reason: a.str("reason", "the parent ended")}, nil
	}
	return nil, nil
}

// metaArg reads k:v,k:v ("" for none).
func metaArg(s string) map[string]string {
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(p, ":")
		m[k] = v
	}
	return m
}

// checkDispatchHistory is checkHistory for dispatch.task: History starts
// with none -(DISPATCH_CREATED)-> pending, each entry leaves the state the
// previous one reached, never leaves completed, and ends in the state.
func checkDispatchHistory(t Task) string {
	if len(t.History) == 0 {
		return "no history"
	}
	if h := t.History[0]; h.From != StateNone || h.Event != DispatchCreated || h.To != StatePending {
		return fmt.Sprintf("history starts with %+v", h)
	}
	for i := 1; i < len(t.History); i++ {
		if t.History[i].From != t.History[i-1].To {
			return fmt.Sprintf("history[%d].From=%s, previous To=%s", i, t.History[i].From, t.History[i-1].To)
		}
		if t.History[i-1].To == StateCompleted {
			return fmt.Sprintf("history leaves completed at %d", i)
		}
	}
	if last := t.History[len(t.History)-1]; last.To != t.State {
		return fmt.Sprintf("history ends in %s, state is %s", last.To, t.State)
	}
	return ""
}

// referenceDispatch is the seed's transition table (dispatch-task-state-
// machine.md, "Valid Transitions", "Retry Logic") written down a second
// time, by hand, with the extensions of docs/broker.md. Cells:
//
//	(dash)    refused: *TransitionError
//	<state>   the event moves the task to that state
//	report    from the assigned worker: as <state> after the slash; from
//	          another agent: *EventError
//	due       DISPATCH_TIMED_OUT: at or after the deadline -> timed_out; before: *EventError
//	retry     -> pending when retry_eligible and retry_count < max_retries and not
//	          dead-lettered, else *EventError
//	dlq       a fact (dead_lettered) when no retry is left and not yet
//	          dead-lettered, else *EventError
//	requeue   -> pending for a dead letter, else *EventError
//	fact      accepted, state and History unchanged
const referenceDispatch = `
event                   none     pending   assigned              in_progress           completed  failed   timed_out
DISPATCH_CREATED        pending  -         -                     -                     -          -        -
DISPATCH_ASSIGNED       -        assigned  -                     -                     -          -        -
DISPATCH_STARTED        -        -         report/in_progress    -                     -          -        -
DISPATCH_PROGRESS       -        -         -                     report/in_progress    -          -        -
DISPATCH_COMPLETED      -        -         -                     report/completed      -          -        -
DISPATCH_FAILED         -        -         -                     report/failed         -          -        -
DISPATCH_TIMED_OUT      -        -         due                   due                   -          -        -
DISPATCH_RETRIED        -        -         -                     -                     -          retry    retry
DISPATCH_DEAD_LETTERED  -        -         -                     -                     -          dlq      dlq
DISPATCH_REQUEUED       -        -         -                     -                     -          requeue  requeue
DISPATCH_UPDATED        -        fact      fact                  fact                  fact       fact     fact
DISPATCH_CANCELLED      -        failed    failed                failed                -          -        -
TASK_CREATED            -        -         -                     -                     -          -        -
MESSAGE_RECEIVED        -        -         -                     -                     -          -        -
TASK_FAILED             -        -         -                     -                     -          -        -
TASK_COMPLETED          -        -         -                     -                     -          -        -
NOT_AN_EVENT            -        -         -                     -                     -          -        -
`

// dispatchVariant is one task of the exhaustive test: a state, and the
// retry budget and flags that decide retries, plus who reports and when.
type dispatchVariant struct {
	state        State
	retries, max int
	eligible     bool
	deadLettered bool
	intruder     bool // the report comes from another agent
	early        bool // the timeout comes before the deadline
}

func (v dispatchVariant) build() Task {
	if v.state == StateNone {
		return Task{}
	}
	t0 := baseTime
	d := &Dispatch{Title: "t", Owner: "alice", MaxRetries: v.max, RetryCount: v.retries, RetryEligible: v.eligible,
		TimeoutSeconds: 30, DeadLettered: v.deadLettered}
	if v.state == StateAssigned || v.state == StateInProgress {
		d.AssignedAgent, d.AssignedAt = "w1", t0
	}
	if v.state == StateInProgress {
		d.StartedAt = t0
	}
	t := Task{ID: "task-1", Machine: DispatchMachine, State: v.state, Version: 4, Dispatch: d,
		History: []Transition{{From: StateNone, To: StatePending, Event: DispatchCreated}}}
	if v.state != StatePending {
		t.History = append(t.History, Transition{From: StatePending, To: v.state, Event: "X"})
	}
	return t
}

// TestExhaustive runs exhaustiveDispatch for dispatch.task; this test
// checks that the other machines refuse every dispatch event in every state
// with a *TransitionError (their own tables list their events only).
func TestDispatchEventsRefusedElsewhere(t *testing.T) {
	for _, m := range Machines() {
		if m.Ref() == DispatchMachine {
			continue
		}
		for _, s := range append([]State{StateNone}, m.States()...) {
			for _, et := range DispatchEventTypes {
				if m.CanTransition(s, et) {
					t.Errorf("%s: %s legal in %s", m.Ref(), et, s)
				}
			}
		}
	}
}

func exhaustiveDispatch(t *testing.T) {
	types, ref := parseReference(t, referenceDispatch)
	if len(types) != len(DispatchEventTypes)+5 {
		t.Fatalf("reference has %d rows, the machine %d event types (+5 of other machines)", len(types), len(DispatchEventTypes))
	}
	m := dispatchMachine{}
	var vs []dispatchVariant
	for _, s := range append([]State{StateNone}, DispatchStates...) {
		for _, budget := range [][2]int{{0, 3}, {2, 3}, {3, 3}, {0, 0}} {
			for _, el := range []bool{true, false} {
				for _, dl := range []bool{false, true} {
					for _, who := range []bool{false, true} {
						vs = append(vs, dispatchVariant{state: s, retries: budget[0], max: budget[1], eligible: el,
							deadLettered: dl, intruder: who, early: who})
					}
				}
			}
		}
	}
	checked := 0
	for _, v := range vs {
		for _, et := range types {
			task := v.build()
			s := stepper{n: 50} // event time: 51 s after the epoch, past the 30 s deadline
			a := &args{et: et, kv: map[string]string{}, used: map[string]bool{}}
			if v.intruder {
				a.kv["agent"] = "intruder"
			}
			body, _ := scriptBody(task, a)
			if et == NotAnEvent {
				body = nil
			}
			ev := s.envelope(task, et, body)
			if v.early {
				ev.Time = baseTime.Add(29 * time.Second)
			}
			got, err := m.Apply(task, ev)
			cell := ref[v.state][et]
			name := fmt.Sprintf("%+v / %s", v, et)
			if can := m.CanTransition(v.state, et); can != (cell != "-") {
				t.Errorf("%s: CanTransition=%v, reference %q", name, can, cell)
			}
			want, wantErr, fact := cell, false, false
			retryOK := v.eligible && v.retries < v.max && !v.deadLettered
			switch {
			case cell == "-":
			case strings.HasPrefix(cell, "report/"):
				want, wantErr = strings.TrimPrefix(cell, "report/"), v.intruder
				fact = et == DispatchProgress
			case cell == "due":
				want, wantErr = string(StateTimedOut), v.early
			case cell == "retry":
				want, wantErr = string(StatePending), !retryOK
			case cell == "dlq":
				want, wantErr, fact = string(v.state), retryOK || v.deadLettered, true
			case cell == "requeue":
				want, wantErr = string(StatePending), !v.deadLettered
			case cell == "fact":
				want, fact = string(v.state), true
			}
			hist := len(task.History) + 1
			if fact {
				hist--
			}
			if v.state == StateNone {
				hist = 1
			}
			if checkOutcome(t, name, v.state, et, got, err, cell == "-", wantErr, want, hist) {
				if bad := checkDispatchHistory(got); bad != "" && v.state != StateNone {
					// build's synthetic History is well formed; so must be the result.
					t.Errorf("%s: %s", name, bad)
				}
				if got.State == StatePending && v.state != StateNone && v.state != StatePending {
					if d := got.Dispatch; d.AssignedAgent != "" || !d.AssignedAt.IsZero() || !d.StartedAt.IsZero() {
						t.Errorf("%s: assignment not cleared: %+v", name, d)
					}
					wantCount := v.retries + 1
					if et == DispatchRequeued {
						wantCount = 0
					}
					if got.Dispatch.RetryCount != wantCount {
						t.Errorf("%s: retry_count %d, want %d", name, got.Dispatch.RetryCount, wantCount)
					}
				}
				if cell == "dlq" && !got.Dispatch.DeadLettered {
					t.Errorf("%s: not dead-lettered", name)
				}
			}
			if err != nil && string(mustEncode(t, got)) != string(mustEncode(t, v.build())) {
				t.Errorf("%s: refused event changed the task", name)
			}
			checked++
		}
	}
	t.Logf("checked %d (variant, event type) combinations", checked)
}

// NotAnEvent is the reference tables' unknown event type.
const NotAnEvent EventType = "NOT_AN_EVENT"
