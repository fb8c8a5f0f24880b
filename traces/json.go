package traces

import (
	"encoding/hex"
	"time"
)

// SpanJSON is a span's JSON form (GET /v1/tasks/{id}/trace): ids in
// lowercase hex as OTLP/JSON writes them, times in RFC 3339 with
// nanoseconds, attributes as an object.
type SpanJSON struct {
	TraceID       string          `json:"trace_id"`
	SpanID        string          `json:"span_id"`
	ParentSpanID  string          `json:"parent_span_id,omitempty"`
	Name          string          `json:"name"`
	Kind          Kind            `json:"kind"`
	Task          string          `json:"task"`
	Start         time.Time       `json:"start"`
	End           time.Time       `json:"end"`
	DurationMS    float64         `json:"duration_ms"`
	Open          bool            `json:"open,omitempty"`
	Status        string          `json:"status"` // unset, ok, error
	StatusMessage string          `json:"status_message,omitempty"`
	Attributes    map[string]any  `json:"attributes,omitempty"`
	Events        []SpanEventJSON `json:"events,omitempty"`
}

// SpanEventJSON is a span event's JSON form.
type SpanEventJSON struct {
	Name       string         `json:"name"`
	Time       time.Time      `json:"time"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// String names a status as the JSON form does.
func (c StatusCode) String() string {
	switch c {
	case StatusOK:
		return "ok"
	case StatusError:
		return "error"
	}
	return "unset"
}

// ToJSON returns the JSON form of spans, in their order.
func ToJSON(spans []Span) []SpanJSON {
	out := make([]SpanJSON, 0, len(spans))
	for _, s := range spans {
		j := SpanJSON{TraceID: hex.EncodeToString(s.TraceID[:]), SpanID: hex.EncodeToString(s.SpanID[:]), Name: s.Name,
			Kind: s.Kind, Task: s.Task, Start: s.Start.UTC(), End: s.End.UTC(),
			DurationMS: float64(s.End.Sub(s.Start)) / float64(time.Millisecond), Open: s.Open,
			Status: s.Status.String(), StatusMessage: s.StatusMessage, Attributes: attrMap(s.Attrs)}
		if s.Parent != ([8]byte{}) {
			j.ParentSpanID = hex.EncodeToString(s.Parent[:])
		}
		for _, e := range s.Events {
			j.Events = append(j.Events, SpanEventJSON{Name: e.Name, Time: e.Time.UTC(), Attributes: attrMap(e.Attrs)})
		}
		out = append(out, j)
	}
	return out
}

func attrMap(attrs []Attr) map[string]any {
	if len(attrs) == 0 {
		return nil
	}
	m := make(map[string]any, len(attrs))
	for _, a := range attrs {
		m[string(a.Key)] = a.Value.AsInterface()
	}
	return m
}
