package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/pegasus-engine/pegasus/server"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"

	"github.com/pegasus-engine/pegasus/fsm"
)

// validatingTransport sends each request to the real daemon and validates
// the request and its response against the OpenAPI document, recording
// which operations and statuses were exercised.
type validatingTransport struct {
	t      *testing.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // "METHOD PATH STATUS" and "METHOD PATH"
}

func (v *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	v.t.Helper()
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		v.t.Errorf("%s %s: not in the OpenAPI document: %v", req.Method, req.URL, err)
		return http.DefaultTransport.RoundTrip(req)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	err = openapi3filter.ValidateRequest(req.Context(), in)
	if invalid, _ := req.Context().Value(invalidRequest{}).(bool); invalid {
		// A request the daemon must refuse: the document refuses it too.
		if err == nil {
			v.t.Errorf("%s %s: the document accepts a request the daemon refuses", req.Method, req.URL)
		}
	} else if err != nil {
		v.t.Errorf("%s %s: request does not match the document: %v", req.Method, req.URL, err)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	respOpts := *opts
	var body []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		respOpts.ExcludeResponseBody = true // an endless stream: its events are checked below
	} else {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: &respOpts}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		v.t.Errorf("%s %s: %d response does not match the document: %v\n%s", req.Method, req.URL, resp.StatusCode, err, body)
	}
	if resp.StatusCode >= 400 && resp.StatusCode != http.StatusInternalServerError &&
		route.Operation.Responses.Value(strconv.Itoa(resp.StatusCode)) == nil {
		// Only a bug falls to "default": a generator needs every other
		// error status of an operation listed.
		v.t.Errorf("%s %s: %d is not among the operation's documented responses", req.Method, route.Path, resp.StatusCode)
	}
	v.mu.Lock()
	v.seen[req.Method+" "+route.Path] = true
	v.seen[fmt.Sprintf("%s %s %d", req.Method, route.Path, resp.StatusCode)] = true
	v.mu.Unlock()
	return resp, nil
}

// invalidRequest marks, in a request's context, a request that breaks the
// document on purpose.
type invalidRequest struct{}

// TestOpenAPIDocument drives every /v1 operation of the real handlers,
// successes and errors, and validates each request and response against
// openapi.json, so that the document cannot drift from the code. It also
// checks that the daemon serves the document it embeds.
func TestOpenAPIDocument(t *testing.T) {
	ctx := context.Background()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join("..", "..", "server", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI document: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi.json is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	// The states' enums are the machines' states.
	for name, want := range map[string][]fsm.State{"State": fsm.AllStates, "DispatchTask": fsm.DispatchStates} {
		sch := doc.Components.Schemas[name].Value
		if p := sch.Properties["status"]; p != nil {
			sch = p.Value
		}
		if got := fmt.Sprint(sch.Enum); got != fmt.Sprint(want) {
			t.Errorf("the %s enum of openapi.json is %s, want %s", name, got, want)
		}
	}
	td := startDaemon(t, testConfig(t))
	doc.Servers = openapi3.Servers{{URL: td.url}}
	router, err := legacyrouter.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	vt := &validatingTransport{t: t, router: router, seen: map[string]bool{}}
	hc := &http.Client{Transport: vt}
	// callAs sends a request, with headers as name, value pairs, and
	// checks its status; a 400 is a request the document refuses too.
	callAs := func(method, path, contentType, body string, want int, header ...string) []byte {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		rctx := ctx
		if want == 400 {
			rctx = context.WithValue(ctx, invalidRequest{}, true)
		}
		req, _ := http.NewRequestWithContext(rctx, method, td.url+path, rd)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Errorf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, data)
		}
		return data
	}
	call := func(method, path, contentType, body string, want int) []byte {
		t.Helper()
		return callAs(method, path, contentType, body, want)
	}
	const js = "application/json"
	var created server.CreatedJSON
	json.Unmarshal(call("POST", "/v1/tasks", js, `{"input":"what time is it?","type":"general","priority":1,"metadata":{"k":"v"}}`, 201), &created)
	id := created.TaskID
	td.waitTask(id)
	var asking server.CreatedJSON
	json.Unmarshal(call("POST", "/v1/tasks", js, `{"input":"?"}`, 201), &asking)
	td.waitTask(asking.TaskID)

	call("POST", "/v1/tasks", js, `{"input":"x","colour":"red"}`, 400)
	call("GET", "/v1/tasks?limit=1&order=asc&state=completed,suspended&type=general", "", "", 200)
	call("GET", "/v1/tasks?machine=pegasus.task@1&source=api", "", "", 200)
	call("GET", "/v1/tasks?q=TIME", "", "", 200)
	call("GET", "/v1/tasks?limit=0", "", "", 400)
	call("GET", "/v1/tasks/"+id+"?wait=1s", "", "", 200)
	call("GET", "/v1/tasks/01JABCDEFGHJKMNPQRSTVWXYZ0", "", "", 404)
	call("GET", "/v1/tasks/"+id+"/events", "", "", 200)
	call("GET", "/v1/tasks/"+id+"/progress", "", "", 200)
	call("GET", "/v1/tasks/"+id+"/state?at=3", "", "", 200)
	call("GET", "/v1/tasks/"+id+"/why", "", "", 200)
	call("GET", "/v1/tasks/"+id+"/trace?contents=true", "", "", 200)
	call("GET", "/v1/tasks/"+id+"/trace?contents=maybe", "", "", 400)
	call("POST", "/v1/tasks/"+asking.TaskID+"/messages", js, `{"text":"tell me a joke","source":"test"}`, 200)
	td.waitTask(asking.TaskID)
	call("POST", "/v1/tasks/"+id+"/messages", js, `{"text":"again"}`, 409)
	var second server.CreatedJSON
	json.Unmarshal(call("POST", "/v1/tasks", js, `{"input":"?"}`, 201), &second)
	td.waitTask(second.TaskID)
	call("POST", "/v1/tasks/"+second.TaskID+"/resume", js, `{"reason":"go on"}`, 200)
	call("POST", "/v1/tasks/"+id+"/suspend", "", "", 409)
	call("POST", "/v1/tasks/"+id+"/resume", "", "", 409)
	call("POST", "/v1/tasks/"+id+"/cancel", js, `{"reason":"late"}`, 409)
	var third server.CreatedJSON
	json.Unmarshal(call("POST", "/v1/tasks", js, `{"input":"?"}`, 201), &third)
	td.waitTask(third.TaskID)
	call("POST", "/v1/tasks/"+third.TaskID+"/cancel", "", "", 200)
	call("POST", "/v1/tasks/"+third.TaskID+"/suspend", js, `{"reason":"x"}`, 409)
	call("POST", "/v1/webhooks/deploy?type=general&priority=2", "text/plain", "the deploy finished", 201)
	call("POST", "/v1/webhooks/deploy", js, `{"event":"push"}`, 201)
	call("GET", "/v1/events?after_seq=0&limit=5", "", "", 200)
	call("GET", "/v1/events?after_seq=999999999", "", "", 409)
	call("GET", "/v1/events/stream?after_seq=999999999", "", "", 409)
	call("GET", "/v1/tasks/01JABCDEFGHJKMNPQRSTVWXYZ0/stream", "", "", 404)
	call("GET", "/v1/tasks/"+id+"/stream?after_seq=999999999", "", "", 409)
	call("GET", "/v1/tasks/"+id+"/stream?after_seq=x", "", "", 400)
	call("GET", "/v1/stats", "", "", 200)
	call("GET", "/v1/spend", "", "", 200)
	call("GET", "/v1/spend?task="+id, "", "", 200)
	call("GET", "/v1/spend?task=01M80RCFV3281HRSKQBDEXQ948", "", "", 404)
	call("GET", "/v1/tools", "", "", 200)
	call("GET", "/v1/models", "", "", 200)
	call("GET", "/v1/task-types", "", "", 200)
	call("POST", "/v1/admin/checkpoint", "", "", 201)
	served := call("GET", "/v1/openapi.json", "", "", 200)
	onDisk, err := os.ReadFile(filepath.Join("..", "..", "server", "openapi.json"))
	if err != nil || !bytes.Equal(served, onDisk) {
		t.Errorf("/v1/openapi.json does not serve openapi.json")
	}

	// The broker's /api/v1 (docs/broker.md): a worker takes a task and
	// completes it, another task fails into the dead-letter queue and is
	// requeued, and the admin routes (open on loopback without
	// --admin-token) show the rest.
	w := func(method, path, body string, want int) []byte {
		t.Helper()
		return callAs(method, path, js, body, want, "X-Agent-ID", "w1")
	}
	var d1, d2 server.DispatchJSON
	json.Unmarshal(callAs("POST", "/api/v1/tasks", js, `{"title":"crawl","required_capabilities":["web"],"metadata":{"k":"v"}}`, 201,
		"X-Agent-ID", "client", "Idempotency-Key", "crawl-1"), &d1)
	callAs("POST", "/api/v1/tasks", js, `{"title":"crawl","required_capabilities":["web"],"metadata":{"k":"v"}}`, 201,
		"X-Agent-ID", "client", "Idempotency-Key", "crawl-1")
	callAs("POST", "/api/v1/tasks", js, `{"title":"x","colour":"red"}`, 400, "X-Agent-ID", "client")
	call("GET", "/api/v1/tasks", "", "", 400) // no X-Agent-ID
	w("PUT", "/api/v1/agents/w1", `{"capabilities":["web"],"max_tasks":1}`, 200)
	w("GET", "/api/v1/tasks?agent=w1&status=assigned&wait=20s&limit=10", "", 200)
	w("GET", "/api/v1/tasks/"+d1.TaskID, "", 200)
	w("GET", "/api/v1/tasks/01JABCDEFGHJKMNPQRSTVWXYZ0", "", 404)
	w("PATCH", "/api/v1/tasks/"+d1.TaskID, `{"metadata":{"seen":"yes"}}`, 200)
	w("POST", "/api/v1/tasks/"+d1.TaskID+"/progress", `{"message":"reading"}`, 200)
	w("POST", "/api/v1/tasks/"+d1.TaskID+"/complete", `{"result":{"pages":42}}`, 200)
	w("POST", "/api/v1/tasks/"+d1.TaskID+"/fail", `{"error":"late"}`, 409)
	w("GET", "/api/v1/tasks/"+d1.TaskID+"/events", "", 200)
	json.Unmarshal(callAs("POST", "/api/v1/tasks", js, `{"title":"flaky","required_capabilities":["web"],"max_retries":0}`, 201,
		"X-Agent-ID", "client"), &d2)
	w("GET", "/api/v1/tasks?agent=w1&status=assigned&wait=20s", "", 200)
	w("POST", "/api/v1/tasks/"+d2.TaskID+"/fail", `{"error":"connection refused","retry_eligible":true}`, 200)
	td.waitDLQ(1)
	w("GET", "/api/v1/dlq", "", 200)
	w("POST", "/api/v1/dlq/"+d2.TaskID+"/requeue", `{"reason":"fixed"}`, 200)
	w("POST", "/api/v1/dlq/"+d1.TaskID+"/requeue", "", 409)
	w("POST", "/api/v1/dlq/requeue", `{"error":"connection refused"}`, 200)
	w("GET", "/api/v1/agents", "", 200)
	w("POST", "/api/v1/agents/w1/drain", "", 200)
	w("GET", "/api/v1/stats", "", 200)
	w("GET", "/api/v1/tasks?status=completed&owner=&source=", "", 200)
	w("GET", "/api/v1/tasks?status=timed_out&order=desc&limit=5", "", 200)
	w("GET", "/api/v1/tasks?status=bogus", "", 400)
	w("GET", "/api/v1/tasks?order=sideways", "", 400)
	call("GET", "/v1/tasks?order=desc", "", "", 200)
	call("GET", "/v1/tasks?state=bogus", "", "", 400)

	// The stream: its first event is an event in the document's JSON form.
	sctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(sctx, "GET", td.url+"/v1/events/stream?after_seq=0&stream="+id, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := readDataLine(resp.Body)
	cancel()
	resp.Body.Close()
	eventSchema := doc.Components.Schemas["Event"].Value
	var ev any
	if err := json.Unmarshal(line, &ev); err != nil || eventSchema.VisitJSON(ev) != nil {
		t.Errorf("stream event %s does not match the Event schema: %v", line, eventSchema.VisitJSON(ev))
	}

	// Every operation of the document was exercised.
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !vt.seen[method+" "+path] {
				missing = append(missing, method+" "+path)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("operations the test does not exercise: %v", missing)
	}
}

// readDataLine returns the data of the first Server-Sent Event in r.
func readDataLine(r io.Reader) ([]byte, error) {
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	for {
		n, err := r.Read(tmp)
		buf = append(buf, tmp[:n]...)
		for _, l := range bytes.Split(buf, []byte("\n")) {
			if d, ok := bytes.CutPrefix(l, []byte("data: ")); ok && bytes.HasSuffix(buf, []byte("\n\n")) {
				return d, nil
			}
		}
		if err != nil {
			return nil, err
		}
	}
}
