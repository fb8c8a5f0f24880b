package replay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// taskEvents builds one task's stream from bodies: consecutive versions
// and sequences, the first event's id naming the stream.
func taskEvents(t *testing.T, bodies ...fsm.Body) []eventlog.Event {
	t.Helper()
	at := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	var evs []eventlog.Event
	stream := ""
	for i, b := range bodies {
		data, err := fsm.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		id := ulid.MustNew(ulid.Timestamp(at.Add(time.Duration(i)*time.Second)), strings.NewReader(strings.Repeat("x", 16)))
		if i == 0 {
			stream = id.String()
		}
		evs = append(evs, eventlog.Event{ID: id, Seq: uint64(i + 1), Stream: stream, Version: uint64(i + 1),
			Type: string(b.EventType()), Time: at.Add(time.Duration(i) * time.Second), Correlation: evs0(evs, id),
			Schema: fsm.SchemaVersion, Body: data})
	}
	return evs
}

func evs0(evs []eventlog.Event, id ulid.ULID) ulid.ULID {
	if len(evs) == 0 {
		return id
	}
	return evs[0].ID
}

// TestVerifyReportsUndueEvents: every event the loop appends answers the
// work fsm.Next said was due; verify names the first that does not, once
// per task, and leaves commands (suspend, resume, cancel) alone.
func TestVerifyReportsUndueEvents(t *testing.T) {
	v0 := fsm.MachineRef{Name: fsm.MachineName, Version: 0}
	cases := []struct {
		name    string
		bodies  []fsm.Body
		want    string // "" when sound; else the first undue event's type and the due work
		refused int
	}{
		{"sound v1", []fsm.Body{
			&fsm.Input{Kind: fsm.MessageReceived, Text: "hi"},
			&fsm.TaskCreatedBody{},
			&fsm.TaskSuspendedBody{Reason: "pause"},
			&fsm.TaskResumedBody{},
			&fsm.ModelCalledBody{Purpose: "reason"},
			&fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{ActionType: fsm.ActionRespond}}}},
			&fsm.StepCompletedBody{Result: "ok"},
			&fsm.TaskCompletedBody{Result: "ok"},
			&fsm.ReflectionCompleteBody{},
		}, "", 0},
		{"sound v0", []fsm.Body{
			&fsm.TaskCreatedBody{Machine: v0},
			&fsm.PerceiveDoneBody{},
			&fsm.ThinkDoneBody{},
			&fsm.PlanDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{ActionType: fsm.ActionSubTask}}}},
			&fsm.SubTaskCreatedBody{TaskID: "child"},
			&fsm.ActDoneBody{SubTask: "child", Result: "r"},
			&fsm.ReflectDoneBody{Reflection: fsm.Reflection{Verdict: fsm.VerdictComplete}},
			&fsm.TaskCompletedBody{Result: "r"},
			&fsm.TaskFailedBody{Reason: "x"}, // refused (completed is terminal), not undue
		}, "", 1},
		{"model call after the result", []fsm.Body{
			&fsm.TaskCreatedBody{},
			&fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{ActionType: fsm.ActionRespond}}}},
			&fsm.StepCompletedBody{Result: "ok"},
			&fsm.ModelCalledBody{Purpose: "reflect"}, // legal, but the result is due first
			&fsm.TaskCompletedBody{Result: "ok"},
			&fsm.ReflectionCompleteBody{},
			&fsm.ModelCalledBody{Purpose: "reflect"},
		}, "MODEL_CALLED: the task's first event that answers no due work: compile was due", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := VerifySource(context.Background(), mustMem(t, taskEvents(t, c.bodies...)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Refused != c.refused {
				t.Fatalf("refused %d, want %d: %v", rep.Refused, c.refused, rep.Problems)
			}
			var undue []string
			for _, p := range rep.Problems {
				if p.Kind == ProblemUndue {
					undue = append(undue, p.String())
				}
			}
			switch {
			case c.want == "" && len(undue) > 0:
				t.Fatalf("undue problems in a sound log: %q", undue)
			case c.want != "" && (len(undue) != 1 || !strings.Contains(undue[0], c.want) || !strings.Contains(undue[0], "seq 4")):
				t.Fatalf("undue = %q, want one at seq 4 mentioning %q", undue, c.want)
			}
		})
	}
}
