package replay

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// TestDispatchDecisions words what the golden files of pegasus-replay do
// not show: a timeout at the deadline (not the heartbeat), a dead letter
// for exhausted retries, a refused event, and nothing for another
// machine's task.
func TestDispatchDecisions(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var evs []eventlog.Event
	add := func(stream string, at time.Duration, b fsm.Body) {
		t.Helper()
		data, err := fsm.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		var id ulid.ULID
		_ = id.SetTime(ulid.Timestamp(t0))
		binary.BigEndian.PutUint64(id[8:], uint64(len(evs)+1))
		v := uint64(1)
		for _, e := range evs {
			if e.Stream == stream {
				v++
			}
		}
		evs = append(evs, eventlog.Event{ID: id, Seq: uint64(len(evs) + 1), Stream: stream, Version: v, Type: string(b.EventType()),
			Time: t0.Add(at), Schema: fsm.SchemaVersion, Body: data})
	}
	const task = "01KDZQF1R00000000000000001"
	add(task, 0, &fsm.DispatchCreatedBody{AgentID: "mike", Title: "x", Owner: "mike", TimeoutSeconds: 60, MaxRetries: 0, RetryEligible: true, Source: "agent"})
	add(task, time.Second, &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "w1", Score: 1})
	add(task, 2*time.Second, &fsm.DispatchReportBody{Kind: fsm.DispatchStarted, AgentID: "w1"})
	add(task, 62*time.Second, &fsm.DispatchTimedOutBody{AgentID: "$broker"})
	add(task, 62*time.Second, &fsm.DispatchDeadLetteredBody{AgentID: "$broker", Reason: fsm.DeadLetterExhausted})
	add(task, 63*time.Second, &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "w1"}) // a dead letter is not assigned
	const other = "01KDZQF1R00000000000000002"
	add(other, 0, &fsm.TaskCreatedBody{Machine: fsm.CurrentMachine, TaskType: "general", InputText: "hi", Source: "cli"})
	m, err := NewMemLog(evs...)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := DispatchDecisions(context.Background(), m, task)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, d.Text)
	}
	for i, want := range []string{
		"created by mike at 2026-01-02T03:00:00.000Z: priority 0; timeout 60s, up to 0 retries, retry_eligible=true",
		"assigned to w1 at 2026-01-02T03:00:01.000Z (score 1.00), attempt 1; times out at 2026-01-02T03:01:01.000Z without an outcome",
		"started by w1 at 2026-01-02T03:00:02.000Z",
		"timed out at 2026-01-02T03:01:02.000Z because no outcome 60s after it was started at 2026-01-02T03:00:02.000Z (last sign of life 2026-01-02T03:00:02.000Z)",
		"dead-lettered at 2026-01-02T03:01:02.000Z because its retries are exhausted (0 of 0)",
		"refused by the machine: ",
	} {
		if i >= len(got) || !strings.HasPrefix(got[i], want) {
			t.Fatalf("decision %d:\n got %q\nwant %q\nall: %q", i, got[min(i, len(got)-1)], want, got)
		}
	}
	if ds, err := DispatchDecisions(context.Background(), m, other); err != nil || ds != nil {
		t.Fatalf("a pegasus.task: %v %v", ds, err)
	}
}
