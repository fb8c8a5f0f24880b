package fsm

import (
	"fmt"
	"slices"
	"sync"

	"github.com/pegasus-engine/pegasus/internal/codec"
)

// SchemaVersion is the version of the body encoding written by Encode. It is
// stored in each event's envelope; Decode refuses any other.
//
// Persisted: bump it only for an incompatible change of a body. Adding an
// optional field is compatible: older readers ignore unknown keys and newer
// readers see the zero value in older bodies.
const SchemaVersion = 1

// Encode returns the canonical msgpack encoding of an event body: struct
// fields in declaration order as maps keyed by their msgpack tags, map keys
// sorted, empty fields omitted (so nil and empty encode alike). Equal bodies
// encode to equal bytes.
func Encode(b Body) ([]byte, error) {
	if err := encodable(b); err != nil {
		return nil, err
	}
	// A body encoded by hand is written into a buffer kept between calls,
	// then copied into one of its own size: one allocation per body, of
	// the body's size, not a guess grown as it fills.
	e := encoders.Get().(*taskEncoder)
	e.b = e.b[:0]
	var out []byte
	ok := encBody(e, b)
	if ok {
		src := e.b
		out = make([]byte, len(src)) // and the copy: not cleared first
		copy(out, src)
	}
	if cap(e.b) <= maxKeptEncoder {
		encoders.Put(e)
	}
	if ok {
		return out, nil
	}
	return marshal(b)
}

// encodable refuses a nil body and a body of a type newBody has none for.
func encodable(b Body) error {
	if b == nil || isNilBody(b) {
		return fmt.Errorf("fsm: encode: nil body")
	}
	if !knownBody(b) {
		return fmt.Errorf("%w: %s (body %T)", ErrUnknownEvent, b.EventType(), b)
	}
	return nil
}

// encoders holds Encode's buffers; one larger than maxKeptEncoder is
// left to the collector rather than kept.
var encoders = sync.Pool{New: func() any { return &taskEncoder{b: make([]byte, 0, 1024)} }}

const maxKeptEncoder = 64 << 10

// bodyTypes holds every event type newBody has a body for (EventTypes),
// so that Encode checks a body's type without building one.
var bodyTypes = func() map[EventType]struct{} {
	m := make(map[EventType]struct{}, len(EventTypes))
	for _, et := range EventTypes {
		m[et] = struct{}{}
	}
	return m
}()

// knownBody reports whether newBody has a body for b's event type:
// without a lookup for the bodies encoded by hand whose type is fixed by
// their Go type (a tool call's result is one of its two), by bodyTypes for
// the rest (an input's type is its kind, any string).
func knownBody(b Body) bool {
	switch b.(type) {
	case *TaskCreatedBody, *ModelCalledBody, *ReasonDoneBody, *ToolCallStartedBody, *ToolCallResultBody,
		*StepCompletedBody, *TaskCompletedBody, *TaskNotifyBody, *DispatchCreatedBody:
		return true
	}
	_, ok := bodyTypes[b.EventType()]
	return ok
}

// Decode decodes the body of an event of type et written with the given
// schema version. The three input types (MESSAGE_RECEIVED,
// WEBHOOK_TRIGGERED, SCHEDULE_FIRED) decode to *Input with Kind set to et;
// every other type to its own body struct (*ReasonDoneBody, ...). An unknown
// type is an error wrapping ErrUnknownEvent; bytes that are not one msgpack
// value of the body's shape, an error wrapping ErrMalformed. Decode never
// panics, whatever data holds. The decoded strings are the body's own: one
// copy of data holds them all.
func Decode(et EventType, schema uint16, data []byte) (Body, error) {
	return decode(et, schema, data)
}

// DecodeShared is Decode for a body held in a string: the decoded strings
// are substrings of data, so nothing is copied. A fold that owns each
// record's bytes uses it.
func DecodeShared(et EventType, schema uint16, data string) (Body, error) {
	return decode(et, schema, data)
}

// Bodies decodes bodies into values it keeps, one per body type that
// Apply never keeps a pointer to (the results of steps, inputs,
// TASK_CREATED, the facts that record strings), instead of a new value
// per event; a fold that neither keeps its events nor hands them to
// anyone uses one. The zero Bodies is ready to use; it is not safe for
// concurrent use.
type Bodies struct {
	input     Input
	created   TaskCreatedBody
	step      StepCompletedBody
	result    ToolCallResultBody
	completed TaskCompletedBody
	model     ModelCalledBody
	failed    TaskFailedBody
	notify    TaskNotifyBody
	suspended TaskSuspendedBody
	resumed   TaskResumedBody
	r         bodyReader // for every body, instead of the pool's
	// msgs is the array the new messages of the reused step results are
	// decoded into: Apply appends copies of them to the task's messages.
	msgs []Message
}

// DecodeShared is DecodeShared (the package's) but for the value it
// decodes into: a body of a type bs keeps is valid only until bs decodes
// the next body of that type. Its slices, maps and strings are new (or
// substrings of data) as DecodeShared's are, so what Apply keeps of them
// stays valid, but for the NewMessages array of STEP_COMPLETED and
// TOOL_CALL_COMPLETED or _FAILED, which is reused too (Apply copies the
// messages: it keeps their strings and tool calls, not the array). The
// value itself must not be kept.
func (bs *Bodies) DecodeShared(et EventType, schema uint16, data string) (Body, error) {
	switch et {
	case StepCompleted, ToolCallCompleted, ToolCallFailed:
		bs.r.spareMsgs = &bs.msgs
	}
	b, err := decodeInto(et, schema, data, bs.reused(et), &bs.r)
	bs.r.d.reset("") // keeps no body alive
	bs.r.spareMsgs = nil
	return b, err
}

// reused returns the kept value for et, cleared, or nil when et's bodies
// are not reused.
func (bs *Bodies) reused(et EventType) Body {
	switch et {
	case MessageReceived, WebhookTriggered, ScheduleFired:
		return cleared(&bs.input)
	case TaskCreated:
		return cleared(&bs.created)
	case StepCompleted:
		return cleared(&bs.step)
	case ToolCallCompleted, ToolCallFailed:
		return cleared(&bs.result)
	case TaskCompleted:
		return cleared(&bs.completed)
	case ModelCalled:
		return cleared(&bs.model)
	case TaskFailed:
		return cleared(&bs.failed)
	case TaskNotify:
		return cleared(&bs.notify)
	case TaskSuspended:
		return cleared(&bs.suspended)
	case TaskResumed:
		return cleared(&bs.resumed)
	}
	return nil
}

// cleared sets *p to the zero value and returns p.
func cleared[T any](p *T) *T {
	var zero T
	*p = zero
	return p
}

func decode[T ~[]byte | ~string](et EventType, schema uint16, data T) (Body, error) {
	return decodeInto(et, schema, data, nil, nil)
}

// decodeInto is decode into b, a cleared body of et's type, or into a new
// one when b is nil; with r's reader, or one from the pool when r is nil.
func decodeInto[T ~[]byte | ~string](et EventType, schema uint16, data T, b Body, r *bodyReader) (Body, error) {
	ok := b != nil
	var in lists
	if !ok {
		b, in, ok = newBodyIn(et)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownEvent, et)
	}
	if schema != SchemaVersion {
		return nil, fmt.Errorf("%w: %s schema %d (this build reads %d)", ErrSchema, et, schema, SchemaVersion)
	}
	if err := codec.CheckShape(data); err != nil {
		return nil, fmt.Errorf("%w: %s body: %v", ErrMalformed, et, err)
	}
	var err error
	if r != nil {
		err = r.bodyIn(string(data), b, in)
	} else {
		err = decodeBody(string(data), b, in)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s body: %v", ErrMalformed, et, err)
	}
	switch in := b.(type) {
	case *Input:
		// The envelope names the input kind; a body that says otherwise is
		// malformed rather than silently retyped.
		if in.Kind != "" && in.Kind != et {
			return nil, fmt.Errorf("%w: %s body says kind %s", ErrMalformed, et, in.Kind)
		}
		in.Kind = et
	case *DispatchReportBody:
		// The envelope names the report kind.
		if in.Kind != "" && in.Kind != et {
			return nil, fmt.Errorf("%w: %s body says kind %s", ErrMalformed, et, in.Kind)
		}
		in.Kind = et
	case *ToolCallResultBody:
		// A failure carries its error; a success does not.
		if in.EventType() != et {
			return nil, fmt.Errorf("%w: %s body is a %s", ErrMalformed, et, in.EventType())
		}
	}
	return b, nil
}

// newBodyIn is newBody, but the bodies of the agent's events that hold
// lists come with arrays for the lists of a typical agent task, in the
// same allocation: a REASON_DONE's tool calls (of its reasoning and of
// its message), its step and its messages (the input and the model's
// reply), a MODEL_CALLED's tool call, a tool call result's message. The
// arrays live as long as any part of the body does, as the body's
// strings keep its whole encoding alive.
func newBodyIn(et EventType) (Body, lists, bool) {
	switch et {
	case ReasonDone:
		s := new(struct {
			b     ReasonDoneBody
			calls [2]ToolCall
			steps [1]PlanStep
			msgs  [2]Message
		})
		return &s.b, lists{calls: s.calls[:], steps: s.steps[:], msgs: s.msgs[:]}, true
	case ModelCalled:
		s := new(struct {
			b     ModelCalledBody
			calls [1]ToolCall
		})
		return &s.b, lists{calls: s.calls[:]}, true
	case ToolCallCompleted, ToolCallFailed:
		s := new(struct {
			b    ToolCallResultBody
			msgs [1]Message
		})
		return &s.b, lists{msgs: s.msgs[:]}, true
	}
	b, ok := newBody(et)
	return b, lists{}, ok
}

// newBody returns a new, empty body for an event type.
func newBody(et EventType) (Body, bool) {
	switch et {
	case MessageReceived, WebhookTriggered, ScheduleFired:
		return &Input{}, true
	case TaskCreated:
		return &TaskCreatedBody{}, true
	case ReasonDone:
		return &ReasonDoneBody{}, true
	case NeedMoreInfo:
		return &NeedMoreInfoBody{}, true
	case ToolCallStarted:
		return &ToolCallStartedBody{}, true
	case ToolCallCompleted, ToolCallFailed:
		return &ToolCallResultBody{}, true
	case StepCompleted:
		return &StepCompletedBody{}, true
	case TaskSuspended:
		return &TaskSuspendedBody{}, true
	case TaskResumed:
		return &TaskResumedBody{}, true
	case TaskFailed:
		return &TaskFailedBody{}, true
	case TaskCompleted:
		return &TaskCompletedBody{}, true
	case ReflectionComplete:
		return &ReflectionCompleteBody{}, true
	case TaskNotify:
		return &TaskNotifyBody{}, true
	case ModelCalled:
		return &ModelCalledBody{}, true
	case BudgetExceeded:
		return &BudgetExceededBody{}, true
	case PerceiveDone:
		return &PerceiveDoneBody{}, true
	case ThinkDone:
		return &ThinkDoneBody{}, true
	case PlanDone:
		return &PlanDoneBody{}, true
	case ActDone:
		return &ActDoneBody{}, true
	case ReflectDone:
		return &ReflectDoneBody{}, true
	case SubTaskCreated:
		return &SubTaskCreatedBody{}, true
	}
	return newDispatchBody(et)
}

// EventTypes lists every event type this package has a body for, in a
// stable order: inputs, transitions, facts.
var EventTypes = []EventType{
	MessageReceived, WebhookTriggered, ScheduleFired,
	TaskCreated, ReasonDone, NeedMoreInfo, ToolCallCompleted, ToolCallFailed, StepCompleted,
	TaskSuspended, TaskResumed, TaskFailed,
	ToolCallStarted, ModelCalled, TaskNotify, TaskCompleted, ReflectionComplete, BudgetExceeded,
	PerceiveDone, ThinkDone, PlanDone, ActDone, ReflectDone, SubTaskCreated,
	DispatchCreated, DispatchAssigned, DispatchStarted, DispatchProgress, DispatchCompleted, DispatchFailed,
	DispatchTimedOut, DispatchRetried, DispatchDeadLettered, DispatchRequeued, DispatchUpdated,
	DispatchCancelled,
}

// isNilBody reports whether b is a typed nil pointer, on which some
// EventType methods would dereference nil.
func isNilBody(b Body) bool {
	switch v := b.(type) {
	case *Input:
		return v == nil
	case *ToolCallResultBody:
		return v == nil
	case *DispatchReportBody:
		return v == nil
	}
	return false
}

// EncodeTask returns the canonical encoding of a task, used for snapshots
// and for byte-identical comparisons of folds: msgpack maps in declaration
// order, map keys sorted, empty fields omitted (nil and empty slices, maps
// and strings, zero times and numbers encode alike), times as UTC instants.
// Two tasks that describe the same fold encode to the same bytes.
//
// It writes the bytes by hand (taskEncoder), not through msgpack's
// reflection: they are the bytes internal/codec writes for the same value,
// checked byte for byte by a test, at a fraction of the cost. It returns no
// error today; the error stays for callers that treat encoding as fallible.
func EncodeTask(t Task) ([]byte, error) { return AppendTask(nil, &t), nil }

// AppendTask appends EncodeTask's encoding of t to dst.
func AppendTask(dst []byte, t *Task) []byte {
	// An encoder of Encode's pool, with dst in place of its buffer: one on
	// the stack would escape to the heap.
	e := encoders.Get().(*taskEncoder)
	kept := e.b
	e.b = slices.Grow(dst, sizeHint(t))
	encTask(e, t)
	out := e.b
	e.b = kept
	encoders.Put(e)
	return out
}

// sizeHint estimates the encoded size of t from its largest parts, so that
// EncodeTask allocates its buffer about once.
func sizeHint(t *Task) int {
	c := &t.Context
	n := 512 + len(c.InputText) + len(c.FinalResult) + len(c.Error) + 64*len(t.History)
	for i := range c.Messages {
		n += 48 + len(c.Messages[i].Content) + 96*len(c.Messages[i].ToolCalls)
	}
	for i := range c.ActionsDone {
		n += 96 + len(c.ActionsDone[i].Result) + len(c.ActionsDone[i].Error)
	}
	if c.Plan != nil {
		n += 128 * len(c.Plan.Steps)
	}
	if c.Reasoning != nil {
		n += len(c.Reasoning.Text) + 96*len(c.Reasoning.ToolCalls)
	}
	return n
}

// DecodeTask decodes an encoding written by EncodeTask. Times come back in
// UTC. Hostile bytes return an error wrapping ErrMalformed; they never
// panic.
func DecodeTask(data []byte) (Task, error) {
	var t Task
	if err := unmarshal(data, &t); err != nil {
		return Task{}, fmt.Errorf("%w: task: %v", ErrMalformed, err)
	}
	t.CreatedAt = t.CreatedAt.UTC()
	t.UpdatedAt = t.UpdatedAt.UTC()
	for i := range t.History {
		t.History[i].Timestamp = t.History[i].Timestamp.UTC()
	}
	return t, nil
}

// marshal and unmarshal are the canonical codec (internal/codec), with
// this package's error prefix on encoding.
func marshal(v any) ([]byte, error) {
	b, err := codec.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("fsm: %w", err)
	}
	return b, nil
}

func unmarshal(data []byte, v any) error { return codec.Decode(data, v) }
