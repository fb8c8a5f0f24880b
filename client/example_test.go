package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/client"
)

// Submit a task to the agent and wait for its result. The idempotency
// key makes the submission safe to send again: a retry, even from
// another process after a crash, answers with the same task.
func ExampleClient_Submit() {
	ctx := context.Background()
	c, err := client.New(server, nil) // server: "http://127.0.0.1:7070"
	if err != nil {
		log.Fatal(err)
	}
	created, err := c.Submit(ctx, api.CreateTask{Input: "what time is it?"}, client.WithIdempotencyKey("example-submit-1"))
	if err != nil {
		log.Fatal(err)
	}
	again, err := c.Submit(ctx, api.CreateTask{Input: "what time is it?"}, client.WithIdempotencyKey("example-submit-1"))
	if err != nil {
		log.Fatal(err)
	}
	t, err := c.Wait(ctx, created.TaskID) // until finished or suspended
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.TaskID == created.TaskID, t.State)
	// Output: true completed
}

// Create many tasks in one request: all are committed together, or none.
// Each item may carry its own idempotency key; an invalid item refuses the
// batch, and the error names it by its index.
func ExampleClient_SubmitMany() {
	ctx := context.Background()
	c, err := client.New(server, nil)
	if err != nil {
		log.Fatal(err)
	}
	batch := []api.CreateTaskItem{
		{CreateTask: api.CreateTask{Input: "hello"}, IdempotencyKey: "example-batch-1"},
		{CreateTask: api.CreateTask{Input: "what time is it?", Type: "explore"}, IdempotencyKey: "example-batch-2"},
	}
	created, err := c.SubmitMany(ctx, batch) // one request, one synced commit
	if err != nil {
		log.Fatal(err)
	}
	again, err := c.SubmitMany(ctx, batch) // the same keys: the same tasks
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.SubmitMany(ctx, []api.CreateTaskItem{{CreateTask: api.CreateTask{Input: "ok"}}, {CreateTask: api.CreateTask{Type: "nosuch"}}})
	var e *client.Error
	if errors.As(err, &e) { // nothing was created
		fmt.Println(len(created), again[1].TaskID == created[1].TaskID, e.Code, e.Items[0].Index)
	}
	// Output: 2 true bad_request 1
}

// Errors of the server are *client.Error values, which errors.Is matches
// with the sentinels by their code.
func ExampleError() {
	c, err := client.New(server, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Get(context.Background(), "01M80RCFV3281HRSKQBDEXQ000")
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code, errors.Is(err, client.ErrNotFound))
	}
	// Output: 404 not_found true
}

// A worker for the Dispatch broker: it registers the capability "resize",
// runs up to two tasks at once, and completes each with its handler's
// result. The client waits for the completion on the task's event stream.
func ExampleWorker() {
	ctx, stop := context.WithCancel(context.Background())
	worker, err := client.New(server, &client.Options{AgentID: "resizer"})
	if err != nil {
		log.Fatal(err)
	}
	w, err := client.NewWorker(worker, &client.WorkerOptions{Capabilities: []string{"resize"}, MaxTasks: 2})
	if err != nil {
		log.Fatal(err)
	}
	stopped := make(chan error)
	go func() {
		stopped <- w.Run(ctx, client.HandlerFunc(func(ctx context.Context, t *client.Task) (any, error) {
			if err := t.Progress(ctx, "resizing "+t.Title); err != nil {
				return nil, err
			}
			return map[string]int{"width": 640}, nil
		}))
	}()

	c, err := client.New(server, &client.Options{AgentID: "shop"})
	if err != nil {
		log.Fatal(err)
	}
	head, err := c.Events(ctx, 0, 1)
	if err != nil {
		log.Fatal(err)
	}
	t, err := c.CreateDispatch(ctx, api.CreateDispatch{Title: "cat.png", RequiredCapabilities: []string{"resize"}})
	if err != nil {
		log.Fatal(err)
	}
	sub := c.Subscribe(client.StreamOptions{AfterSeq: head.Head, Stream: t.TaskID})
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Type)
		if ev.Type == "DISPATCH_COMPLETED" {
			break
		}
	}
	done, err := c.GetDispatch(ctx, t.TaskID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Status, done.AssignedAgent, string(done.Result))
	stop() // the worker drains: it takes nothing new and waits for its handlers
	fmt.Println(<-stopped)
	// Output:
	// DISPATCH_CREATED
	// DISPATCH_ASSIGNED
	// DISPATCH_STARTED
	// DISPATCH_PROGRESS
	// DISPATCH_COMPLETED
	// completed resizer {"width":640}
	// <nil>
}
