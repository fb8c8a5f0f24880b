package otlp

import (
	"context"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pegasus-engine/pegasus/traces"
)

// captured is an OTLP client that keeps what it is asked to upload.
type captured struct{ got []*tracepb.ResourceSpans }

func (c *captured) Start(context.Context) error { return nil }
func (c *captured) Stop(context.Context) error  { return nil }
func (c *captured) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	c.got = rs
	return nil
}

// sdkStubs is the mapping's spans as the SDK's read-only spans, the way
// an instrumented program's would reach its exporter.
func sdkStubs(spans []traces.Span, res *resource.Resource) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		tid := trace.TraceID(s.TraceID)
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID(s.SpanID), TraceFlags: trace.FlagsSampled})
		var parent trace.SpanContext
		if s.Parent != ([8]byte{}) {
			parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID(s.Parent), TraceFlags: trace.FlagsSampled})
		}
		st := sdktrace.Status{Code: codes.Unset}
		switch s.Status {
		case traces.StatusOK:
			st.Code = codes.Ok
		case traces.StatusError:
			st = sdktrace.Status{Code: codes.Error, Description: s.StatusMessage}
		}
		var evs []sdktrace.Event
		for _, e := range s.Events {
			evs = append(evs, sdktrace.Event{Name: e.Name, Time: e.Time, Attributes: e.Attrs})
		}
		end := s.End
		if !end.After(s.Start) {
			end = s.Start.Add(time.Nanosecond)
		}
		out = append(out, tracetest.SpanStub{Name: s.Name, SpanContext: sc, Parent: parent, SpanKind: spanKind(s.Kind),
			StartTime: s.Start, EndTime: end, Attributes: s.Attrs, Events: evs, Status: st, Resource: res,
			InstrumentationScope: instrumentation.Scope{Name: ScopeName}}.Snapshot())
	}
	return out
}

// TestProtoMatchesTheSDK holds the request the exporter builds from the
// mapping's spans equal to the one the SDK's own OTLP exporter builds
// from the same spans as read-only spans: every attribute type, span
// events, parents, each status and kind, an instant span.
func TestProtoMatchesTheSDK(t *testing.T) {
	root := ulid.MustParse("01M8CJJRHPVGF29T0ADB3BHXYJ")
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	tid := traces.TraceID(root)
	all := []traces.Attr{attribute.String("s", "v"), attribute.String("empty", ""), attribute.Int64("i", -3),
		attribute.Float64("f", 0.5), attribute.Bool("b", true), attribute.StringSlice("ss", []string{"a", "b"}),
		attribute.Int64Slice("is", []int64{1, 2}), attribute.Float64Slice("fs", []float64{1.5}),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.StringSlice("none", nil)}
	spans := []traces.Span{
		{TraceID: tid, SpanID: traces.SpanID(root), Name: "task T", Kind: traces.KindTask, Start: t0, End: t0.Add(3 * time.Second),
			Status: traces.StatusOK, Attrs: all[:3]},
		{TraceID: tid, SpanID: traces.SpanIDFor(root, "call"), Parent: traces.SpanID(root), Name: "chat m", Kind: traces.KindModel,
			Start: t0.Add(time.Second), End: t0.Add(2 * time.Second), Status: traces.StatusError, StatusMessage: "rate limited",
			Attrs: all, Events: []traces.SpanEvent{{Name: "retry", Time: t0.Add(1500 * time.Millisecond), Attrs: all[3:6]}, {Name: "bare", Time: t0}}},
		{TraceID: tid, SpanID: traces.SpanIDFor(root, "a"), Parent: traces.SpanIDFor(root, "call"), Name: "attempt 1", Kind: traces.KindAttempt,
			Start: t0.Add(time.Second), End: t0.Add(time.Second), StatusMessage: "unset keeps no message"},
		{TraceID: tid, SpanID: traces.SpanIDFor(root, "tool"), Parent: traces.SpanID(root), Name: "execute_tool clock", Kind: traces.KindTool,
			Start: t0.Add(2 * time.Second), End: t0, Open: true, Events: []traces.SpanEvent{{Name: "only", Time: t0, Attrs: all[6:]}}},
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("pegasus-test"), attribute.StringSlice("x.list", []string{"p", "q"}))
	var sdk captured
	exp, err := otlptrace.New(context.Background(), &sdk)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(context.Background(), sdkStubs(spans, res)); err != nil {
		t.Fatal(err)
	}
	ours := resourceSpans(spans, resourceProto(res), res.SchemaURL())
	if len(ours) != len(sdk.got) {
		t.Fatalf("%d resource spans, the SDK %d", len(ours), len(sdk.got))
	}
	for i := range ours {
		if !proto.Equal(ours[i], sdk.got[i]) {
			t.Errorf("resource spans %d differ:\nours %v\nsdk  %v", i, ours[i], sdk.got[i])
		}
	}
	// A request's messages are kept for the next: built after a request
	// of other spans (more of them, with parents, events, lists and
	// error statuses where these have none), they are the SDK's still.
	r := new(request)
	r.build(spans, resourceProto(res), res.SchemaURL())
	r.build(append(append([]traces.Span(nil), spans...), spans...), resourceProto(res), res.SchemaURL())
	again := []traces.Span{spans[3], spans[2], spans[0]}
	again[0].Parent, again[0].Events = [8]byte{}, nil
	again[1].Attrs = []traces.Attr{attribute.Int64("i", 1), {Key: "e"}}
	again[2].Attrs = nil
	sdk.got = nil
	if err := exp.ExportSpans(context.Background(), sdkStubs(again, res)); err != nil {
		t.Fatal(err)
	}
	reused := r.build(again, resourceProto(res), res.SchemaURL())
	if len(reused) != 1 || len(sdk.got) != 1 || !proto.Equal(reused[0], sdk.got[0]) {
		t.Errorf("a reused request differs:\nours %v\nsdk  %v", reused, sdk.got)
	}
	if resourceSpans(nil, resourceProto(res), "") != nil {
		t.Error("no spans: a request")
	}
}
