package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// TestOneEventForm: an event comes out of every producer of the daemon
// (GET /v1/events, GET /v1/tasks/{id}/events, the event stream) and of an
// export in the same bytes, the one encoder's (replay.MarshalEvent), and
// every parser (replay.ParseEvent: --server, --file, tail; replay.ParseDraft:
// fork --inject) gives back the stored event with its stored bytes. The log
// holds events that stress the form (replaytest.Oddities: bodies that do
// not decode, unknown types, $system and memory bodies, HTML and non-ASCII
// text, metadata) beside what the daemon writes itself.
func TestOneEventForm(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	if err := os.MkdirAll(cfg.engine.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := eventlog.Open(cfg.engine.DataDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := replaytest.AppendAll(ctx, l, replaytest.Oddities(), 0); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	td := startDaemon(t, cfg)
	td.waitTask(td.submit("hello <there> & more"))

	// Every producer, as served.
	served := map[string][]json.RawMessage{}
	var page struct {
		Events []json.RawMessage `json:"events"`
		Head   uint64            `json:"head"`
	}
	td.do("GET", "/v1/events?limit=1000", "").json(t, &page)
	served["GET /v1/events"] = page.Events
	var task struct {
		Events []json.RawMessage `json:"events"`
	}
	var created struct {
		ID string `json:"id"`
	}
	json.Unmarshal(page.Events[1], &created) // the odd task's input: its id is the task's
	td.do("GET", "/v1/tasks/"+created.ID+"/events", "").json(t, &task)
	served["GET /v1/tasks/{id}/events"] = task.Events
	served["GET /v1/events/stream"] = readStream(t, td.url, len(page.Events))
	td.stop()

	// The stored events, and an export of them.
	l, err = eventlog.Open(cfg.engine.DataDir, &eventlog.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bySeq := map[uint64]eventlog.Event{}
	byID := map[string]eventlog.Event{}
	it := l.Scan(1, eventlog.Forward)
	for it.Next() {
		ev := it.Event()
		bySeq[ev.Seq] = ev
		byID[ev.ID.String()] = ev
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := replay.Export(ctx, replay.FromLog(l), &buf, replay.ExportFilter{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n")[1:] {
		served["export"] = append(served["export"], json.RawMessage(line))
	}
	if len(served["export"]) != len(bySeq) || len(page.Events) < len(replaytest.Oddities())+5 || len(task.Events) < 3 {
		t.Fatalf("%d exported, %d stored, %d served, %d of the task", len(served["export"]), len(bySeq), len(page.Events), len(task.Events))
	}

	for producer, evs := range served {
		for i, raw := range evs {
			var env struct {
				Seq uint64 `json:"seq"`
			}
			json.Unmarshal(raw, &env)
			want, ok := bySeq[env.Seq]
			if !ok {
				t.Fatalf("%s #%d: no stored event at seq %d", producer, i, env.Seq)
			}
			encoded, _ := replay.MarshalEvent(want)
			if !bytes.Equal(raw, encoded) {
				t.Errorf("%s seq %d: not the one encoder's bytes:\n got %s\nwant %s", producer, env.Seq, raw, encoded)
			}
			got, err := replay.ParseEvent(raw)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s seq %d: ParseEvent gives %+v, %v\nstored %+v", producer, env.Seq, got, err, want)
			}
			draft, err := replay.ParseDraft(raw)
			if err != nil || draft.ID != want.ID || draft.Type != want.Type || draft.Schema != want.Schema ||
				!bytes.Equal(draft.Body, want.Body) || !draft.Time.Equal(want.Time) {
				t.Errorf("%s seq %d: ParseDraft gives %+v, %v\nstored %+v", producer, env.Seq, draft, err, want)
			}
		}
	}
	m, _, err := replay.ReadExport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range m.All() {
		if !reflect.DeepEqual(ev, bySeq[ev.Seq]) {
			t.Errorf("--file seq %d: %+v\nstored %+v", ev.Seq, ev, bySeq[ev.Seq])
		}
	}
}

// readStream reads n events from the start of the event stream and returns
// their data.
func readStream(t *testing.T, url string, n int) []json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/v1/events/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var out []json.RawMessage
	for len(out) < n {
		out = append(out, json.RawMessage(readSSE(t, br).data))
	}
	return out
}
