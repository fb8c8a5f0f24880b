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

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

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
	client    otlptrace.Client
	res       *resourcepb.Resource
	resSchema string
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
	client := otlptracehttp.NewClient(opts...)
	if err := client.Start(ctx); err != nil {
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
	return &Exporter{client: client, res: resourceProto(res), resSchema: res.SchemaURL()}, nil
}

// Export sends spans in one request. Spans still open (Span.Open) are
// sent as they are, ending at their last event. An error wrapping
// ErrRejected will not succeed if tried again; others may.
func (x *Exporter) Export(ctx context.Context, spans []traces.Span) error {
	if len(spans) == 0 {
		return nil
	}
	r := requests.Get().(*request)
	err := x.client.UploadTraces(ctx, r.build(spans, x.res, x.resSchema))
	requests.Put(r) // the client encoded the request: its messages are free
	if err == nil {
		return nil
	}
	if s := err.Error(); strings.Contains(s, "failed to send to") || strings.Contains(s, "request body too large") {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}

// Shutdown releases the exporter's connections.
func (x *Exporter) Shutdown(ctx context.Context) error { return x.client.Stop(ctx) }

// spanKind is the OpenTelemetry kind of a span: model calls are client
// calls to a provider; the rest is work inside the engine.
func spanKind(k traces.Kind) trace.SpanKind {
	switch k {
	case traces.KindModel, traces.KindAttempt:
		return trace.SpanKindClient
	}
	return trace.SpanKindInternal
}
