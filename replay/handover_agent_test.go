package replay_test

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"github.com/pegasus-engine/pegasus/agent"
	"github.com/pegasus-engine/pegasus/agent/llm"
	"github.com/pegasus-engine/pegasus/agent/tools"
	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

// callOnce asks for tool "echo" when a task starts and answers with its
// result; a task whose input says "answer" is answered at once, with no
// tool and empty lists.
type callOnce struct{}

func (callOnce) Name() string { return "once" }
func (callOnce) Complete(_ context.Context, req llm.Request, report func(llm.Attempt)) (llm.Response, error) {
	r := llm.Response{Model: "once", ToolCalls: []fsm.ToolCall{{ID: "c1", Name: "echo", Arguments: `{"text":"hi"}`}},
		Usage: llm.Usage{PromptTokens: 12, CompletionTokens: 3}}
	switch last := req.Messages[len(req.Messages)-1]; {
	case last.Role == "tool":
		r = llm.Response{Model: "once", Content: "echoed: " + last.Content}
	case last.Content == "answer":
		r = llm.Response{Model: "once", Content: "answered", ToolCalls: []fsm.ToolCall{}}
	}
	report(llm.Attempt{Number: 1, Model: "once", Status: 200, Response: &r})
	return r, nil
}

// TestHandoverEqualsDecoding runs the agent, which hands the live View the
// bodies of its stage outcomes (View.Expect), and checks that each body
// the fold took instead of decoding the log equals what decoding the
// log's bytes gives; then that the live View equals a fold of the log
// from zero.
func TestHandoverEqualsDecoding(t *testing.T) {
	var (
		mu       sync.Mutex
		taken    int
		types    = map[string]int{}
		mismatch []string
	)
	defer replay.CheckHandovers(func(ev eventlog.Event, body fsm.Body) {
		fe, err := replay.Decode(ev)
		mu.Lock()
		defer mu.Unlock()
		taken++
		types[ev.Type]++
		if err != nil || !reflect.DeepEqual(fe.Body, body) {
			mismatch = append(mismatch, ev.Type)
			t.Errorf("%s (seq %d): handed over %#v, decoded %#v (err %v)", ev.Type, ev.Seq, body, fe.Body, err)
		}
	})()

	l, err := eventlog.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	echo := tools.Func("echo", "echoes text", nil, func(_ context.Context, c tools.Call) (string, error) {
		return string(c.Arguments), nil
	})
	a, err := agent.New(l, agent.Options{Model: callOnce{}, Tools: []tools.Tool{echo}, DisableReflection: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		text := "echo hi"
		if i%2 == 1 {
			text = "answer"
		}
		if ids[i], err = a.Submit(ctx, text, "test", ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if task, err := a.WaitForTask(ctx, id); err != nil || task.State != fsm.StateCompleted {
			t.Fatalf("task %s: %v %s", id, err, task.State)
		}
	}
	live := a.View()
	if err := live.WaitFor(ctx, l.Head()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("bodies handed over and taken: %d of %d events (%v)", taken, l.Head(), types)
	if taken < n {
		t.Errorf("the fold took %d handed-over bodies for %d tasks (%v); want one at least per task", taken, n, types)
	}
	mu.Unlock()

	// The live View, partly folded from handed-over bodies, equals a
	// fold of the log that decodes every body.
	ref, err := replay.NewView(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replay.Fold(ctx, ref, replay.Live(l), replay.FoldOptions{Bound: replay.AtSeq(l.Head())}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		var tasks [2]fsm.Task
		var enc [2][]byte
		for i, v := range []*replay.View{live, ref} {
			if tasks[i], err = v.Task(id); err != nil {
				t.Fatal(err)
			}
			enc[i] = fsm.AppendTask(nil, &tasks[i])
		}
		if string(enc[0]) != string(enc[1]) || !reflect.DeepEqual(tasks[0], tasks[1]) {
			t.Errorf("task %s: the live View's task differs from a fold of the log:\n%+v\n%+v", id, tasks[0], tasks[1])
		}
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
