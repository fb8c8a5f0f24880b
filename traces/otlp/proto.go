package otlp

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/pegasus-engine/pegasus/traces"
)

// The request's messages are what the SDK's exporter makes of read-only
// spans (its internal tracetransform: TestProtoMatchesTheSDK holds them
// equal), built straight from the mapping's spans into a few arrays per
// request instead of three allocations per attribute, then sent by the
// SDK's OTLP client. Nothing here is a protocol of our own.

// spanFlags are the flags of every span the export sends: sampled, with a
// parent that is not remote.
const spanFlags = uint32(trace.FlagsSampled) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)

// resourceProto is res as the SDK's exporter sends it.
func resourceProto(res *resource.Resource) *resourcepb.Resource {
	kvs := res.Attributes()
	p := newProtoArrays(len(kvs), countValues(kvs))
	return &resourcepb.Resource{Attributes: p.keyValues(kvs)}
}

// resourceSpans is the request body's spans: one resource (res, with its
// schema), one scope (the exporter's), the spans in their order.
func resourceSpans(spans []traces.Span, res *resourcepb.Resource, resSchema string) []*tracepb.ResourceSpans {
	if len(spans) == 0 {
		return nil
	}
	nattrs, nvalues, nevents := 0, 0, 0
	for i := range spans {
		s := &spans[i]
		nattrs += len(s.Attrs)
		nvalues += countValues(s.Attrs)
		nevents += len(s.Events)
		for _, e := range s.Events {
			nattrs += len(e.Attrs)
			nvalues += countValues(e.Attrs)
		}
	}
	p := newProtoArrays(nattrs, nvalues)
	pbs := make([]tracepb.Span, len(spans))
	ptrs := make([]*tracepb.Span, len(spans))
	statuses := make([]tracepb.Status, len(spans))
	ids := make([]byte, 0, len(spans)*(16+8+8))
	evs := make([]tracepb.Span_Event, nevents)
	evPtrs := make([]*tracepb.Span_Event, nevents)
	for i := range spans {
		s, ps := &spans[i], &pbs[i]
		ptrs[i] = ps
		n := len(ids)
		ids = append(ids, s.TraceID[:]...)
		ps.TraceId = ids[n : n+16 : n+16]
		ids = append(ids, s.SpanID[:]...)
		ps.SpanId = ids[n+16 : n+24 : n+24]
		if s.Parent != ([8]byte{}) {
			ids = append(ids, s.Parent[:]...)
			ps.ParentSpanId = ids[n+24 : n+32 : n+32]
		}
		ps.Flags = spanFlags
		ps.Name = s.Name
		ps.Kind = tracepb.Span_SPAN_KIND_INTERNAL
		if spanKind(s.Kind) == trace.SpanKindClient {
			ps.Kind = tracepb.Span_SPAN_KIND_CLIENT
		}
		end := s.End
		if !end.After(s.Start) {
			end = s.Start.Add(time.Nanosecond)
		}
		ps.StartTimeUnixNano, ps.EndTimeUnixNano = unixNano(s.Start), unixNano(end)
		ps.Attributes = p.keyValues(s.Attrs)
		st := &statuses[i]
		switch s.Status {
		case traces.StatusOK:
			st.Code = tracepb.Status_STATUS_CODE_OK
		case traces.StatusError:
			st.Code, st.Message = tracepb.Status_STATUS_CODE_ERROR, s.StatusMessage
		}
		ps.Status = st
		if len(s.Events) > 0 {
			ps.Events = evPtrs[:len(s.Events):len(s.Events)]
			for j, e := range s.Events {
				pe := &evs[j]
				pe.Name, pe.TimeUnixNano, pe.Attributes = e.Name, unixNano(e.Time), p.keyValues(e.Attrs)
				ps.Events[j] = pe
			}
			evs, evPtrs = evs[len(s.Events):], evPtrs[len(s.Events):]
		}
	}
	scope := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: ScopeName}, Spans: ptrs}
	return []*tracepb.ResourceSpans{{Resource: res, ScopeSpans: []*tracepb.ScopeSpans{scope}, SchemaUrl: resSchema}}
}

func unixNano(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) }

// protoArrays hands out a request's attribute messages from arrays sized
// for it.
type protoArrays struct {
	kvs     []commonpb.KeyValue
	kvPtrs  []*commonpb.KeyValue
	values  []commonpb.AnyValue
	strs    []commonpb.AnyValue_StringValue
	ints    []commonpb.AnyValue_IntValue
	valPtrs []*commonpb.AnyValue
}

// countValues is how many list elements kvs hold (each is a value of its
// own in the request).
func countValues(kvs []attribute.KeyValue) int {
	n := 0
	for _, kv := range kvs {
		switch kv.Value.Type() {
		case attribute.STRINGSLICE:
			n += len(kv.Value.AsStringSlice())
		case attribute.INT64SLICE:
			n += len(kv.Value.AsInt64Slice())
		case attribute.FLOAT64SLICE:
			n += len(kv.Value.AsFloat64Slice())
		case attribute.BOOLSLICE:
			n += len(kv.Value.AsBoolSlice())
		}
	}
	return n
}

func newProtoArrays(attrs, listValues int) *protoArrays {
	return &protoArrays{kvs: make([]commonpb.KeyValue, attrs), kvPtrs: make([]*commonpb.KeyValue, attrs),
		values: make([]commonpb.AnyValue, attrs+listValues), strs: make([]commonpb.AnyValue_StringValue, attrs+listValues),
		ints: make([]commonpb.AnyValue_IntValue, 0, attrs), valPtrs: make([]*commonpb.AnyValue, listValues)}
}

func (p *protoArrays) keyValues(attrs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(attrs) == 0 {
		return nil
	}
	out := p.kvPtrs[:len(attrs):len(attrs)]
	p.kvPtrs = p.kvPtrs[len(attrs):]
	for i, a := range attrs {
		kv := &p.kvs[i]
		kv.Key, kv.Value = string(a.Key), p.value(a.Value)
		out[i] = kv
	}
	p.kvs = p.kvs[len(attrs):]
	return out
}

// value is v as an AnyValue, as the SDK's exporter converts it.
func (p *protoArrays) value(v attribute.Value) *commonpb.AnyValue {
	av := &p.values[0]
	p.values = p.values[1:]
	switch v.Type() {
	case attribute.STRING:
		av.Value = p.str(v.AsString())
	case attribute.INT64:
		p.ints = append(p.ints, commonpb.AnyValue_IntValue{IntValue: v.AsInt64()})
		av.Value = &p.ints[len(p.ints)-1]
	case attribute.BOOL:
		av.Value = &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}
	case attribute.FLOAT64:
		av.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}
	case attribute.STRINGSLICE:
		av.Value = listValue(p, v.AsStringSlice(), func(e *commonpb.AnyValue, x string) { e.Value = p.str(x) })
	case attribute.INT64SLICE:
		av.Value = listValue(p, v.AsInt64Slice(), func(e *commonpb.AnyValue, x int64) { e.Value = &commonpb.AnyValue_IntValue{IntValue: x} })
	case attribute.FLOAT64SLICE:
		av.Value = listValue(p, v.AsFloat64Slice(), func(e *commonpb.AnyValue, x float64) { e.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: x} })
	case attribute.BOOLSLICE:
		av.Value = listValue(p, v.AsBoolSlice(), func(e *commonpb.AnyValue, x bool) { e.Value = &commonpb.AnyValue_BoolValue{BoolValue: x} })
	case attribute.EMPTY:
	default:
		av.Value = p.str("INVALID")
	}
	return av
}

func (p *protoArrays) str(s string) *commonpb.AnyValue_StringValue {
	sv := &p.strs[0]
	p.strs = p.strs[1:]
	sv.StringValue = s
	return sv
}

// listValue is xs as a list value, each element set by set.
func listValue[T any](p *protoArrays, xs []T, set func(*commonpb.AnyValue, T)) *commonpb.AnyValue_ArrayValue {
	vals := p.list(len(xs))
	for i, x := range xs {
		set(vals[i], x)
	}
	return &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vals}}
}

// list is n AnyValues of a list.
func (p *protoArrays) list(n int) []*commonpb.AnyValue {
	out := p.valPtrs[:n:n]
	p.valPtrs = p.valPtrs[n:]
	for i := range out {
		out[i] = &p.values[0]
		p.values = p.values[1:]
	}
	return out
}
