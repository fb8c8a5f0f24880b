package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// batchSender posts batches of n tasks, agent tasks or broker tasks, each
// item's input (title) "B<worker>.<batch>.<item>", until the daemon dies
// or stop closes, and reports each acknowledged batch: its name and its
// task ids in order. Every attempt is a new batch (no retry).
func batchSender(url string, worker, n int, broker bool, acked chan<- ackedBatch, stop <-chan struct{}) {
	client := &http.Client{Timeout: 20 * time.Second}
	for b := 0; ; b++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("B%d.%d", worker, b)
		items := make([]string, n)
		for i := range items {
			if broker {
				items[i] = fmt.Sprintf(`{"title":"%s.%d"}`, name, i)
			} else {
				items[i] = fmt.Sprintf(`{"input":"%s.%d"}`, name, i)
			}
		}
		path := "/v1/tasks:batch"
		if broker {
			path = "/api/v1/tasks:batch"
		}
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(batchBody(items...)))
		req.Header.Set("X-Agent-ID", "producer")
		resp, err := client.Do(req)
		if err != nil {
			return // killed
		}
		var out struct {
			Tasks []struct {
				TaskID string `json:"task_id"`
			} `json:"tasks"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			continue
		}
		if err != nil || resp.StatusCode != 201 || len(out.Tasks) != n {
			return
		}
		ids := make([]string, n)
		for i, t := range out.Tasks {
			ids[i] = t.TaskID
		}
		acked <- ackedBatch{name: name, ids: ids}
	}
}

type ackedBatch struct {
	name string
	ids  []string
}

// TestBatchCrash kills pegasusd with SIGKILL while clients post batches
// of agent tasks and of broker tasks, several times, and checks the log:
// every acknowledged batch is there whole, with the ids it was answered
// with, and no batch is there in part.
func TestBatchCrash(t *testing.T) {
	_, rng := crashRun(t)
	bin := buildDaemon(t)
	data := filepath.Join(t.TempDir(), "data")
	const size, workers = 25, 4
	acked := map[string][]string{}
	for cycle := range 5 {
		p := startProc(t, bin, data)
		ch := make(chan ackedBatch)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() { defer wg.Done(); batchSender(p.url, cycle*10+w, size, w%2 == 1, ch, stop) }()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		killAfter := 1 + rng.IntN(8)
		timeout := time.After(testTimeout)
		for n := 0; n < killAfter; n++ {
			select {
			case b := <-ch:
				acked[b.name] = b.ids
			case <-done:
				t.Fatalf("the senders stopped after %d batches\n%s", n, p.output())
			case <-timeout:
				t.Fatalf("%d of %d batches within %v", n, killAfter, testTimeout)
			}
		}
		p.kill(t)
		close(stop)
	drain:
		for {
			select {
			case b := <-ch:
				acked[b.name] = b.ids
			case <-done:
				break drain
			}
		}
	}

	l, _ := openVerified(t, data)
	stored := map[string]map[int]string{} // batch -> item -> task id
	it := l.Scan(1, eventlog.Forward)
	defer it.Close()
	for it.Next() {
		ev := it.Event()
		if ev.Version != 1 || (ev.Type != string(fsm.MessageReceived) && ev.Type != string(fsm.DispatchCreated)) {
			continue
		}
		body, err := fsm.Decode(fsm.EventType(ev.Type), ev.Schema, ev.Body)
		if err != nil {
			t.Fatal(err)
		}
		var text string
		switch b := body.(type) {
		case *fsm.Input:
			text = b.Text
		case *fsm.DispatchCreatedBody:
			text = b.Title
		default:
			continue
		}
		var w, bn, i int
		if _, err := fmt.Sscanf(text, "B%d.%d.%d", &w, &bn, &i); err != nil {
			continue
		}
		name := fmt.Sprintf("B%d.%d", w, bn)
		if stored[name] == nil {
			stored[name] = map[int]string{}
		}
		if prev, dup := stored[name][i]; dup {
			t.Errorf("%s item %d stored twice: %s and %s", name, i, prev, ev.Stream)
		}
		stored[name][i] = ev.Stream
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	for name, ids := range acked {
		for i, id := range ids {
			if stored[name][i] != id {
				t.Errorf("acknowledged batch %s: item %d is %q in the log, answered %s", name, i, stored[name][i], id)
			}
		}
	}
	partial := 0
	for name, items := range stored {
		if len(items) != size {
			partial++
			t.Errorf("batch %s is in the log with %d of its %d tasks", name, len(items), size)
		}
	}
	if len(acked) == 0 {
		t.Fatal("no batch acknowledged")
	}
	t.Logf("%d batches acknowledged, %d in the log (%d stored but not acknowledged), %d partial",
		len(acked), len(stored), len(stored)-len(acked), partial)
}
