package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// TestBatchTokens: a batch carries the token of the single create it
// batches: the daemon's token, not the agent token of the worker routes.
func TestBatchTokens(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{} // path -> Authorization
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Get("Authorization")
		mu.Unlock()
		w.WriteHeader(201)
		if strings.HasSuffix(r.URL.Path, ":batch") {
			_, _ = w.Write([]byte(`{"tasks":[]}`))
		} else {
			_, _ = w.Write([]byte(`{}`))
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, &client.Options{Token: "daemon", AgentToken: "worker", AgentID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	_, err1 := c.Submit(ctx, api.CreateTask{Input: "x"})
	_, err2 := c.SubmitMany(ctx, []api.CreateTaskItem{{CreateTask: api.CreateTask{Input: "x"}}})
	_, err3 := c.CreateDispatch(ctx, api.CreateDispatch{Title: "x"})
	_, err4 := c.CreateMany(ctx, []api.CreateDispatchItem{{CreateDispatch: api.CreateDispatch{Title: "x"}}})
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/tasks", "/v1/tasks:batch", "/api/v1/tasks", "/api/v1/tasks:batch"} {
		if seen[path] != "Bearer daemon" {
			t.Errorf("%s sent %q, want the daemon's token as POST /api/v1/tasks does", path, seen[path])
		}
	}
}
