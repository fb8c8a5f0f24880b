package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// startOrder schedules tasks on a scheduler with max slots and the given
// limits, then releases each task as soon as its stage ran, and returns the
// order in which stages started. One slot: the order is the admission order.
func newTestScheduler(max int, l ConcurrencyLimits) (*scheduler, chan string, *sync.WaitGroup) {
	var stages sync.WaitGroup
	ran := make(chan string, 256)
	s := newScheduler(max, context.Background(), time.Now, &stages, func(_ context.Context, id string) { ran <- id })
	s.limits = l
	return s, ran, &stages
}

// TestFairAdmission: one key submits 100 tasks, another 5 after them;
// with keys taken in turn, the second key's 5 all start before the first
// key's tenth.
func TestFairAdmission(t *testing.T) {
	s, ran, stages := newTestScheduler(1, ConcurrencyLimits{})
	for i := range 100 {
		s.schedule(fmt.Sprintf("a%03d", i), 0, "acme")
	}
	for i := range 5 {
		s.schedule(fmt.Sprintf("b%03d", i), 0, "beta")
	}
	var order []string
	for range 105 {
		id := <-ran
		order = append(order, id)
		s.release(id, false)
	}
	stages.Wait()
	started, lastB := 0, -1
	tenthA := -1
	for i, id := range order {
		if id[0] == 'a' {
			if started++; started == 10 {
				tenthA = i
			}
		} else {
			lastB = i
		}
	}
	if lastB > tenthA {
		t.Fatalf("beta's last task started at %d, after acme's tenth (%d): %v", lastB, tenthA, order[:20])
	}
	// Within a key: by age.
	prev := ""
	for _, id := range order {
		if id[0] == 'a' {
			if id < prev {
				t.Fatalf("acme's %s started after %s", id, prev)
			}
			prev = id
		}
	}
	if active, queued := s.counts(); active != 0 || queued != 0 {
		t.Fatalf("active %d queued %d", active, queued)
	}
}

// TestKeyLimit: a key at its limit waits while other keys run, says so,
// and is admitted when one of its tasks gives its slot up; a raised limit
// admits at once; priority orders a key's tasks.
func TestKeyLimit(t *testing.T) {
	s, ran, stages := newTestScheduler(4, ConcurrencyLimits{Default: 2, Keys: map[string]int{"acme": 1}})
	s.schedule("k1", 0, "acme")
	if got := <-ran; got != "k1" {
		t.Fatalf("ran %s", got)
	}
	s.schedule("k2", 5, "acme")
	s.schedule("k3", 1, "acme")
	if why, ok := s.waitReason("k2"); !ok || why != "waiting: key acme has 1 of 1 running" {
		t.Fatalf("why k2: %q %v", why, ok)
	}
	s.schedule("o1", 0, "")
	s.schedule("o2", 0, "")
	got := map[string]bool{<-ran: true, <-ran: true}
	if !got["o1"] || !got["o2"] {
		t.Fatalf("ran %v, want o1 and o2", got)
	}
	s.schedule("o3", 0, "")
	if why, _ := s.waitReason("o3"); why != "waiting: key (default) has 2 of 2 running" {
		t.Fatalf("why o3: %q", why)
	}
	if _, ok := s.waitReason("o1"); ok {
		t.Fatal("o1 runs but is said to wait")
	}
	s.release("k1", false)
	if got := <-ran; got != "k3" { // priority 1 before 5
		t.Fatalf("ran %s, want k3", got)
	}
	// Handing a slot over respects the key's limit: k2 (acme, at its
	// limit) stays, o3 takes it once o1 hands its slot.
	if handed, next := s.handOff("o1"); !handed || next != "o3" {
		t.Fatalf("handOff: %v %q", handed, next)
	}
	s.start("o3")
	if got := <-ran; got != "o3" {
		t.Fatalf("ran %s, want o3", got)
	}
	s.schedule("o4", 0, "")
	if why, _ := s.waitReason("o4"); why != "waiting: key (default) has 2 of 2 running" {
		t.Fatalf("why o4: %q", why)
	}
	s.release("o2", false)
	if got := <-ran; got != "o4" {
		t.Fatalf("ran %s, want o4 (k2's key is at its limit)", got)
	}
	s.setLimits(ConcurrencyLimits{Default: 2, Keys: map[string]int{"acme": 2}})
	if got := <-ran; got != "k2" {
		t.Fatalf("ran %s, want k2 once acme's limit is raised", got)
	}
	s.schedule("x1", 0, "x")
	if why, _ := s.waitReason("x1"); why != "waiting: 4 of 4 admission slots are taken" {
		t.Fatalf("why x1: %q", why)
	}
	for _, id := range []string{"k2", "k3", "o3", "o4"} {
		s.release(id, false)
	}
	if got := <-ran; got != "x1" {
		t.Fatalf("ran %s, want x1", got)
	}
	s.release("x1", false)
	stages.Wait()
	if active, queued := s.counts(); active != 0 || queued != 0 || len(s.byKey) != 0 {
		t.Fatalf("active %d queued %d by key %v", active, queued, s.byKey)
	}
}

// TestConcurrencyKeyAgent: the key travels from the input to the task
// and its TASK_CREATED; a key at its limit waits while another key's task
// runs, and says why.
func TestConcurrencyKeyAgent(t *testing.T) {
	gate := make(chan struct{})
	fm := newFakeModel(t, func(r *chatReq) reply { <-gate; return text("done") })
	fm.arrived = make(chan int, 8)
	h := newHarness(t, Options{Model: fm.client(t, nil), MaxActiveTasks: 3, DisableReflection: true,
		Concurrency: ConcurrencyLimits{Keys: map[string]int{"acme": 1}}})
	submit := func(key string) string {
		id, err := h.a.SubmitInput(testCtx(t), Input{Text: "hi", ConcurrencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a1 := submit("acme")
	<-fm.arrived
	a2 := submit("acme")
	b1 := submit("beta")
	<-fm.arrived // beta's call runs although acme's second waits
	if why, ok := h.a.AdmissionWait(a2); !ok || why != "waiting: key acme has 1 of 1 running" {
		t.Fatalf("why: %q %v", why, ok)
	}
	if _, ok := h.a.AdmissionWait(b1); ok {
		t.Fatal("beta's task is said to wait")
	}
	close(gate)
	for _, id := range []string{a1, a2, b1} {
		if task := h.wait(id); task.State != fsm.StateCompleted {
			t.Fatalf("%s: %s", id, task.State)
		}
	}
	task, _ := h.a.Task(a2)
	if task.ConcurrencyKey != "acme" {
		t.Fatalf("key %q", task.ConcurrencyKey)
	}
	created := 0
	for _, ev := range h.events(a2) {
		if b, ok := ev.Body.(*fsm.TaskCreatedBody); ok {
			if created++; b.ConcurrencyKey != "acme" {
				t.Fatalf("TASK_CREATED key %q", b.ConcurrencyKey)
			}
		}
	}
	if created != 1 {
		t.Fatalf("%d TASK_CREATED", created)
	}
	if _, err := h.a.SubmitInput(testCtx(t), Input{Text: "x", ConcurrencyKey: "a\nb"}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("bad key: %v", err)
	}
}
