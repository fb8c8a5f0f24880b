package agent

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/fsm"
)

// begin starts a model call of task at attempt 1 in a record of its own.
func (h *deltaHub) begin(task string, cause ulid.ULID) *liveCall {
	c := &liveCall{}
	h.beginIn(c, task, cause)
	return c
}

// frames waits until sub has frames and renders them: "1:Hel" for text
// of attempt 1, "restart 2" for attempt_restarted.
func frames(t *testing.T, sub *DeltaSub) string {
	t.Helper()
	ctx := testCtx(t)
	for {
		select {
		case <-sub.Ready():
		case <-ctx.Done():
			t.Fatal("no frame arrived")
		}
		var out []string
		for _, f := range sub.Take() {
			if f.Restart {
				out = append(out, fmt.Sprintf("restart %d", f.Attempt))
			} else {
				out = append(out, fmt.Sprintf("%d:%s", f.Attempt, f.Text))
			}
		}
		if len(out) > 0 {
			return strings.Join(out, "|")
		}
	}
}

// TestDeltasStreamLiveAndRestartAfterABrokenAttempt: the text of a model
// call reaches a subscriber piece by piece, tagged with its attempt; the
// stream breaks, and the subscriber gets attempt_restarted before the new
// attempt's text; a subscriber that joins in the middle of the attempt
// first gets its text so far. The log holds what it held before
// streaming: the failed attempt, then the answer with its usage.
func TestDeltasStreamLiveAndRestartAfterABrokenAttempt(t *testing.T) {
	var mu sync.Mutex
	n := 0
	fake := newFakeModel(t, func(r *chatReq) reply {
		mu.Lock()
		defer mu.Unlock()
		if n++; n == 1 {
			return reply{pieces: []string{"Hel", "lo", " never"}, breakAfter: 2}
		}
		return reply{content: "Hello there", pieces: []string{"Hel", "lo", " there"}}
	})
	fake.gate = make(chan struct{})
	h := newHarness(t, Options{Model: fake.client(t, nil), DisableReflection: true})
	t.Cleanup(func() { close(fake.gate) }) // before the agent stops, after a failure
	id := h.submit("hi")
	first := h.a.SubscribeDeltas(id)
	defer first.Close()
	step := func(sub *DeltaSub, want string) {
		t.Helper()
		if got := frames(t, sub); got != want {
			t.Fatalf("frames %q, want %q", got, want)
		}
	}
	fake.gate <- struct{}{}
	step(first, "1:Hel")
	fake.gate <- struct{}{}
	step(first, "1:lo")
	fake.gate <- struct{}{}
	step(first, "restart 2") // the connection dropped after two pieces
	fake.gate <- struct{}{}
	step(first, "2:Hel")
	late := h.a.SubscribeDeltas(id)
	defer late.Close()
	step(late, "2:Hel") // the attempt so far
	fake.gate <- struct{}{}
	step(first, "2:lo")
	step(late, "2:lo")
	fake.gate <- struct{}{}
	step(first, "2: there")
	step(late, "2: there")

	task := h.wait(id)
	if task.Context.FinalResult != "Hello there" {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
	var called []string
	for _, ev := range h.events(id) {
		if b, ok := ev.Body.(*fsm.ModelCalledBody); ok {
			called = append(called, fmt.Sprintf("%d %q err=%v tokens=%d+%d", b.Attempt, b.Content, b.Error != "", b.PromptTokens, b.CompletionTokens))
		}
	}
	if want := []string{`1 "" err=true tokens=0+0`, `2 "Hello there" err=false tokens=10+2`}; fmt.Sprint(called) != fmt.Sprint(want) {
		t.Fatalf("MODEL_CALLED: %q, want %q", called, want)
	}
	// The call is in the log: a new subscriber gets nothing of it.
	after := h.a.SubscribeDeltas(id)
	defer after.Close()
	if fs := after.Take(); len(fs) != 0 {
		t.Fatalf("frames after the call: %+v", fs)
	}
}

// TestDeltasWithoutStreaming: a model that does not stream still runs
// the task, and its text reaches the subscribers whole.
func TestDeltasWithoutStreaming(t *testing.T) {
	requests := make(chan bool, 1)
	release := make(chan struct{})
	fake := newFakeModel(t, func(r *chatReq) reply { requests <- r.Stream; <-release; return text("all at once") })
	h := newHarness(t, Options{Model: fake.client(t, func(o *llm.Options) { o.NoStream = true }), DisableReflection: true})
	id := h.submit("hi")
	sub := h.a.SubscribeDeltas(id)
	defer sub.Close()
	if streamed := <-requests; streamed {
		t.Fatal("the request asked for a stream")
	}
	close(release)
	if got := frames(t, sub); got != "1:all at once" {
		t.Fatalf("frames %q", got)
	}
	if task := h.wait(id); task.Context.FinalResult != "all at once" {
		t.Fatalf("result = %q", task.Context.FinalResult)
	}
}

// TestDeltaHubForgetsWhatNobodyUses: pieces that wait in a subscriber
// are joined per attempt, never across a restart; a closed subscriber
// gets nothing more; the hub keeps no entry for a task once its call
// ended and its subscribers left.
func TestDeltaHubForgetsWhatNobodyUses(t *testing.T) {
	h := newDeltaHub()
	sub := h.subscribe("t1")
	c1, c2 := ulid.MustNew(1, nil), ulid.MustNew(2, nil)
	c := h.begin("t1", c1)
	c.write("a")
	c.write("b")
	c.restart(2, fmt.Errorf("dropped"))
	c.write("x")
	c.write("y")
	got := sub.Take()
	want := []DeltaFrame{{Call: c1.String(), Attempt: 1, Text: "ab"}, {Restart: true, Call: c1.String(), Attempt: 2, Error: "dropped"}, {Call: c1.String(), Attempt: 2, Text: "xy"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("frames %+v, want %+v", got, want)
	}
	sub.Close()
	c.write("z")
	if fs := sub.Take(); len(fs) != 0 {
		t.Fatalf("a closed subscriber got %+v", fs)
	}
	c.end()
	c.write("late") // after its end a call changes nothing
	if len(h.tasks) != 0 {
		t.Fatalf("the hub keeps %d entries", len(h.tasks))
	}
	// A new call replaces an old one that never ended; the old one's
	// pieces go nowhere.
	old := h.begin("t2", c1)
	cur := h.begin("t2", c2)
	s2 := h.subscribe("t2")
	old.write("stale")
	cur.write("fresh")
	if got := fmt.Sprint(s2.Take()); got != fmt.Sprint([]DeltaFrame{{Call: c2.String(), Attempt: 1, Text: "fresh"}}) {
		t.Fatalf("frames %s", got)
	}
	old.end()
	cur.end()
	s2.Close()
	if len(h.tasks) != 0 {
		t.Fatalf("the hub keeps %d entries", len(h.tasks))
	}
}
