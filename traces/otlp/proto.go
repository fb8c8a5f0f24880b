package otlp

import (
	"sync"
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
//
// The arrays are kept between requests (a pool of them): the client
// encodes a request before UploadTraces returns and keeps none of its
// messages, so the next request overwrites them. Every field the export
// sets is set again, or cleared, for each message it hands out.

// spanFlags are the flags of every span the export sends: sampled, with a
// parent that is not remote.
const spanFlags = uint32(trace.FlagsSampled) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)

// resourceProto is res as the SDK's exporter sends it.
func resourceProto(res *resource.Resource) *resourcepb.Resource {
	kvs := res.Attributes()
	p := new(protoArrays)
	p.reset(len(kvs))
	return &resourcepb.Resource{Attributes: p.keyValues(kvs)}
}

// request is the messages of one export request, kept for the next.
type request struct {
	pbs      []tracepb.Span
	ptrs     []*tracepb.Span
	statuses []tracepb.Status
	ids      []byte
	evs      []tracepb.Span_Event
	evPtrs   []*tracepb.Span_Event
	p        protoArrays

	lib    commonpb.InstrumentationScope
	scope  tracepb.ScopeSpans
	scopes [1]*tracepb.ScopeSpans
	rs     tracepb.ResourceSpans
	out    [1]*tracepb.ResourceSpans
}

// requests holds the requests not in use.
var requests = sync.Pool{New: func() any { return new(request) }}

// resourceSpans is the request body's spans: one resource (res, with its
// schema), one scope (the exporter's), the spans in their order. Its
// messages are new ones (the request's build reuses a request's).
func resourceSpans(spans []traces.Span, res *resourcepb.Resource, resSchema string) []*tracepb.ResourceSpans {
	return new(request).build(spans, res, resSchema)
}

// build is resourceSpans in r's messages, valid until r's next build.
func (r *request) build(spans []traces.Span, res *resourcepb.Resource, resSchema string) []*tracepb.ResourceSpans {
	if len(spans) == 0 {
		return nil
	}
	nattrs, nevents := 0, 0
	for i := range spans {
		s := &spans[i]
		nattrs += len(s.Attrs)
		nevents += len(s.Events)
		for _, e := range s.Events {
			nattrs += len(e.Attrs)
		}
	}
	p := &r.p
	p.reset(nattrs)
	pbs := fit(&r.pbs, len(spans))
	ptrs := fit(&r.ptrs, len(spans))
	statuses := fit(&r.statuses, len(spans))
	ids := fit(&r.ids, len(spans)*(16+8+8))[:0]
	evs := fit(&r.evs, nevents)
	evPtrs := fit(&r.evPtrs, nevents)
	for i := range spans {
		s, ps := &spans[i], &pbs[i]
		ptrs[i] = ps
		n := len(ids)
		ids = append(ids, s.TraceID[:]...)
		ps.TraceId = ids[n : n+16 : n+16]
		ids = append(ids, s.SpanID[:]...)
		ps.SpanId = ids[n+16 : n+24 : n+24]
		ps.ParentSpanId = nil
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
		st.Code, st.Message = tracepb.Status_STATUS_CODE_UNSET, ""
		switch s.Status {
		case traces.StatusOK:
			st.Code = tracepb.Status_STATUS_CODE_OK
		case traces.StatusError:
			st.Code, st.Message = tracepb.Status_STATUS_CODE_ERROR, s.StatusMessage
		}
		ps.Status = st
		ps.Events = nil
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
	r.lib.Name = ScopeName
	r.scope.Scope, r.scope.Spans = &r.lib, ptrs
	r.scopes[0] = &r.scope
	r.rs.Resource, r.rs.ScopeSpans, r.rs.SchemaUrl = res, r.scopes[:], resSchema
	r.out[0] = &r.rs
	return r.out[:]
}

// fit is *buf with length n, grown (its contents dropped) when short.
func fit[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n+n/4)
	}
	return (*buf)[:n]
}

func unixNano(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) }

// protoArrays hands out a request's attribute messages from arrays sized
// for it, kept between requests (buf). The values of lists (elems, and
// their strings) are not counted ahead (attribute.Value copies a list to
// tell its length): their arrays grow as they are used, a new array when
// one is short (what was handed out stays where it is).
type protoArrays struct {
	protoSlices             // what is left to hand out
	buf         protoSlices // the arrays
}

type protoSlices struct {
	kvs     []commonpb.KeyValue
	kvPtrs  []*commonpb.KeyValue
	values  []commonpb.AnyValue
	strs    []commonpb.AnyValue_StringValue
	ints    []commonpb.AnyValue_IntValue
	elems   []commonpb.AnyValue
	valPtrs []*commonpb.AnyValue
	lists   []commonpb.AnyValue_ArrayValue
	arrays  []commonpb.ArrayValue
}

// reset readies p for attrs attributes.
func (p *protoArrays) reset(attrs int) {
	p.kvs, p.kvPtrs = fit(&p.buf.kvs, attrs), fit(&p.buf.kvPtrs, attrs)
	p.values, p.strs = fit(&p.buf.values, attrs), fit(&p.buf.strs, attrs)
	p.ints = fit(&p.buf.ints, attrs)[:0]
	p.elems, p.valPtrs = p.buf.elems, p.buf.valPtrs
	p.lists, p.arrays = p.buf.lists, p.buf.arrays
}

// more is n more of *rest, from *buf's array or, when it is short, from a
// larger one that *buf becomes.
func more[T any](rest, buf *[]T, n int) []T {
	if len(*rest) < n {
		*buf = make([]T, max(2*cap(*buf), n+8))
		*rest = *buf
	}
	out := (*rest)[:n:n]
	*rest = (*rest)[n:]
	return out
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
		av.Value = nil
	default:
		av.Value = p.str("INVALID")
	}
	return av
}

func (p *protoArrays) str(s string) *commonpb.AnyValue_StringValue {
	sv := &more(&p.strs, &p.buf.strs, 1)[0]
	sv.StringValue = s
	return sv
}

// listValue is xs as a list value, each element set by set.
func listValue[T any](p *protoArrays, xs []T, set func(*commonpb.AnyValue, T)) *commonpb.AnyValue_ArrayValue {
	vals := p.list(len(xs))
	for i, x := range xs {
		set(vals[i], x)
	}
	// The list's two messages from arrays kept between requests; past
	// their room (appends that reallocate), the earlier ones stay where
	// they were.
	a := &more(&p.arrays, &p.buf.arrays, 1)[0]
	a.Values = vals
	l := &more(&p.lists, &p.buf.lists, 1)[0]
	l.ArrayValue = a
	return l
}

// list is n AnyValues of a list.
func (p *protoArrays) list(n int) []*commonpb.AnyValue {
	out := more(&p.valPtrs, &p.buf.valPtrs, n)
	elems := more(&p.elems, &p.buf.elems, n)
	for i := range out {
		out[i] = &elems[i]
	}
	return out
}
