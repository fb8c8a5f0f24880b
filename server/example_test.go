package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/server"
)

// An engine in a temporary directory with the offline demo model, the
// server in front of it, one task submitted over HTTP; then the stop, in
// order.
func Example() {
	dir, err := os.MkdirTemp("", "pegasus-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	e, err := engine.Start(ctx, &engine.Options{DataDir: dir})
	if err != nil {
		panic(err)
	}
	srv := server.New(server.Deps{Agent: e.Agent(), Store: e.Log(), View: e.View(), History: e.History(),
		Keys: e.Keys(), Broker: e.Broker(), Metrics: e.Metrics(), Model: e.ModelName(), Base: e.Context()}, nil)
	hs := httptest.NewServer(srv)

	resp, err := http.Post(hs.URL+"/v1/tasks", "application/json", strings.NewReader(`{"input":"what time is it?"}`))
	if err != nil {
		panic(err)
	}
	var created struct {
		TaskID string `json:"task_id"`
	}
	json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	fmt.Println(resp.Status, len(created.TaskID))

	// ?wait= holds the answer until the task settles.
	resp, err = http.Get(hs.URL + "/v1/tasks/" + created.TaskID + "?wait=30s")
	if err != nil {
		panic(err)
	}
	var task struct {
		State string `json:"state"`
	}
	json.NewDecoder(resp.Body).Decode(&task)
	resp.Body.Close()
	fmt.Println(task.State)

	srv.Drain()
	e.StopSchedules()
	e.Cancel()
	hs.Close()
	if err := e.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// 201 Created 26
	// completed
}
