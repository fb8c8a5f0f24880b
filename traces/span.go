package traces

import (
	"time"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/attribute"
)

// Kind says what a span stands for; the waterfall colours by it.
type Kind string

const (
	KindTask      Kind = "task"      // a task, from its input to its end
	KindAdmission Kind = "admission" // waiting for an admission slot
	KindModel     Kind = "model"     // a model call (gen_ai chat)
	KindAttempt   Kind = "attempt"   // one attempt of a model call or a broker task
	KindTool      Kind = "tool"      // a tool call (gen_ai execute_tool)
	KindSuspend   Kind = "suspend"   // waiting for a human, a timer or a child
	KindWorker    Kind = "worker"    // a broker task waiting for or held by a worker
)

// StatusCode is a span's outcome, as OpenTelemetry's status codes.
type StatusCode int

const (
	StatusUnset StatusCode = iota
	StatusOK
	StatusError
)

// Attr is one span attribute: OpenTelemetry's, so the export hands the
// mapping's attributes to the SDK as they are. Values are strings,
// int64s, float64s, bools or string slices.
type Attr = attribute.KeyValue

// SpanEvent is a point in time within a span (a retry, a budget refusal).
type SpanEvent struct {
	Name  string
	Time  time.Time
	Attrs []Attr
}

// Span is one span of a task's trace.
type Span struct {
	TraceID [16]byte
	SpanID  [8]byte
	Parent  [8]byte // zero for the trace's root
	Name    string
	Kind    Kind
	// Task is the stream (task id) the span belongs to.
	Task  string
	Start time.Time
	// End is the span's end; for an open span (Open), the time of the last
	// event seen, so a long task can be exported while it runs.
	End           time.Time
	Open          bool
	Attrs         []Attr
	Events        []SpanEvent
	Status        StatusCode
	StatusMessage string
}

// Options tunes the mapping.
type Options struct {
	// Contents records prompt and completion contents
	// (gen_ai.input.messages, gen_ai.output.messages) and tool arguments
	// and results. Off by default, as the GenAI conventions advise.
	Contents bool
}

// TraceID is the trace id of a task tree whose root event is root (the
// root task's first event, which its descendants correlate to): the
// ULID's 16 bytes.
func TraceID(root ulid.ULID) [16]byte { return [16]byte(root) }

// SpanID is the span id of the span that an event opens: a 64-bit FNV-1a
// hash of the event's ULID, never zero.
func SpanID(id ulid.ULID) [8]byte { return SpanIDFor(id, "") }
