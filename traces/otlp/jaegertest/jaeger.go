// Package jaegertest runs a Jaeger all-in-one binary (v1.76.0, in-memory
// storage) on free loopback ports for the tests of the OTLP export, and
// reads traces back through its query API.
//
// The binary is $PEGASUS_JAEGER, else
// $HOME/.cache/pegasus/jaeger-v1.76.0/jaeger (.ci/run builds it there).
// Without it a test is skipped, or fails when CI=true.
package jaegertest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Version is the Jaeger release the tests run.
const Version = "v1.76.0"

// Binary returns the path of the Jaeger binary, or skips t (fails it
// with CI=true) when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	p := os.Getenv("PEGASUS_JAEGER")
	if p == "" {
		home, _ := os.UserHomeDir()
		p = filepath.Join(home, ".cache", "pegasus", "jaeger-"+Version, "jaeger")
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Jaeger binary at %s (.ci/run builds it; PEGASUS_JAEGER names another): %v", p, err)
		}
		t.Skipf("no Jaeger binary at %s (build it as .ci/run does, or set PEGASUS_JAEGER)", p)
	}
	return p
}

// Jaeger is a running Jaeger.
type Jaeger struct {
	// OTLP is the base URL of its OTLP/HTTP receiver (http://127.0.0.1:N).
	OTLP string
	// Query is the base URL of its query API and UI.
	Query string
	cmd   *exec.Cmd
	logs  *strings.Builder
}

const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// Start runs Jaeger until the test ends and waits until its query API
// answers.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := Binary(t)
	ports := freePorts(t, 3)
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, ports[0], ports[1], ports[2]), 0o600); err != nil {
		t.Fatal(err)
	}
	j := &Jaeger{OTLP: fmt.Sprintf("http://127.0.0.1:%d", ports[2]), Query: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), logs: &strings.Builder{}}
	j.cmd = exec.Command(bin, "--config", "file:"+cfg)
	j.cmd.Stdout, j.cmd.Stderr = j.logs, j.logs
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- j.cmd.Wait() }()
	t.Cleanup(func() {
		_ = j.cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(j.Query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return j
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("jaeger exited: %v\n%s", err, j.logs)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger's query API did not answer within a minute\n%s", j.logs)
		}
	}
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// Span is a span as the query API returns it.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64  `json:"startTime"` // µs since the epoch
	Duration  int64  `json:"duration"`  // µs
	Tags      []Tag  `json:"tags"`
	ProcessID string `json:"processID"`
}

// Tag is a span attribute.
type Tag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Parent returns the span id of s's CHILD_OF reference, or "".
func (s Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Tag returns the value of s's attribute key.
func (s Span) Tag(key string) (any, bool) {
	for _, tg := range s.Tags {
		if tg.Key == key {
			return tg.Value, true
		}
	}
	return nil, false
}

// Trace returns the spans of trace id (32 hex digits) as the query API
// gives them (after its adjusters, which keep one copy of identical
// spans), or nil when Jaeger does not have it.
func (j *Jaeger) Trace(t testing.TB, id string) []Span {
	t.Helper()
	resp, err := http.Get(j.Query + "/api/traces/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	var body struct {
		Data []struct {
			Spans []Span `json:"spans"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/traces/%s: %d %v", id, resp.StatusCode, err)
	}
	var spans []Span
	for _, d := range body.Data {
		spans = append(spans, d.Spans...)
	}
	return spans
}

// WaitTrace polls trace id until done holds for its spans, for at most a
// minute, and returns them.
func (j *Jaeger) WaitTrace(t testing.TB, id string, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		spans := j.Trace(t, id)
		if done(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s in Jaeger after a minute: %d spans, not what the test waits for", id, len(spans))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
