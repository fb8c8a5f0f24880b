package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

// fakeDaemon serves GET /v1/events and /v1/events/stream the way pegasusd
// does (server/events.go): events in their one JSON form, written by
// the same encoder (replay.NewEventJSON), SSE ids that are sequences,
// resumption with Last-Event-ID.
type fakeDaemon struct {
	evs   []eventlog.Event
	token string
	// dropAfter closes each stream connection after that many events (0:
	// keep it open until the client leaves).
	dropAfter int

	mu      sync.Mutex
	resumes []string // the Last-Event-ID of each stream connection
	// connected, if set, receives the Last-Event-ID of each stream
	// connection once the stream is open.
	connected chan string
}

func (d *fakeDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.token != "" && r.Header.Get("Authorization") != "Bearer "+d.token {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"code":"unauthorized","message":"missing or wrong bearer token"}}`)
		return
	}
	after, _ := strconv.ParseUint(r.URL.Query().Get("after_seq"), 10, 64)
	switch r.URL.Path {
	case "/v1/events":
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		out := []replay.EventJSON{}
		for _, ev := range d.evs {
			if ev.Seq > after && len(out) < limit {
				out = append(out, replay.NewEventJSON(ev))
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"events": out, "head": d.evs[len(d.evs)-1].Seq})
	case "/v1/events/stream":
		if id := r.Header.Get("Last-Event-ID"); id != "" {
			after, _ = strconv.ParseUint(id, 10, 64)
		}
		d.mu.Lock()
		d.resumes = append(d.resumes, r.Header.Get("Last-Event-ID"))
		d.mu.Unlock()
		only := r.URL.Query().Get("stream")
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 2000\n\n: ping\n\n")
		w.(http.Flusher).Flush()
		if d.connected != nil {
			d.connected <- r.Header.Get("Last-Event-ID")
		}
		sent := 0
		for _, ev := range d.evs {
			if ev.Seq <= after || (only != "" && ev.Stream != only) {
				continue
			}
			if d.dropAfter > 0 && sent == d.dropAfter {
				return // the connection drops
			}
			data, _ := replay.MarshalEvent(ev)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, data)
			w.(http.Flusher).Flush()
			sent++
		}
		<-r.Context().Done() // live: nothing more yet
	default:
		http.NotFound(w, r)
	}
}

func newFakeDaemon(t *testing.T, d *fakeDaemon) string {
	if d.evs == nil {
		d.evs, _ = genHistory(t)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestServerSource: events fetched from a daemon fold to exactly what the
// export of the same log folds to.
func TestServerSource(t *testing.T) {
	f := loadFixtures(t)
	url := newFakeDaemon(t, &fakeDaemon{token: "s3cret"})
	for _, args := range [][]string{
		{"tasks", "--json"}, {"stats", "--json"}, {"show", "{R}", "--json"}, {"why", "{F}", "--json"},
		{"state", "{S}", "--at", "7", "--json"},
	} {
		want := runCLI(t, termOpts{}, f.expand(append([]string{"-f", "testdata/history.ndjson"}, args...))...)
		got := runCLI(t, termOpts{}, f.expand(append([]string{"--server", url, "--token", "s3cret"}, args...))...)
		if got.code != 0 || got.stdout != want.stdout {
			t.Errorf("%v over --server: exit %d %s; output equal: %v", args, got.code, got.stderr, got.stdout == want.stdout)
		}
	}
	if r := runCLI(t, termOpts{}, "--server", url, "--token", "s3cret", "verify"); r.code != 0 || !strings.Contains(r.stdout, "pegasusd at") {
		t.Errorf("verify over --server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Setenv("PEGASUS_TOKEN", "s3cret")
	if r := runCLI(t, termOpts{}, "--server", url, "tasks"); r.code != 0 {
		t.Errorf("PEGASUS_TOKEN: exit %d %s", r.code, r.stderr)
	}
	r := runCLI(t, termOpts{}, "--server", url, "--token", "wrong", "tasks")
	if r.code != exitSource || !strings.Contains(r.stderr, "--token") || !strings.Contains(r.stderr, "unauthorized") {
		t.Errorf("wrong token: exit %d %q", r.code, r.stderr)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	if r := runCLI(t, termOpts{}, "--server", deadURL, "tasks"); r.code != exitSource || !strings.Contains(r.stderr, "cannot reach pegasusd") {
		t.Errorf("no daemon: exit %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, termOpts{}, "--server", "http://", "tasks"); r.code != exitUsage {
		t.Errorf("bad URL: exit %d %q", r.code, r.stderr)
	}
}

// runTail runs tail in-process with no reconnect delay.
func runTail(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb strings.Builder
	std := &stdio{in: strings.NewReader(""), out: &out, err: &errb, getenv: func(string) string { return "" },
		now: func() time.Time { return goldenNow }, width: func() int { return 0 },
		retryWait: func(int) time.Duration { return 0 }}
	code := run(context.Background(), std, append([]string{"pegasus-replay"}, args...))
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// TestTailResumes: when the stream drops, tail reconnects with
// Last-Event-ID set to the last sequence it saw, so every event is printed
// once, in order.
func TestTailResumes(t *testing.T) {
	d := &fakeDaemon{dropAfter: 10}
	url := newFakeDaemon(t, d)
	r := runTail(t, "--server", url, "tail", "--from-start", "--count", "43", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 43 {
		t.Fatalf("%d events printed, want 43:\n%s", len(lines), r.stdout)
	}
	for i, line := range lines {
		ev, err := replay.ParseEvent([]byte(line))
		if err != nil || ev.Seq != uint64(i+1) {
			t.Fatalf("line %d: seq %d (%v), want %d", i, ev.Seq, err, i+1)
		}
	}
	want := []string{"0", "10", "20", "30", "40"}
	if fmt.Sprint(d.resumes) != fmt.Sprint(want) {
		t.Errorf("Last-Event-ID per connection = %v, want %v", d.resumes, want)
	}
	if n := strings.Count(r.stderr, "reconnecting"); n != 4 {
		t.Errorf("%d reconnect notices on stderr, want 4:\n%s", n, r.stderr)
	}

	// One task, human output, from a point.
	f := loadFixtures(t)
	r = runTail(t, "--server", url, "tail", "--after", "30", "--task", f.ids.failed, "--count", "3")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 3 || !strings.Contains(r.stdout, "TASK_CREATED") ||
		!strings.Contains(r.stdout, "31 ") || !strings.Contains(r.stdout, `tool_calls=[memory_read notify]`) {
		t.Errorf("tail --task --after 30 --count 3: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// --no-reconnect ends with the stream.
	r = runTail(t, "--server", url, "tail", "--from-start", "--no-reconnect")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 10 {
		t.Errorf("--no-reconnect: exit %d, %d lines", r.code, strings.Count(r.stdout, "\n"))
	}
	if r := runTail(t, "-d", f.history, "tail"); r.code != exitUsage {
		t.Errorf("tail without --server: exit %d", r.code)
	}
}

// TestTailFromNow: without --after, tail starts after the current head.
func TestTailFromNow(t *testing.T) {
	d := &fakeDaemon{connected: make(chan string, 1)}
	url := newFakeDaemon(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result)
	go func() {
		var out, errb strings.Builder
		std := &stdio{in: strings.NewReader(""), out: &out, err: &errb, getenv: func(string) string { return "" },
			now: time.Now, width: func() int { return 0 }}
		code := run(ctx, std, []string{"pegasus-replay", "--server", url, "tail"})
		done <- result{stdout: out.String(), stderr: errb.String(), code: code}
	}()
	// Once the stream is open (every recorded event is behind it), stop
	// tail as Ctrl-C would.
	var resume string
	select {
	case resume = <-d.connected:
	case r := <-done:
		t.Fatalf("tail ended early: %d %s", r.code, r.stderr)
	}
	cancel()
	r := <-done
	if r.code != 0 || r.stdout != "" || resume != "43" {
		t.Errorf("tail from now: exit %d, printed %q, Last-Event-ID %q (want 43)", r.code, r.stdout, resume)
	}
}

// TestCLIEventsAreTheStoredEvents: what the CLI prints for an event (tail
// --json, the steps of show --json, export) is the one JSON form, and reads
// back as the stored event, byte for byte: tail --json output is a source
// for --file and an input for fork --inject. Bodies that do not decode and
// $system bodies included.
func TestCLIEventsAreTheStoredEvents(t *testing.T) {
	good, _ := genHistory(t)
	for _, evs := range [][]eventlog.Event{good, genCorrupt(t), replaytest.Oddities()} {
		url := newFakeDaemon(t, &fakeDaemon{evs: evs})
		tail := runTail(t, "--server", url, "tail", "--from-start", "--count", strconv.Itoa(len(evs)), "--json")
		lines := strings.Split(strings.TrimSpace(tail.stdout), "\n")
		if tail.code != 0 || len(lines) != len(evs) {
			t.Fatalf("tail: exit %d, %d lines: %s", tail.code, len(lines), tail.stderr)
		}
		for i, ev := range evs {
			want, _ := replay.MarshalEvent(ev)
			if lines[i] != string(want) {
				t.Errorf("tail --json seq %d:\n got %s\nwant %s", ev.Seq, lines[i], want)
			}
			got, err := replay.ParseEvent([]byte(lines[i]))
			if err != nil || !reflect.DeepEqual(got, replaytest.Stored(ev)) {
				t.Errorf("seq %d: %v\n got %+v\nwant %+v", ev.Seq, err, got, replaytest.Stored(ev))
			}
		}
		// tail's output, without an export header, is a source.
		want := runCLI(t, termOpts{}, "--server", url, "tasks", "--json")
		got := runCLI(t, termOpts{stdin: tail.stdout}, "-f", "-", "tasks", "--json")
		if got.code != 0 || got.stdout != want.stdout {
			t.Errorf("tail --json | --file -: exit %d %s\n%s\nwant\n%s", got.code, got.stderr, got.stdout, want.stdout)
		}
		// The steps of show --json carry the form, with the timeline's fields.
		task := ""
		for _, ev := range evs {
			if ev.Type == "TASK_CREATED" {
				task = ev.Stream
			}
		}
		show := runCLI(t, termOpts{}, "--server", url, "show", task, "--json")
		var tl struct {
			Steps []json.RawMessage `json:"steps"`
		}
		if err := json.Unmarshal([]byte(show.stdout), &tl); err != nil || len(tl.Steps) == 0 {
			t.Fatalf("show --json: %v %s", err, show.stderr)
		}
		for _, raw := range tl.Steps {
			got, err := replay.ParseEvent(raw)
			if err != nil {
				t.Fatal(err)
			}
			if want := replaytest.Stored(evs[got.Seq-1]); !reflect.DeepEqual(got, want) {
				t.Errorf("show --json seq %d:\n got %+v\nwant %+v", got.Seq, got, want)
			}
		}
	}
}
