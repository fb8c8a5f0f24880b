package fsm

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
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
	if b == nil || isNilBody(b) {
		return nil, fmt.Errorf("fsm: encode: nil body")
	}
	if _, ok := newBody(b.EventType()); !ok {
		return nil, fmt.Errorf("%w: %s (body %T)", ErrUnknownEvent, b.EventType(), b)
	}
	return marshal(b)
}

// Decode decodes the body of an event of type et written with the given
// schema version. The three input types (MESSAGE_RECEIVED,
// WEBHOOK_TRIGGERED, SCHEDULE_FIRED) decode to *Input with Kind set to et;
// every other type to its own body struct (*ReasonDoneBody, ...). An unknown
// type is an error wrapping ErrUnknownEvent; bytes that are not one msgpack
// value of the body's shape, an error wrapping ErrMalformed. Decode never
// panics, whatever data holds.
func Decode(et EventType, schema uint16, data []byte) (Body, error) {
	b, ok := newBody(et)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownEvent, et)
	}
	if schema != SchemaVersion {
		return nil, fmt.Errorf("%w: %s schema %d (this build reads %d)", ErrSchema, et, schema, SchemaVersion)
	}
	if err := checkShape(data); err != nil {
		return nil, fmt.Errorf("%w: %s body: %v", ErrMalformed, et, err)
	}
	if err := decodeBody(data, b); err != nil {
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
	case *ToolCallResultBody:
		// A failure carries its error; a success does not.
		if in.EventType() != et {
			return nil, fmt.Errorf("%w: %s body is a %s", ErrMalformed, et, in.EventType())
		}
	}
	return b, nil
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
	return nil, false
}

// EventTypes lists every event type this package has a body for, in a
// stable order: inputs, transitions, facts.
var EventTypes = []EventType{
	MessageReceived, WebhookTriggered, ScheduleFired,
	TaskCreated, ReasonDone, NeedMoreInfo, ToolCallCompleted, ToolCallFailed, StepCompleted,
	TaskSuspended, TaskResumed, TaskFailed,
	ToolCallStarted, ModelCalled, TaskNotify, TaskCompleted, ReflectionComplete,
	PerceiveDone, ThinkDone, PlanDone, ActDone, ReflectDone, SubTaskCreated,
}

// isNilBody reports whether b is a typed nil pointer, on which some
// EventType methods would dereference nil.
func isNilBody(b Body) bool {
	switch v := b.(type) {
	case *Input:
		return v == nil
	case *ToolCallResultBody:
		return v == nil
	}
	return false
}

// EncodeTask returns the canonical encoding of a task, used for snapshots
// and for byte-identical comparisons of folds: msgpack maps in declaration
// order, map keys sorted, empty fields omitted (nil and empty slices, maps
// and strings, zero times and numbers encode alike), times as UTC instants.
// Two tasks that describe the same fold encode to the same bytes.
func EncodeTask(t Task) ([]byte, error) {
	return marshal(&t)
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

// EncodeCanonical is the canonical msgpack encoding the project persists:
// struct fields as maps keyed by their msgpack tags, map keys sorted, empty
// fields omitted. Equal values encode to equal bytes. Bodies, tasks and the
// read models of package projection all use it.
func EncodeCanonical(v any) ([]byte, error) { return marshal(v) }

// DecodeCanonical decodes exactly one msgpack value from data into v. It
// first checks, without allocating, that every length the bytes declare
// fits in the bytes that remain (see checkShape), so hostile or corrupt
// bytes are an error, never an allocation sized by a forged length. Use it
// for every msgpack value read back from storage.
func DecodeCanonical(data []byte, v any) error { return unmarshal(data, v) }

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	enc.SetSortMapKeys(true)
	enc.SetOmitEmpty(true)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("fsm: encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// unmarshal decodes exactly one msgpack value from data into v; trailing
// bytes are an error, so one value has one encoding.
func unmarshal(data []byte, v any) error {
	if err := checkShape(data); err != nil {
		return err
	}
	r := bytes.NewReader(data)
	dec := msgpack.GetDecoder()
	defer msgpack.PutDecoder(dec)
	dec.Reset(r)
	return dec.Decode(v)
}

// maxDepth bounds the nesting of arrays and maps in a decoded value. Real
// bodies nest a few levels; the bound keeps hostile bytes from driving the
// decoder's recursion (when skipping unknown fields) into a stack overflow.
const maxDepth = 32

// checkShape walks the msgpack encoding in data without allocating and
// refuses it unless it is exactly one well-formed value whose every
// declared length fits in the bytes that remain and whose nesting is at most
// maxDepth. The msgpack decoder trusts declared array lengths and allocates
// them up front (v5.4.1 ignores its own allocation limit for slices), so a
// few hostile bytes claiming 2^32 elements would otherwise exhaust memory.
// After this check, what the decoder allocates is bounded by len(data).
func checkShape(data []byte) error {
	// pending[i] is how many values level i still expects.
	var pending [maxDepth + 1]uint64
	depth := 0
	pending[0] = 1
	p := 0
	rest := func() uint64 { return uint64(len(data) - p) }
	for {
		for depth >= 0 && pending[depth] == 0 {
			depth--
		}
		if depth < 0 {
			break
		}
		pending[depth]--
		if p >= len(data) {
			return fmt.Errorf("truncated at byte %d", p)
		}
		c := data[p]
		p++
		var skip, n uint64 // bytes of payload to skip; values the container holds
		container := false
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			n, container = 2*uint64(c&0x0f), true
		case c >= 0x90 && c <= 0x9f:
			n, container = uint64(c&0x0f), true
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		default:
			var size int // width of the length or value field
			switch c {
			case 0xcc, 0xd0:
				skip = 1
			case 0xcd, 0xd1:
				skip = 2
			case 0xca, 0xce, 0xd2:
				skip = 4
			case 0xcb, 0xcf, 0xd3:
				skip = 8
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext: type byte + 1, 2, 4, 8, 16
				skip = 1 + 1<<(c-0xd4)
			case 0xc4, 0xd9, 0xc7:
				size = 1
			case 0xc5, 0xda, 0xc8, 0xdc, 0xde:
				size = 2
			case 0xc6, 0xdb, 0xc9, 0xdd, 0xdf:
				size = 4
			default: // 0xc1 is never used
				return fmt.Errorf("invalid code 0x%02x at byte %d", c, p-1)
			}
			if size > 0 {
				if rest() < uint64(size) {
					return fmt.Errorf("truncated length at byte %d", p)
				}
				var l uint64
				for _, b := range data[p : p+size] {
					l = l<<8 | uint64(b)
				}
				p += size
				switch c {
				case 0xc7, 0xc8, 0xc9: // ext: type byte + data
					skip = 1 + l
				case 0xdc, 0xdd:
					n, container = l, true
				case 0xde, 0xdf:
					n, container = 2*l, true
				default:
					skip = l
				}
			}
		}
		if skip > rest() {
			return fmt.Errorf("length %d at byte %d exceeds the %d bytes left", skip, p, rest())
		}
		p += int(skip)
		if container && n > 0 {
			if n > rest() { // every value takes at least one byte
				return fmt.Errorf("%d values declared at byte %d exceed the %d bytes left", n, p, rest())
			}
			if depth == maxDepth {
				return fmt.Errorf("nested deeper than %d", maxDepth)
			}
			depth++
			pending[depth] = n
		}
	}
	if p != len(data) {
		return fmt.Errorf("%d trailing bytes", len(data)-p)
	}
	return nil
}
