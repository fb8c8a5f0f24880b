package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/server"
)

// TestBatchClustered: with --cluster, a single create and a batch, whose
// first tasks take the free admission slots in their input's commit,
// run to completion, and the stopped node's copy verifies.
func TestBatchClustered(t *testing.T) {
	bin := buildDaemon(t)
	n := natstest.Start(t, 1)
	data := filepath.Join(t.TempDir(), "d")
	p := startProc(t, bin, data, "--cluster", n.URL(), "--cluster-node", "a")
	waitLeases(t, n.JetStream(), "a", 16)
	client := &http.Client{Timeout: 70 * time.Second, Transport: bearer(p.token)}
	post := func(path, body string, out any) {
		t.Helper()
		resp, err := client.Post(p.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	var one server.CreatedJSON
	post("/v1/tasks", `{"input":"what time is it?"}`, &one)
	var items []string
	for i := range 12 {
		items = append(items, `{"input":"task `+strconv.Itoa(i)+`"}`)
	}
	var batch struct {
		Tasks []server.CreatedJSON `json:"tasks"`
	}
	post("/v1/tasks:batch", batchBody(items...), &batch)
	acked := map[string]bool{one.TaskID: true}
	for _, c := range batch.Tasks {
		acked[c.TaskID] = true
	}
	finishAll(t, p, acked)
	for id := range acked {
		if tj, _, err := waitTask(client, p.url, id); err != nil || tj.State != "completed" {
			t.Fatalf("task %s: %s %v", id, tj.State, err)
		}
	}
	p.stop(t)
	openVerified(t, data)
}
