package otlp_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/attribute"

	"github.com/pegasus-engine/pegasus/traces"
	"github.com/pegasus-engine/pegasus/traces/otlp"
	"github.com/pegasus-engine/pegasus/traces/otlp/jaegertest"
)

func testSpans() []traces.Span {
	root := ulid.MustParse("01M8CJJRHPVGF29T0ADB3BHXYJ")
	child := ulid.MustParse("01M8CJJRHQ0000000000000001")
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	tid := traces.TraceID(root)
	r := traces.Span{TraceID: tid, SpanID: traces.SpanID(root), Name: "task T", Kind: traces.KindTask, Task: "T",
		Start: t0, End: t0.Add(3 * time.Second), Status: traces.StatusOK,
		Attrs: []traces.Attr{attribute.String("pegasus.task.id", "T")}}
	c := traces.Span{TraceID: tid, SpanID: traces.SpanID(child), Parent: r.SpanID, Name: "chat demo", Kind: traces.KindModel, Task: "T",
		Start: t0.Add(time.Second), End: t0.Add(2 * time.Second), Status: traces.StatusError, StatusMessage: "rate limited",
		Attrs: []traces.Attr{attribute.String("gen_ai.operation.name", "chat"), attribute.Int64("gen_ai.usage.input_tokens", 12),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{"stop"}), attribute.Float64("ratio", 0.5), attribute.Bool("streamed", true)},
		Events: []traces.SpanEvent{{Name: "retry", Time: t0.Add(1500 * time.Millisecond), Attrs: []traces.Attr{attribute.Int64("attempt", 2)}}}}
	return []traces.Span{r, c}
}

// TestExportJaeger sends spans to a real Jaeger and reads them back with
// their ids, parents, times and attributes; sent again unchanged they are
// kept once (Jaeger's query keeps one copy of identical spans), while a
// span sent again changed shows twice: why the export never sends a span
// it sent before with other contents.
func TestExportJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	ctx := context.Background()
	x, err := otlp.New(ctx, otlp.Options{Endpoint: j.OTLP, ServiceName: "pegasus-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Shutdown(ctx)
	spans := testSpans()
	if err := x.Export(ctx, spans); err != nil {
		t.Fatal(err)
	}
	tid := hex.EncodeToString(spans[0].TraceID[:])
	got := j.WaitTrace(t, tid, func(s []jaegertest.Span) bool { return len(s) >= 2 })
	byID := map[string]jaegertest.Span{}
	for _, s := range got {
		byID[s.SpanID] = s
	}
	root, child := byID[hex.EncodeToString(spans[0].SpanID[:])], byID[hex.EncodeToString(spans[1].SpanID[:])]
	if len(got) != 2 || root.OperationName != "task T" || child.OperationName != "chat demo" {
		t.Fatalf("spans: %+v", got)
	}
	if root.Parent() != "" || child.Parent() != root.SpanID {
		t.Fatalf("parents: root %q, child %q (want %q)", root.Parent(), child.Parent(), root.SpanID)
	}
	if root.StartTime != spans[0].Start.UnixMicro() || root.Duration != 3e6 || child.Duration != 1e6 {
		t.Fatalf("times: root %d+%d, child %d", root.StartTime, root.Duration, child.Duration)
	}
	for k, want := range map[string]any{"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": float64(12),
		"ratio": 0.5, "streamed": true, "otel.status_code": "ERROR", "otel.status_description": "rate limited"} {
		if v, ok := child.Tag(k); !ok || v != want {
			t.Errorf("child tag %s = %v (%v), want %v", k, v, ok, want)
		}
	}

	if err := x.Export(ctx, spans); err != nil {
		t.Fatal(err)
	}
	changed := testSpans()[1:]
	changed[0].End = changed[0].End.Add(time.Second)
	if err := x.Export(ctx, changed); err != nil {
		t.Fatal(err)
	}
	got = j.WaitTrace(t, tid, func(s []jaegertest.Span) bool { return len(s) >= 3 })
	if len(got) != 3 {
		t.Fatalf("after sending both spans again and the child changed: %d spans, want 3 (identical ones once, the changed child twice)", len(got))
	}

	// A span of no duration (an instant model call) sent twice shows
	// once, without Jaeger's warning: it is sent ending 1ns after its
	// start.
	instant := testSpans()
	instant[0].TraceID[0]++
	instant[1].TraceID = instant[0].TraceID
	instant[1].End = instant[1].Start
	for range 2 {
		if err := x.Export(ctx, instant); err != nil {
			t.Fatal(err)
		}
	}
	tid = hex.EncodeToString(instant[0].TraceID[:])
	got = j.WaitTrace(t, tid, func(s []jaegertest.Span) bool { return len(s) >= 2 })
	for _, s := range got {
		if _, warned := s.Tag("@jaeger@warnings"); warned || len(got) != 2 {
			t.Fatalf("an instant span sent twice: %d spans, %s", len(got), tagsOf(s))
		}
	}
}

func tagsOf(s jaegertest.Span) string { return fmt.Sprint(s.Tags) }

// TestExportErrors: a bad endpoint is refused at once; a collector that
// answers 4xx is ErrRejected (not retried), an unreachable one is not.
func TestExportErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := otlp.New(ctx, otlp.Options{Endpoint: "127.0.0.1:4318"}); err == nil {
		t.Fatal("an endpoint without a scheme was accepted")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if _, err := otlp.New(ctx, otlp.Options{}); !errors.Is(err, otlp.ErrNoEndpoint) {
		t.Fatalf("no endpoint: %v", err)
	}
	x, err := otlp.New(ctx, otlp.Options{Endpoint: "http://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Export(ctx, testSpans()); err == nil || errors.Is(err, otlp.ErrRejected) {
		t.Fatalf("unreachable collector: %v, want a retryable error", err)
	}
	for code, rejected := range map[int]bool{400: true, 503: false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }))
		x, err := otlp.New(ctx, otlp.Options{Endpoint: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Export(ctx, testSpans()); err == nil || errors.Is(err, otlp.ErrRejected) != rejected {
			t.Errorf("HTTP %d: %v, rejected for good: %v", code, err, rejected)
		}
		srv.Close()
	}
}
