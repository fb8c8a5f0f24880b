package projection

import (
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

func TestWorkersFold(t *testing.T) {
	ws := Workers{}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := ws.Apply(WorkerRegistered, &WorkerBody{Worker: "w1", Capabilities: []string{"GPU", "research"}}, at); err != nil {
		t.Fatal(err)
	}
	w := ws["w1"]
	if w.MaxTasks != 1 || !w.Has([]string{"gpu"}) || !w.Has(nil) || w.Has([]string{"gpu", "cooking"}) {
		t.Fatalf("worker: %+v", w)
	}
	if err := ws.Apply(WorkerDrained, &WorkerBody{Worker: "w1", By: "ops"}, at); err != nil || !w.Draining || w.DrainedBy != "ops" {
		t.Fatalf("drain: %v %+v", err, w)
	}
	if err := ws.Apply(WorkerRegistered, &WorkerBody{Worker: "w1", MaxTasks: 4}, at); err != nil || w.Draining || w.MaxTasks != 4 {
		t.Fatalf("re-register: %v %+v", err, w)
	}
	if err := ws.Apply("WORKER_DANCED", &WorkerBody{Worker: "w1"}, at); err == nil {
		t.Fatal("unknown worker event accepted")
	}
	data, err := EncodeWorker(&WorkerBody{Worker: "w2", Capabilities: []string{"a"}, By: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeWorker(WorkerSchemaVersion, data)
	if err != nil || b.Worker != "w2" || len(b.Capabilities) != 1 {
		t.Fatalf("round trip: %+v %v", b, err)
	}
	if _, err := DecodeWorker(WorkerSchemaVersion, []byte{0xc1}); err == nil {
		t.Fatal("hostile bytes decoded")
	}
}

func TestDLQFilterAndStats(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dead := fsm.Task{ID: "a", State: fsm.StateFailed, CreatedAt: at, Dispatch: &fsm.Dispatch{DeadLettered: true, DeadLetteredAt: at.Add(time.Hour),
		Error: "connection refused", RequiredCapabilities: []string{"GPU"}, RetryCount: 3, AssignedAt: at.Add(time.Second)}}
	done := fsm.Task{ID: "b", State: fsm.StateCompleted, CreatedAt: at, Dispatch: &fsm.Dispatch{AssignedAt: at.Add(2 * time.Second), CompletedAt: at.Add(3 * time.Second)}}
	queued := fsm.Task{ID: "c", State: fsm.StatePending, Machine: fsm.DispatchMachine, CreatedAt: at, Dispatch: &fsm.Dispatch{}}
	for _, c := range []struct {
		f    DLQFilter
		want bool
	}{
		{DLQFilter{}, true}, {DLQFilter{Capability: "gpu"}, true}, {DLQFilter{Capability: "cpu"}, false},
		{DLQFilter{Error: "refused"}, true}, {DLQFilter{Error: "timeout"}, false},
		{DLQFilter{From: at, To: at.Add(2 * time.Hour)}, true}, {DLQFilter{To: at.Add(time.Hour)}, false},
	} {
		if got := c.f.Match(&dead); got != c.want {
			t.Errorf("%+v: %v", c.f, got)
		}
	}
	if (DLQFilter{}).Match(&done) {
		t.Error("a completed task matched the DLQ filter")
	}
	s := ComputeBrokerStats([]fsm.Task{dead, done, queued, {ID: "other", State: fsm.StateReasoning}}, at.Add(time.Minute))
	if s.Tasks != 3 || s.DeadLetters != 1 || s.Retries != 3 || s.QueueDepth != 1 || s.OldestQueued != 60 ||
		s.ByStatus["completed"] != 1 || s.ToAssign.N != 2 || s.ToAssign.P50 != 2000 || s.ToComplete.P99 != 3000 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestQueueLess(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hi := fsm.Task{ID: "z", Priority: 9, CreatedAt: at.Add(time.Hour)}
	old := fsm.Task{ID: "y", Priority: 5, CreatedAt: at}
	young := fsm.Task{ID: "x", Priority: 5, CreatedAt: at.Add(time.Minute)}
	if QueueLess(&hi, &old) >= 0 || QueueLess(&old, &young) >= 0 || QueueLess(&young, &hi) <= 0 {
		t.Fatal("queue order is not priority DESC, created_at ASC")
	}
}

func TestFilterMachines(t *testing.T) {
	d := Summary{ID: "a", Machine: "dispatch.task@1"}
	p := Summary{ID: "b", Machine: "pegasus.task@0"}
	for _, c := range []struct {
		f    Filter
		s    *Summary
		want bool
	}{
		{Filter{Machines: []string{"dispatch.task"}}, &d, true},
		{Filter{Machines: []string{"dispatch.task"}}, &p, false},
		{Filter{Machines: []string{"pegasus.task@0"}}, &p, true},
		{Filter{Machines: []string{"pegasus.task@1"}}, &p, false},
		{Filter{Machines: []string{"dispatch"}}, &d, false},
		{Filter{}, &p, true},
	} {
		if got := c.f.Match(c.s); got != c.want {
			t.Errorf("%v on %s: %v", c.f.Machines, c.s.Machine, got)
		}
	}
}
