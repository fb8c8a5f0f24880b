package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
)

// waitingAgent holds a long poll until its context ends, and says when
// it waits.
type waitingAgent struct {
	Agent
	waiting chan struct{}
}

func (a *waitingAgent) Task(id string) (fsm.Task, error) { return fsm.Task{ID: id}, nil }
func (a *waitingAgent) WaitUntil(ctx context.Context, id string, _ func(*fsm.Task) bool) (fsm.Task, error) {
	close(a.waiting)
	<-ctx.Done()
	return fsm.Task{}, ctx.Err()
}

// TestBaseEndsRequests: when Deps.Base ends, a long poll ends, served by
// any http.Server (here httptest's, without a BaseContext): a server in
// front of a stopping engine does not hold its stop.
func TestBaseEndsRequests(t *testing.T) {
	base, stop := context.WithCancel(context.Background())
	defer stop()
	a := &waitingAgent{waiting: make(chan struct{})}
	hs := httptest.NewServer(New(Deps{Agent: a, Store: &fakeStore{}, View: &fakeView{}, Base: base}, nil))
	defer hs.Close()
	done := make(chan int, 1)
	go func() {
		resp, err := http.Get(hs.URL + "/v1/tasks/01JABCDEFGHJKMNPQRSTVWXYZ0?wait=60s")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-a.waiting
	stop()
	select {
	case status := <-done:
		if status != http.StatusOK {
			t.Errorf("the long poll answered %d, want 200 with the task as it is", status)
		}
	case <-time.After(10 * time.Second): // a bound for the failure only
		t.Fatal("the long poll goes on after the base context ended")
	}
}

func (a *waitingAgent) Queued(string) bool { return false }
