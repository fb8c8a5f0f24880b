package fsm

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// bodyReader decodes event bodies field by field with msgpack's own
// primitives instead of its reflection-driven struct decoding. Replay
// decodes every body of the log, and reflection (type lookups, a field map
// per struct, a string per map key) was most of what a fold cost.
//
// It reads exactly what Encode writes: each struct as a map keyed by the
// msgpack tags, in any order, unknown keys skipped, nil as the zero value.
// A test decodes bodies with every field set both ways and requires equal
// results, so a field added to a body without a case here fails it.
//
// It reads the body directly (mpReader), and the strings it decodes are
// substrings of the body held in a string: one copy per body (Decode's),
// or none (DecodeShared), instead of one allocation per string.
type bodyReader struct {
	d mpReader
	// spareMsgs, when set, is an array that the new messages of a step's
	// result (STEP_COMPLETED, TOOL_CALL_*) are decoded into (see Bodies).
	spareMsgs *[]Message
	// in holds the arrays allocated with the body being decoded, which
	// its lists take their elements from (newBodyIn); empty between
	// bodies.
	in lists
}

// lists are arrays allocated with a body, in the same allocation
// (newBodyIn), that the body's lists take their elements from while it is
// decoded: a list that finds too few left gets an array of its own.
type lists struct {
	calls []ToolCall
	steps []PlanStep
	msgs  []Message
}

var bodyReaders = sync.Pool{New: func() any { return &bodyReader{} }}

// decodeBody decodes data, already checked by codec.CheckShape, into b.
func decodeBody(data string, b Body, in lists) error {
	r := bodyReaders.Get().(*bodyReader)
	err := r.bodyIn(data, b, in)
	r.d.reset("") // the pool must not keep the body alive
	bodyReaders.Put(r)
	return err
}

// bodyIn is body, the lists of b taking their elements from in's arrays.
func (r *bodyReader) bodyIn(data string, b Body, in lists) error {
	r.in = in
	err := r.body(data, b)
	r.in = lists{} // nor the reader the arrays
	return err
}

// body decodes data into b.
func (r *bodyReader) body(data string, b Body) error {
	r.d.reset(data)
	switch v := b.(type) {
	case *Input:
		return r.input(v)
	case *TaskCreatedBody:
		return r.taskCreated(v)
	case *ReasonDoneBody:
		return r.object(func(k string) (bool, error) {
			switch string(k) {
			case "reasoning":
				return true, r.reasoning(&v.Reasoning)
			case "plan":
				return true, r.plan(&v.Plan)
			case "new_messages":
				return true, listFrom(r, &v.NewMessages, r.message, &r.in.msgs)
			}
			return false, nil
		})
	case *NeedMoreInfoBody:
		return r.object(func(k string) (bool, error) {
			switch string(k) {
			case "reasoning":
				return true, r.reasoning(&v.Reasoning)
			case "new_messages":
				return true, listFrom(r, &v.NewMessages, r.message, &r.in.msgs)
			}
			return false, nil
		})
	case *ToolCallStartedBody:
		return r.object(func(k string) (bool, error) {
			switch string(k) {
			case "step_index":
				return true, r.int(&v.StepIndex)
			case "tool":
				return true, r.str(&v.Tool)
			case "tool_call_id":
				return true, r.str(&v.ToolCallID)
			case "arguments":
				return true, r.str(&v.Arguments)
			case "idempotency_key":
				return true, r.str(&v.IdempotencyKey)
			case "source":
				return true, r.str(&v.Source)
			case "task":
				return true, r.str(&v.Task)
			case "handle":
				return true, r.str(&v.Handle)
			}
			return false, nil
		})
	case *ToolCallResultBody:
		return r.object(func(k string) (bool, error) {
			switch string(k) {
			case "step_index":
				return true, r.int(&v.StepIndex)
			case "tool":
				return true, r.str(&v.Tool)
			case "tool_call_id":
				return true, r.str(&v.ToolCallID)
			case "idempotency_key":
				return true, r.str(&v.IdempotencyKey)
			case "result":
				return true, r.str(&v.Result)
			case "error":
				return true, r.str(&v.Error)
			case "duration_ms":
				return true, r.int64(&v.DurationMS)
			case "new_messages":
				return true, listSpare(r, &v.NewMessages, r.message, r.spareMsgs, &r.in.msgs)
			case "source":
				return true, r.str(&v.Source)
			case "task":
				return true, r.str(&v.Task)
			case "parts":
				return true, list(r, &v.Parts, r.toolPart)
			}
			return false, nil
		})
	case *StepCompletedBody:
		return r.object(func(k string) (bool, error) {
			switch string(k) {
			case "step_index":
				return true, r.int(&v.StepIndex)
			case "result":
				return true, r.str(&v.Result)
			case "new_messages":
				return true, listSpare(r, &v.NewMessages, r.message, r.spareMsgs, &r.in.msgs)
			}
			return false, nil
		})
	case *TaskSuspendedBody:
		return r.object(func(k string) (bool, error) {
			if string(k) == "reason" {
				return true, r.str(&v.Reason)
			}
			return false, nil
		})
	case *TaskResumedBody:
		return r.object(func(k string) (bool, error) {
			if string(k) == "reason" {
				return true, r.str(&v.Reason)
			}
			return false, nil
		})
	case *TaskFailedBody:
		return r.object(func(k string) (bool, error) {
			switch string(k) {
			case "error":
				return true, r.str(&v.Error)
			case "reason":
				return true, r.str(&v.Reason)
			}
			return false, nil
		})
	case *TaskCompletedBody:
		return r.object(func(k string) (bool, error) {
			if string(k) == "result" {
				return true, r.str(&v.Result)
			}
			return false, nil
		})
	case *ReflectionCompleteBody:
		return r.object(func(k string) (bool, error) {
			if string(k) == "reflection" {
				return true, r.postReflection(&v.Reflection)
			}
			return false, nil
		})
	case *TaskNotifyBody:
		return r.object(func(k string) (bool, error) {
			if string(k) == "message" {
				return true, r.str(&v.Message)
			}
			return false, nil
		})
	case *ModelCalledBody:
		return r.modelCalled(v)
	case *DispatchCreatedBody:
		return r.dispatchCreated(v)
	}
	// A body type without a reader here: the reflection path is still right.
	return msgpack.NewDecoder(strings.NewReader(data)).Decode(b)
}

// object reads one map, calling field for each key; a key field does not
// know (false) is skipped. k is valid only until field returns or decodes a
// nested value.
func (r *bodyReader) object(field func(k string) (bool, error)) error {
	n, err := r.d.DecodeMapLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		l, err := r.d.DecodeBytesLen()
		if err != nil {
			return fmt.Errorf("map key: %w", err)
		}
		if l < 0 {
			return fmt.Errorf("nil map key")
		}
		key, err := r.d.next(l) // aliases the body: compared, never kept
		if err != nil {
			return err
		}
		known, err := field(key)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if !known {
			if err := r.d.Skip(); err != nil {
				return err
			}
		}
	}
	return nil
}

// list reads an array into *p with elem for each element; nil is a nil
// slice. codec.CheckShape has bounded the length by the bytes left.
func list[T any](r *bodyReader, p *[]T, elem func(*T) error) error {
	return listFrom(r, p, elem, nil)
}

// listFrom is list, taking the array from the front of *from when it
// holds enough elements (what it takes, capped, is no longer in *from);
// a nil from is list.
func listFrom[T any](r *bodyReader, p *[]T, elem func(*T) error, from *[]T) error {
	n, err := r.d.DecodeArrayLen()
	if err != nil || n < 0 {
		*p = nil
		return err
	}
	var s []T
	if from != nil && n <= len(*from) {
		s, *from = (*from)[:n:n], (*from)[n:]
	} else {
		s = make([]T, n)
	}
	return elems(p, s, elem)
}

// listSpare is listFrom, decoding into *spare's array when it is large
// enough, else into a new one that becomes *spare; a nil spare is
// listFrom.
func listSpare[T any](r *bodyReader, p *[]T, elem func(*T) error, spare *[]T, from *[]T) error {
	if spare == nil {
		return listFrom(r, p, elem, from)
	}
	n, err := r.d.DecodeArrayLen()
	if err != nil || n < 0 {
		*p = nil
		return err
	}
	s := *spare
	if s != nil && cap(s) >= n {
		s = s[:n]
		clear(s)
	} else {
		s = make([]T, n)
		*spare = s
	}
	return elems(p, s, elem)
}

// elems decodes each element of s with elem, then sets *p to s.
func elems[T any](p *[]T, s []T, elem func(*T) error) error {
	for i := range s {
		if err := elem(&s[i]); err != nil {
			return err
		}
	}
	*p = s
	return nil
}

func (r *bodyReader) str(p *string) (err error) {
	*p, err = r.d.DecodeString()
	return err
}

func (r *bodyReader) int(p *int) (err error) {
	*p, err = r.d.DecodeInt()
	return err
}

func (r *bodyReader) int64(p *int64) (err error) {
	*p, err = r.d.DecodeInt64()
	return err
}

func (r *bodyReader) bool(p *bool) (err error) {
	*p, err = r.d.DecodeBool()
	return err
}

// isNil consumes a nil and reports true if the next value is one.
func (r *bodyReader) isNil() (bool, error) {
	c, err := r.d.PeekCode()
	if err != nil || c != 0xc0 { // nil
		return false, err
	}
	return true, r.d.DecodeNil()
}

func (r *bodyReader) strMap(p *map[string]string) error {
	n, err := r.d.DecodeMapLen()
	if err != nil {
		return err
	}
	if n < 0 {
		*p = nil
		return nil
	}
	m := make(map[string]string, n)
	for i := 0; i < n; i++ {
		k, err := r.d.DecodeString()
		if err != nil {
			return err
		}
		if m[k], err = r.d.DecodeString(); err != nil {
			return err
		}
	}
	*p = m
	return nil
}

func (r *bodyReader) input(v *Input) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "kind":
			var s string
			err := r.str(&s)
			v.Kind = EventType(s)
			return true, err
		case "text":
			return true, r.str(&v.Text)
		case "source":
			return true, r.str(&v.Source)
		case "task_type":
			return true, r.str(&v.TaskType)
		case "priority":
			return true, r.int(&v.Priority)
		case "metadata":
			return true, r.strMap(&v.Metadata)
		case "name":
			return true, r.str(&v.Name)
		case "machine":
			if null, err := r.isNil(); null || err != nil {
				return true, err
			}
			v.Machine = &MachineRef{}
			return true, r.machineRef(v.Machine)
		case "parent_task_id":
			return true, r.str(&v.ParentTaskID)
		case "concurrency_key":
			return true, r.str(&v.ConcurrencyKey)
		}
		return false, nil
	})
}

func (r *bodyReader) machineRef(m *MachineRef) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "name":
			return true, r.str(&m.Name)
		case "version":
			return true, r.int(&m.Version)
		}
		return false, nil
	})
}

func (r *bodyReader) taskCreated(v *TaskCreatedBody) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "machine":
			return true, r.machineRef(&v.Machine)
		case "parent_task_id":
			return true, r.str(&v.ParentTaskID)
		case "task_type":
			return true, r.str(&v.TaskType)
		case "input_text":
			return true, r.str(&v.InputText)
		case "input_metadata":
			return true, r.strMap(&v.InputMetadata)
		case "source":
			return true, r.str(&v.Source)
		case "priority":
			return true, r.int(&v.Priority)
		case "metadata":
			return true, r.strMap(&v.Metadata)
		case "type_version":
			return true, r.str(&v.TypeVersion)
		case "model":
			return true, r.str(&v.Model)
		case "concurrency_key":
			return true, r.str(&v.ConcurrencyKey)
		}
		return false, nil
	})
}

func (r *bodyReader) toolPart(v *ToolPart) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "type":
			return true, r.str(&v.Type)
		case "mime_type":
			return true, r.str(&v.MIMEType)
		case "text":
			return true, r.str(&v.Text)
		case "uri":
			return true, r.str(&v.URI)
		case "data":
			return true, r.str(&v.Data)
		case "size":
			return true, r.int(&v.Size)
		case "truncated":
			return true, r.bool(&v.Truncated)
		}
		return false, nil
	})
}

func (r *bodyReader) toolCall(v *ToolCall) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "id":
			return true, r.str(&v.ID)
		case "name":
			return true, r.str(&v.Name)
		case "arguments":
			return true, r.str(&v.Arguments)
		}
		return false, nil
	})
}

func (r *bodyReader) message(v *Message) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "role":
			return true, r.str(&v.Role)
		case "content":
			return true, r.str(&v.Content)
		case "name":
			return true, r.str(&v.Name)
		case "tool_call_id":
			return true, r.str(&v.ToolCallID)
		case "tool_calls":
			return true, listFrom(r, &v.ToolCalls, r.toolCall, &r.in.calls)
		}
		return false, nil
	})
}

func (r *bodyReader) reasoning(v *Reasoning) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "text":
			return true, r.str(&v.Text)
		case "tool_calls":
			return true, listFrom(r, &v.ToolCalls, r.toolCall, &r.in.calls)
		case "needs_clarification":
			return true, r.bool(&v.NeedsClarification)
		case "question":
			return true, r.str(&v.Question)
		case "model":
			return true, r.str(&v.Model)
		}
		return false, nil
	})
}

func (r *bodyReader) plan(v *Plan) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "goal":
			return true, r.str(&v.Goal)
		case "steps":
			return true, listFrom(r, &v.Steps, r.planStep, &r.in.steps)
		case "reasoning":
			return true, r.str(&v.Reasoning)
		}
		return false, nil
	})
}

func (r *bodyReader) planStep(v *PlanStep) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "index":
			return true, r.int(&v.Index)
		case "description":
			return true, r.str(&v.Description)
		case "action_type":
			var s string
			err := r.str(&s)
			v.ActionType = ActionType(s)
			return true, err
		case "action_params":
			return true, r.strMap(&v.ActionParams)
		case "completed":
			return true, r.bool(&v.Completed)
		}
		return false, nil
	})
}

func (r *bodyReader) postReflection(v *PostTaskReflection) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "facts":
			return true, list(r, &v.Facts, r.fact)
		case "episode":
			if isNil, err := r.isNil(); isNil || err != nil {
				v.Episode = nil
				return true, err
			}
			v.Episode = new(Episode)
			return true, r.episode(v.Episode)
		case "assessment":
			return true, r.str(&v.Assessment)
		case "tool_calls_count":
			return true, r.int(&v.ToolCallsCount)
		}
		return false, nil
	})
}

func (r *bodyReader) fact(v *Fact) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "path":
			return true, r.str(&v.Path)
		case "content":
			return true, r.str(&v.Content)
		}
		return false, nil
	})
}

func (r *bodyReader) episode(v *Episode) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "title":
			return true, r.str(&v.Title)
		case "summary":
			return true, r.str(&v.Summary)
		case "details":
			return true, r.str(&v.Details)
		case "lesson":
			return true, r.str(&v.Lesson)
		}
		return false, nil
	})
}

func (r *bodyReader) modelCalled(v *ModelCalledBody) error {
	return r.object(func(k string) (bool, error) {
		switch string(k) {
		case "purpose":
			return true, r.str(&v.Purpose)
		case "attempt":
			return true, r.int(&v.Attempt)
		case "model":
			return true, r.str(&v.Model)
		case "latency_ms":
			return true, r.int64(&v.LatencyMS)
		case "status":
			return true, r.int(&v.Status)
		case "error":
			return true, r.str(&v.Error)
		case "prompt_tokens":
			return true, r.int(&v.PromptTokens)
		case "completion_tokens":
			return true, r.int(&v.CompletionTokens)
		case "content":
			return true, r.str(&v.Content)
		case "tool_calls":
			return true, listFrom(r, &v.ToolCalls, r.toolCall, &r.in.calls)
		case "finish_reason":
			return true, r.str(&v.FinishReason)
		}
		return false, nil
	})
}

func (r *bodyReader) strs(p *[]string) error {
	return list(r, p, r.str)
}

// time reads a time as msgpack's decoder does into a time.Time field: nil
// is the zero time, the timestamp extension (-1) of 4, 8 or 12 bytes is
// time.Unix of its seconds and nanoseconds (in the local zone), and a zero
// result is in UTC.
func (r *bodyReader) time(p *time.Time) error {
	c, err := r.d.code()
	if err != nil {
		return err
	}
	if c == 0xc0 {
		*p = time.Time{}
		return nil
	}
	if !isExt(c) {
		return fmt.Errorf("msgpack: invalid code=%x decoding ext len", c)
	}
	n, err := r.d.extLen(c)
	if err != nil {
		return err
	}
	id, err := r.d.next(1)
	if err != nil {
		return err
	}
	if int8(id[0]) != -1 {
		return fmt.Errorf("msgpack: got ext type=%d, wanted -1", int8(id[0]))
	}
	var tm time.Time
	switch n {
	case 4:
		sec, err := r.d.uint(4)
		if err != nil {
			return err
		}
		tm = time.Unix(int64(sec), 0)
	case 8:
		sec, err := r.d.uint(8)
		if err != nil {
			return err
		}
		tm = time.Unix(int64(sec&0x00000003ffffffff), int64(sec>>34))
	case 12:
		nsec, err := r.d.uint(4)
		if err != nil {
			return err
		}
		sec, err := r.d.uint(8)
		if err != nil {
			return err
		}
		tm = time.Unix(int64(sec), int64(nsec))
	default:
		return fmt.Errorf("msgpack: invalid ext len=%d decoding time", n)
	}
	if tm.IsZero() {
		tm = tm.UTC()
	}
	*p = tm
	return nil
}

func (r *bodyReader) dispatchCreated(v *DispatchCreatedBody) error {
	return r.object(func(k string) (bool, error) {
		switch k {
		case "agent_id":
			return true, r.str(&v.AgentID)
		case "title":
			return true, r.str(&v.Title)
		case "description":
			return true, r.str(&v.Description)
		case "owner":
			return true, r.str(&v.Owner)
		case "required_capabilities":
			return true, r.strs(&v.RequiredCapabilities)
		case "priority":
			return true, r.int(&v.Priority)
		case "timeout_seconds":
			return true, r.int(&v.TimeoutSeconds)
		case "max_retries":
			return true, r.int(&v.MaxRetries)
		case "retry_eligible":
			return true, r.bool(&v.RetryEligible)
		case "source":
			return true, r.str(&v.Source)
		case "parent_task_id":
			return true, r.str(&v.ParentTaskID)
		case "metadata":
			return true, r.strMap(&v.Metadata)
		case "run_at":
			return true, r.time(&v.RunAt)
		case "heartbeat_seconds":
			return true, r.int(&v.HeartbeatSeconds)
		case "retry_backoff_seconds":
			return true, r.int(&v.RetryBackoffSeconds)
		case "concurrency_key":
			return true, r.str(&v.ConcurrencyKey)
		case "metadata_json":
			return true, r.strs(&v.MetadataJSON)
		}
		return false, nil
	})
}
