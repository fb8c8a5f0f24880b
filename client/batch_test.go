package client_test

import (
	"errors"
	"testing"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/client"
)

// TestBatches: SubmitMany and CreateMany create every task of a batch in
// order, replay a keyed batch, and report a refused batch's items.
func TestBatches(t *testing.T) {
	ctx := testContext(t)
	c := newClient(t, &client.Options{AgentID: "batch-test"})
	key := unique("batch")
	items := []api.CreateTaskItem{
		{CreateTask: api.CreateTask{Input: "one"}, IdempotencyKey: key + "-1"},
		{CreateTask: api.CreateTask{Input: "two", Type: "explore"}},
	}
	created, err := c.SubmitMany(ctx, items)
	if err != nil || len(created) != 2 {
		t.Fatalf("SubmitMany: %+v, %v", created, err)
	}
	for i, want := range []string{"one", "two"} {
		if got, err := c.Get(ctx, created[i].TaskID); err != nil || got.Input != want {
			t.Fatalf("task %d: %+v, %v", i, got, err)
		}
	}
	again, err := c.SubmitMany(ctx, items[:1])
	if err != nil || again[0].TaskID != created[0].TaskID {
		t.Fatalf("a keyed batch sent again: %+v, %v; want %s", again, err, created[0].TaskID)
	}
	_, err = c.SubmitMany(ctx, []api.CreateTaskItem{{CreateTask: api.CreateTask{Input: "ok"}}, {CreateTask: api.CreateTask{Input: "x", Type: "nosuch"}}})
	var e *client.Error
	if !errors.Is(err, client.ErrBadRequest) || !errors.As(err, &e) || len(e.Items) != 1 || e.Items[0].Index != 1 {
		t.Fatalf("an invalid item: %v", err)
	}

	dk := unique("dispatch-batch")
	ds := []api.CreateDispatchItem{
		{CreateDispatch: api.CreateDispatch{Title: "a", RequiredCapabilities: []string{dk}}, IdempotencyKey: dk},
		{CreateDispatch: api.CreateDispatch{Title: "b", RequiredCapabilities: []string{dk}, Priority: 4}},
	}
	tasks, err := c.CreateMany(ctx, ds)
	if err != nil || len(tasks) != 2 || tasks[0].Title != "a" || tasks[1].Priority != 4 || tasks[0].Owner != "batch-test" {
		t.Fatalf("CreateMany: %+v, %v", tasks, err)
	}
	if again, err := c.CreateMany(ctx, ds[:1]); err != nil || again[0].TaskID != tasks[0].TaskID {
		t.Fatalf("a keyed batch sent again: %+v, %v", again, err)
	}
	_, err = c.CreateMany(ctx, []api.CreateDispatchItem{{CreateDispatch: api.CreateDispatch{Title: ""}}})
	if !errors.As(err, &e) || len(e.Items) != 1 || e.Items[0].Index != 0 {
		t.Fatalf("an invalid item: %v", err)
	}
}
