package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/api"
	"github.com/pegasus-engine/pegasus/server"
)

// batchBody is {"tasks": [items...]}.
func batchBody(items ...string) string { return `{"tasks":[` + strings.Join(items, ",") + `]}` }

// TestBatchCreate: POST /v1/tasks:batch creates every task, answers in
// order, refuses an invalid batch as a whole with per-item errors, and a
// batch sent again with its keys creates nothing twice, also when some
// of its items were created by an earlier request, across a restart.
func TestBatchCreate(t *testing.T) {
	cfg := testConfig(t)
	cfg.server.MaxBodyBytes = 1 << 20
	td := startDaemon(t, cfg)

	var created struct {
		Tasks []server.CreatedJSON `json:"tasks"`
	}
	r := td.do("POST", "/v1/tasks:batch", batchBody(`{"input":"one"}`, `{"input":"two","type":"explore","concurrency_key":"k"}`, `{"input":"three"}`))
	if r.status != 201 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	r.json(t, &created)
	if len(created.Tasks) != 3 {
		t.Fatalf("answer %s", r.body)
	}
	for i, want := range []string{"one", "two", "three"} {
		tj := td.waitTask(created.Tasks[i].TaskID)
		if tj.Input != want {
			t.Fatalf("tasks[%d] is %q, want %q", i, tj.Input, want)
		}
	}
	if tj := td.waitTask(created.Tasks[1].TaskID); tj.Type != "explore" || tj.ConcurrencyKey != "k" {
		t.Fatalf("tasks[1] = %+v", tj)
	}

	// Invalid items: nothing is created, each is named by its index.
	before := td.taskCount()
	for _, c := range []struct {
		body    string
		status  int
		indexes []int
	}{
		{batchBody(`{"input":"ok"}`, `{"nput":"typo"}`, `{"input":"ok"}`, `{"source":"no input"}`), 400, []int{1, 3}},
		{batchBody(`{"input":"ok"}`, `{"input":"x","type":"nosuch"}`), 400, []int{1}},
		{batchBody(`{"input":"a","idempotency_key":"dup"}`, `{"input":"b","idempotency_key":"dup"}`), 400, []int{1}},
		{batchBody(`{"input":"a","priority":99999999}`), 400, []int{0}},
	} {
		r := td.do("POST", "/v1/tasks:batch", c.body)
		var be api.ErrorBody
		r.json(t, &be)
		var got []int
		for _, it := range be.Error.Items {
			got = append(got, it.Index)
			if it.Code == "" || it.Message == "" {
				t.Fatalf("%s: item without code or message: %s", c.body, r.body)
			}
		}
		if r.status != c.status || fmt.Sprint(got) != fmt.Sprint(c.indexes) {
			t.Fatalf("%s: %d %s, want %d with items %v", c.body, r.status, r.body, c.status, c.indexes)
		}
	}
	for _, c := range []struct{ body, code string }{
		{`{}`, api.CodeBadRequest},
		{`{"tasks":[]}`, api.CodeBadRequest},
		{`{"tasks":{}}`, api.CodeBadRequest},
		{batchBody(strings.Repeat(`{"input":""},`, 1000) + `{"input":""}`), api.CodeTooLarge},
	} {
		if r := td.do("POST", "/v1/tasks:batch", c.body); r.errorCode(t) != c.code {
			t.Fatalf("%.80s: %d %s, want %s", c.body, r.status, r.body, c.code)
		}
	}
	if r := td.do("POST", "/v1/tasks:batch", batchBody(`{"input":"a"}`), "Idempotency-Key", "k"); r.status != 400 {
		t.Fatalf("a batch with the header: %d %s", r.status, r.body)
	}
	if n := td.taskCount(); n != before {
		t.Fatalf("refused batches created %d tasks", n-before)
	}

	// Keys: one item made alone first, then the batch with it and a new
	// one, then the batch again.
	first := td.keyedTask(keyedCall{method: "POST", path: "/v1/tasks", body: `{"input":"k1"}`, key: "b-1", status: 201})
	keyedBatch := batchBody(`{"input":"k1","idempotency_key":"b-1"}`, `{"input":"k2","idempotency_key":"b-2"}`, `{"input":"free"}`)
	r = td.do("POST", "/v1/tasks:batch", keyedBatch)
	r.json(t, &created)
	if r.status != 201 || created.Tasks[0].TaskID != first || r.header.Get(api.HeaderReplayed) != "" {
		t.Fatalf("keyed batch: %d %s (first %s)", r.status, r.body, first)
	}
	second := created.Tasks[1].TaskID
	count := td.taskCount()
	again := batchBody(`{"input":"k1","idempotency_key":"b-1"}`, `{"input":"k2","idempotency_key":"b-2"}`)
	for round := range 2 {
		r = td.do("POST", "/v1/tasks:batch", again)
		r.json(t, &created)
		if r.status != 201 || created.Tasks[0].TaskID != first || created.Tasks[1].TaskID != second || r.header.Get(api.HeaderReplayed) != "true" {
			t.Fatalf("round %d: retried batch: %d %s %v", round, r.status, r.body, r.header)
		}
		if n := td.taskCount(); n != count {
			t.Fatalf("round %d: the retry created %d tasks", round, n-count)
		}
		for _, id := range []string{first, second} {
			if n := td.inputs(id); n != 1 {
				t.Fatalf("task %s has %d inputs", id, n)
			}
		}
		td = td.restart(cfg)
	}
	// A key with another input: 409, naming the key, nothing created.
	r = td.do("POST", "/v1/tasks:batch", batchBody(`{"input":"new"}`, `{"input":"other","idempotency_key":"b-2"}`))
	var be api.ErrorBody
	r.json(t, &be)
	if r.status != 409 || be.Error.Code != api.CodeKeyReused || len(be.Error.Items) != 1 || be.Error.Items[0].Index != 1 ||
		!strings.Contains(be.Error.Items[0].Message, "b-2") {
		t.Fatalf("reused key: %d %s", r.status, r.body)
	}
	if n := td.taskCount(); n != count {
		t.Fatalf("a refused batch created %d tasks", n-count)
	}
}

// TestBrokerBatchCreate: POST /api/v1/tasks:batch answers the single
// create's tasks in order, refuses invalid items with their index, and
// replays a keyed batch.
func TestBrokerBatchCreate(t *testing.T) {
	cfg := testConfig(t)
	cfg.server.MaxBodyBytes = 1 << 20
	td := startDaemon(t, cfg)
	var out struct {
		Tasks []server.DispatchJSON `json:"tasks"`
	}
	body := batchBody(`{"title":"a","idempotency_key":"x-1"}`, `{"title":"b","priority":3,"max_retries":0,"metadata":{"n":1}}`, `{"title":"c","idempotency_key":"x-3"}`)
	r := td.as("producer", "POST", "/api/v1/tasks:batch", body)
	if r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r.json(t, &out)
	if len(out.Tasks) != 3 || out.Tasks[0].Title != "a" || out.Tasks[1].Priority != 3 || out.Tasks[1].MaxRetries != 0 ||
		string(out.Tasks[1].Metadata["n"]) != "1" || out.Tasks[2].Owner != "producer" || out.Tasks[0].Status != "pending" {
		t.Fatalf("answer %s", r.body)
	}
	ids := []string{out.Tasks[0].TaskID, out.Tasks[2].TaskID}
	list := func() int { return len(td.dispatchTasks("producer", "")) }
	n := list()
	if n != 3 {
		t.Fatalf("%d tasks listed", n)
	}
	again := batchBody(`{"title":"a","idempotency_key":"x-1"}`, `{"title":"c","idempotency_key":"x-3"}`)
	r = td.as("producer", "POST", "/api/v1/tasks:batch", again)
	r.json(t, &out)
	if r.status != 201 || out.Tasks[0].TaskID != ids[0] || out.Tasks[1].TaskID != ids[1] || r.header.Get(api.HeaderReplayed) != "true" || list() != 3 {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	r = td.as("producer", "POST", "/api/v1/tasks:batch", batchBody(`{"title":"ok"}`, `{"title":""}`, `{"title":"t","timeout_seconds":0}`, `{"title":"p","parent_task_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`))
	var be api.ErrorBody
	r.json(t, &be)
	if r.status != 400 || len(be.Error.Items) != 3 || be.Error.Items[0].Index != 1 || be.Error.Items[2].Index != 3 || list() != 3 {
		t.Fatalf("invalid items: %d %s", r.status, r.body)
	}
	if r := td.do("POST", "/api/v1/tasks:batch", again); r.status != 400 {
		t.Fatalf("without X-Agent-ID: %d %s", r.status, r.body)
	}
}
