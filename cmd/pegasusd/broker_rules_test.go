package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// rawFields decodes a JSON object into its fields' JSON texts, so that a
// test compares what the API wrote, whatever the Go types say.
func rawFields(t *testing.T, r response) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	r.json(t, &m)
	return m
}

// compactJSON returns the compact form of a JSON text.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return b.String()
}

// TestBrokerMetadataAnyJSON: broker task metadata takes any JSON value,
// given back as given by the create, a get, a list and a patch; a patch
// with null or "" deletes a key, and a string stays a string even when it
// reads like a number.
func TestBrokerMetadataAnyJSON(t *testing.T) {
	td := brokerDaemon(t)
	r := td.as("c", "POST", "/api/v1/tasks", `{"title":"typed","metadata":{"n":5,"s":"5","o":{"a":[1,true,null]},"f":1.50,"b":false,"gone":"x"}}`)
	mustStatus(t, r, 201)
	const want = `{"b":false,"f":1.50,"gone":"x","n":5,"o":{"a":[1,true,null]},"s":"5"}`
	if got := compactJSON(t, string(rawFields(t, r)["metadata"])); got != want {
		t.Fatalf("created: metadata %s, want %s", got, want)
	}
	var id string
	if err := json.Unmarshal(rawFields(t, r)["task_id"], &id); err != nil {
		t.Fatal(err)
	}
	if got := compactJSON(t, string(rawFields(t, td.as("c", "GET", "/api/v1/tasks/"+id, ""))["metadata"])); got != want {
		t.Fatalf("get: metadata %s, want %s", got, want)
	}
	var page struct {
		Tasks []map[string]json.RawMessage `json:"tasks"`
	}
	td.as("c", "GET", "/api/v1/tasks", "").json(t, &page)
	if len(page.Tasks) != 1 || compactJSON(t, string(page.Tasks[0]["metadata"])) != want {
		t.Fatalf("list: %+v", page.Tasks)
	}
	r = td.as("c", "PATCH", "/api/v1/tasks/"+id, `{"metadata":{"n":"five","s":6,"gone":null,"b":""}}`)
	mustStatus(t, r, 200)
	const patched = `{"f":1.50,"n":"five","o":{"a":[1,true,null]},"s":6}`
	if got := compactJSON(t, string(rawFields(t, r)["metadata"])); got != patched {
		t.Fatalf("patched: metadata %s, want %s", got, patched)
	}
	if got := compactJSON(t, string(rawFields(t, td.as("c", "GET", "/api/v1/tasks/"+id, ""))["metadata"])); got != patched {
		t.Fatalf("get after the patch: metadata %s, want %s", got, patched)
	}
}

// TestBrokerTimeoutZeroRefused: timeout_seconds 0 is a 400 that says what
// to do, like a negative one, and records nothing; left out, it is the
// seed's 300; max_retries 0 is a valid choice (no retry).
func TestBrokerTimeoutZeroRefused(t *testing.T) {
	td := brokerDaemon(t)
	for _, body := range []string{`{"title":"x","timeout_seconds":0}`, `{"title":"x","timeout_seconds":-1}`} {
		r := td.as("c", "POST", "/api/v1/tasks", body)
		if r.status != 400 || !strings.Contains(string(r.body), "timeout_seconds") || !strings.Contains(string(r.body), "at least 1") {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
	}
	if got := td.dispatchTasks("c", ""); len(got) != 0 {
		t.Fatalf("a refused create recorded %d tasks", len(got))
	}
	r := td.as("c", "POST", "/api/v1/tasks", `{"title":"x","max_retries":0}`)
	mustStatus(t, r, 201)
	f := rawFields(t, r)
	if string(f["timeout_seconds"]) != "300" || string(f["max_retries"]) != "0" {
		t.Fatalf("defaults: timeout_seconds %s max_retries %s", f["timeout_seconds"], f["max_retries"])
	}
}

// TestBrokerTimedOutReason: a dead-lettered time-out says why in both
// JSON views of the task (/api/v1 and /v1): error in words, and
// timeout_reason.
func TestBrokerTimedOutReason(t *testing.T) {
	td := brokerDaemon(t)
	mustStatus(t, td.as("w", "PUT", "/api/v1/agents/w", `{}`), 200)
	r := td.as("c", "POST", "/api/v1/tasks", `{"title":"slow","timeout_seconds":1,"max_retries":0}`)
	mustStatus(t, r, 201)
	var id string
	if err := json.Unmarshal(rawFields(t, r)["task_id"], &id); err != nil {
		t.Fatal(err)
	}
	var api map[string]json.RawMessage
	for range 100 {
		api = rawFields(t, td.as("w", "GET", "/api/v1/tasks/"+id, ""))
		if string(api["dead_lettered"]) == "true" {
			break
		}
		td.as("w", "GET", "/api/v1/tasks?agent=nobody&wait=200ms", "") // a bounded wait, and a sign of life
	}
	if string(api["dead_lettered"]) != "true" || string(api["status"]) != `"timed_out"` {
		t.Fatalf("never dead-lettered as timed out: %s", api["status"])
	}
	for view, f := range map[string]map[string]json.RawMessage{"/api/v1": api, "/v1": rawFields(t, td.do("GET", "/v1/tasks/"+id, ""))} {
		var errText, reason string
		_ = json.Unmarshal(f["error"], &errText)
		_ = json.Unmarshal(f["timeout_reason"], &reason)
		if !strings.Contains(errText, "timed out") || !strings.Contains(errText, "timeout_seconds=1") || reason != "deadline" {
			t.Errorf("%s: error %q, timeout_reason %q", view, errText, reason)
		}
	}
}

// TestTwoBearerTokensRefused: --token with a different --admin-token or
// --agent-token is refused at start (both would travel in the one
// Authorization header, so no request could reach the routes that need
// the second), before anything is opened; the same value is accepted.
func TestTwoBearerTokensRefused(t *testing.T) {
	// On an address in use, so that a daemon that took the flags would
	// fail to start rather than serve for ever.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, flags := range [][]string{
		{"--token", "daemon-s3cret", "--admin-token", "admin-s3cret"},
		{"--token", "daemon-s3cret", "--agent-token", "agent-s3cret"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		var stderr bytes.Buffer
		args := append([]string{"pegasusd", "serve", "--addr", ln.Addr().String(), "--data-dir", data}, flags...)
		code := run(args, nil, io.Discard, &stderr)
		if code != exitError || !strings.Contains(stderr.String(), flags[2]) || !strings.Contains(stderr.String(), "Authorization") {
			t.Errorf("%v: exit %d: %s", flags, code, stderr.String())
		}
	}
	for _, flags := range [][]string{
		{"--token", "s3cret", "--admin-token", "s3cret", "--agent-token", "s3cret"},
		{"--admin-token", "admin-s3cret", "--agent-token", "agent-s3cret"},
	} {
		data := filepath.Join(t.TempDir(), "data")
		var stderr bytes.Buffer
		args := append([]string{"pegasusd", "serve", "--addr", ln.Addr().String(), "--data-dir", data}, flags...)
		run(args, nil, io.Discard, &stderr)
		if strings.Contains(stderr.String(), "Authorization") {
			t.Errorf("%v refused: %s", flags, stderr.String())
		}
	}
}
