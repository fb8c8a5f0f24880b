// Package otlp sends the spans of traces.Build to an OpenTelemetry
// collector over OTLP/HTTP, with the OpenTelemetry SDK's exporter: the
// spans keep the ids, times and attributes the mapping gave them (no SDK
// tracer draws new ones), so the same task sent twice, live by pegasusd or
// later by pegasus-replay, is the same trace.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pegasus-engine/pegasus/traces"
)

// ErrNoEndpoint is returned by New when neither Options.Endpoint nor an
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// variable names a collector.
var ErrNoEndpoint = errors.New("otlp: no endpoint (--otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)")

// ErrRejected wraps an export the collector refused for good (an HTTP
// status other than 429, 502, 503 and 504, or a request too large):
// sending it again would be refused again.
var ErrRejected = errors.New("otlp: the collector rejected the spans")

// DefaultServiceName is the service.name of the exported resource.
const DefaultServiceName = "pegasus"

// ScopeName is the instrumentation scope of every exported span.
const ScopeName = "github.com/pegasus-engine/pegasus/traces"

// Options configure an Exporter. Every unset field takes the standard
// OTEL_EXPORTER_OTLP_* variable's value, then the SDK's default.
type Options struct {
	// Endpoint is the collector's base URL (http://127.0.0.1:4318): the
	// spans go to its /v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT. A URL
	// with a path other than / is used as it is, as
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. The default value is the
	// variables'.
	Endpoint string
	// ServiceName is the resource's service.name. The default value is
	// OTEL_SERVICE_NAME, else "pegasus".
	ServiceName string
	// Timeout bounds one export request. The default value is the
	// variables', else 10s.
	Timeout time.Duration
	// Headers are sent with every request (OTEL_EXPORTER_OTLP_HEADERS
	// otherwise).
	Headers map[string]string
}

// Configured reports whether o or the environment names a collector.
func (o Options) Configured() bool {
	return o.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Exporter sends spans to one collector. It is safe for concurrent use.
type Exporter struct {
	exp *otlptrace.Exporter
	res *resource.Resource
}

// New returns an exporter for o. It sends nothing until Export.
func New(ctx context.Context, o Options) (*Exporter, error) {
	if !o.Configured() {
		return nil, ErrNoEndpoint
	}
	// The caller retries (with the cursor that says what was sent), so
	// the SDK's own retry is off: a failed Export returns at once.
	opts := []otlptracehttp.Option{otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false})}
	if o.Endpoint != "" {
		u, err := url.Parse(o.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("otlp: endpoint %q is not an http(s) URL", o.Endpoint)
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	if o.Timeout > 0 {
		opts = append(opts, otlptracehttp.WithTimeout(o.Timeout))
	}
	if o.Headers != nil {
		opts = append(opts, otlptracehttp.WithHeaders(o.Headers))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp: %w", err)
	}
	name := o.ServiceName
	if name == "" {
		name = os.Getenv("OTEL_SERVICE_NAME")
	}
	if name == "" {
		name = DefaultServiceName
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(name))
	return &Exporter{exp: exp, res: res}, nil
}

// Export sends spans in one request. Spans still open (Span.Open) are
// sent as they are, ending at their last event. An error wrapping
// ErrRejected will not succeed if tried again; others may.
func (x *Exporter) Export(ctx context.Context, spans []traces.Span) error {
	if len(spans) == 0 {
		return nil
	}
	err := x.exp.ExportSpans(ctx, Snapshots(spans, x.res))
	if err == nil {
		return nil
	}
	if s := err.Error(); strings.Contains(s, "failed to send to") || strings.Contains(s, "request body too large") {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}

// Shutdown releases the exporter's connections.
func (x *Exporter) Shutdown(ctx context.Context) error { return x.exp.Shutdown(ctx) }

// Snapshots converts spans to the SDK's read-only spans under res. The
// read-only spans share the spans' attributes and are valid while spans
// are; one allocation holds them all.
func Snapshots(spans []traces.Span, res *resource.Resource) []sdktrace.ReadOnlySpan {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	ro := make([]readOnly, len(spans))
	nevents := 0
	for i := range spans {
		nevents += len(spans[i].Events)
	}
	evs := make([]sdktrace.Event, 0, nevents)
	for i := range spans {
		s := &spans[i]
		r := &ro[i]
		r.s, r.res = s, res
		tid := trace.TraceID(s.TraceID)
		r.sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID(s.SpanID), TraceFlags: trace.FlagsSampled})
		if s.Parent != ([8]byte{}) {
			r.parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID(s.Parent), TraceFlags: trace.FlagsSampled})
		}
		r.status = sdktrace.Status{Code: codes.Unset}
		switch s.Status {
		case traces.StatusOK:
			r.status.Code = codes.Ok
		case traces.StatusError:
			r.status = sdktrace.Status{Code: codes.Error, Description: s.StatusMessage}
		}
		if len(s.Events) > 0 {
			n := len(evs)
			for _, e := range s.Events {
				evs = append(evs, sdktrace.Event{Name: e.Name, Time: e.Time, Attributes: e.Attrs})
			}
			r.events = evs[n:len(evs):len(evs)]
		}
		r.end = s.End
		if !r.end.After(s.Start) {
			r.end = s.Start.Add(time.Nanosecond)
		}
		out[i] = r
	}
	return out
}

// readOnly is a mapped span as the SDK's exporters read it. Embedding the
// interface gives it the SDK's unexported method; every method the
// exporters call is its own.
type readOnly struct {
	sdktrace.ReadOnlySpan
	s          *traces.Span
	res        *resource.Resource
	sc, parent trace.SpanContext
	status     sdktrace.Status
	events     []sdktrace.Event
	end        time.Time
}

var scope = instrumentation.Scope{Name: ScopeName}

func (r *readOnly) Name() string                     { return r.s.Name }
func (r *readOnly) SpanContext() trace.SpanContext   { return r.sc }
func (r *readOnly) Parent() trace.SpanContext        { return r.parent }
func (r *readOnly) SpanKind() trace.SpanKind         { return spanKind(r.s.Kind) }
func (r *readOnly) StartTime() time.Time             { return r.s.Start }
func (r *readOnly) EndTime() time.Time               { return r.end }
func (r *readOnly) Attributes() []attribute.KeyValue { return r.s.Attrs }
func (r *readOnly) Links() []sdktrace.Link           { return nil }
func (r *readOnly) Events() []sdktrace.Event         { return r.events }
func (r *readOnly) Status() sdktrace.Status          { return r.status }
func (r *readOnly) InstrumentationScope() instrumentation.Scope {
	return scope
}

//nolint:staticcheck // the SDK's interface still has it
func (r *readOnly) InstrumentationLibrary() instrumentation.Library { return scope }
func (r *readOnly) Resource() *resource.Resource                    { return r.res }
func (r *readOnly) DroppedAttributes() int                          { return 0 }
func (r *readOnly) DroppedLinks() int                               { return 0 }
func (r *readOnly) DroppedEvents() int                              { return 0 }
func (r *readOnly) ChildSpanCount() int                             { return 0 }

// spanKind is the OpenTelemetry kind of a span: model calls are client
// calls to a provider; the rest is work inside the engine.
func spanKind(k traces.Kind) trace.SpanKind {
	switch k {
	case traces.KindModel, traces.KindAttempt:
		return trace.SpanKindClient
	}
	return trace.SpanKindInternal
}
