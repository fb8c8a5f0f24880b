package fsm

import (
	"encoding/binary"
	"math"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"
)

// taskEncoder writes the canonical encoding of a Task (EncodeTask) by hand,
// without reflection: the bytes internal/codec's msgpack encoder writes for
// the same value, which a test checks byte for byte over random tasks
// (TestEncodeTaskMatchesReflection). The rules it follows are msgpack's with
// SetOmitEmpty and SetSortMapKeys:
//
//   - a struct is a map of its non-empty fields, keyed by their msgpack
//     tags, in declaration order; a struct field whose own fields are all
//     empty is omitted, a non-nil pointer to one is written as {};
//   - empty means "", 0, false, a nil or empty slice or map, a nil pointer,
//     a zero time.Time or ulid.ULID (IsZero);
//   - int is written in its shortest form, int64 and uint64 always in 9
//     bytes, a ULID as 16 bytes of bin 8, a time as the msgpack timestamp
//     extension (-1) in 4, 8 or 12 bytes;
//   - map[string]string keys are sorted.
//
// A field added to one of these structs must be added here too; the test
// fills every field of every struct by reflection, so it fails until it is.
type taskEncoder struct{ b []byte }

// fields is one map under construction: where its header is, how many
// fields it has so far.
type fields struct {
	at int
	n  int
}

// open starts a map; close writes its header once the count is known.
func (e *taskEncoder) open() fields {
	e.b = append(e.b, 0x80)
	return fields{at: len(e.b) - 1}
}

func (e *taskEncoder) close(f fields) {
	if f.n < 16 {
		e.b[f.at] = 0x80 | byte(f.n)
		return
	}
	// map 16: two more bytes of header before the fields.
	e.b = append(e.b, 0, 0)
	copy(e.b[f.at+3:], e.b[f.at+1:len(e.b)-2])
	e.b[f.at] = 0xde
	binary.BigEndian.PutUint16(e.b[f.at+1:], uint16(f.n))
}

func (e *taskEncoder) key(f *fields, k string) {
	f.n++
	e.str(k)
}

// room extends e.b by n bytes and returns them, to be written. It grows
// e.b only when it is full: otherwise the slice's pointer is not stored,
// as `e.b = append(e.b, s...)` stores it each time, behind the garbage
// collector's write barrier while a cycle marks (a fifth of
// BenchmarkEncodeTask's time, where the collector runs often).
func (e *taskEncoder) room(n int) []byte {
	l := len(e.b)
	if cap(e.b)-l < n {
		e.b = slices.Grow(e.b, n)
	}
	e.b = e.b[:l+n]
	return e.b[l:]
}

func (e *taskEncoder) str(s string) {
	switch l := len(s); {
	case l < 32:
		d := e.room(1 + l)
		d[0] = 0xa0 | byte(l)
		copy(d[1:], s)
		return
	case l < 256:
		d := e.room(2 + l)
		d[0], d[1] = 0xd9, byte(l)
		copy(d[2:], s)
		return
	case l <= math.MaxUint16:
		e.b = append(e.b, 0xda)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(l))
	default:
		e.b = append(e.b, 0xdb)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(l))
	}
	copy(e.room(len(s)), s)
}

// uint and int are msgpack's EncodeUint and EncodeInt: the shortest form.
func (e *taskEncoder) uint(n uint64) {
	switch {
	case n <= math.MaxInt8:
		e.b = append(e.b, byte(n))
	case n <= math.MaxUint8:
		e.b = append(e.b, 0xcc, byte(n))
	case n <= math.MaxUint16:
		e.b = append(e.b, 0xcd)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(n))
	case n <= math.MaxUint32:
		e.b = append(e.b, 0xce)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	default:
		e.b = append(e.b, 0xcf)
		e.b = binary.BigEndian.AppendUint64(e.b, n)
	}
}

func (e *taskEncoder) int(n int64) {
	switch {
	case n >= 0:
		e.uint(uint64(n))
	case n >= -32:
		e.b = append(e.b, byte(n))
	case n >= math.MinInt8:
		e.b = append(e.b, 0xd0, byte(n))
	case n >= math.MinInt16:
		e.b = append(e.b, 0xd1)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(n))
	case n >= math.MinInt32:
		e.b = append(e.b, 0xd2)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	default:
		e.b = append(e.b, 0xd3)
		e.b = binary.BigEndian.AppendUint64(e.b, uint64(n))
	}
}

func (e *taskEncoder) arrayLen(l int) { e.header(l, 0x90, 0xdc, 0xdd) }
func (e *taskEncoder) mapLen(l int)   { e.header(l, 0x80, 0xde, 0xdf) }

// header writes an array's or a map's length: fixed (under 16), 16 or 32
// bits.
func (e *taskEncoder) header(l int, fixed, c16, c32 byte) {
	switch {
	case l < 16:
		e.b = append(e.b, fixed|byte(l))
	case l <= math.MaxUint16:
		e.b = append(e.b, c16)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(l))
	default:
		e.b = append(e.b, c32)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(l))
	}
}

// The field writers below write key and value, or nothing for an empty
// value.

func (e *taskEncoder) fStr(f *fields, k, v string) {
	if v != "" {
		e.key(f, k)
		e.str(v)
	}
}

func (e *taskEncoder) fInt(f *fields, k string, v int) {
	if v != 0 {
		e.key(f, k)
		e.int(int64(v))
	}
}

// fInt64 and fUint64 keep msgpack's fixed 9-byte forms of int64 and uint64.
func (e *taskEncoder) fInt64(f *fields, k string, v int64) {
	if v != 0 {
		e.key(f, k)
		d := e.room(9)
		d[0] = 0xd3
		binary.BigEndian.PutUint64(d[1:], uint64(v))
	}
}

func (e *taskEncoder) fUint64(f *fields, k string, v uint64) {
	if v != 0 {
		e.key(f, k)
		d := e.room(9)
		d[0] = 0xcf
		binary.BigEndian.PutUint64(d[1:], v)
	}
}

func (e *taskEncoder) fBool(f *fields, k string, v bool) {
	if v {
		e.key(f, k)
		e.b = append(e.b, 0xc3)
	}
}

func (e *taskEncoder) fTime(f *fields, k string, t time.Time) {
	if t.IsZero() {
		return
	}
	e.key(f, k)
	secs := uint64(t.Unix())
	if secs>>34 == 0 {
		data := uint64(t.Nanosecond())<<34 | secs
		if data&0xffffffff00000000 == 0 {
			d := e.room(6)
			d[0], d[1] = 0xd6, 0xff
			binary.BigEndian.PutUint32(d[2:], uint32(data))
			return
		}
		d := e.room(10)
		d[0], d[1] = 0xd7, 0xff
		binary.BigEndian.PutUint64(d[2:], data)
		return
	}
	e.b = append(e.b, 0xc7, 12, 0xff)
	e.b = binary.BigEndian.AppendUint32(e.b, uint32(t.Nanosecond()))
	e.b = binary.BigEndian.AppendUint64(e.b, secs)
}

func (e *taskEncoder) fULID(f *fields, k string, id ulid.ULID) {
	if id.IsZero() {
		return
	}
	e.key(f, k)
	d := e.room(18)
	d[0], d[1] = 0xc4, 16
	copy(d[2:], id[:])
}

func (e *taskEncoder) fStrMap(f *fields, k string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	e.key(f, k)
	e.mapLen(len(m))
	var small [8]string // most maps are small: their keys sorted on the stack
	keys := small[:0]
	if len(m) > len(small) {
		keys = make([]string, 0, len(m))
	}
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		e.str(k)
		e.str(m[k])
	}
}

func (e *taskEncoder) fStrs(f *fields, k string, v []string) {
	if len(v) == 0 {
		return
	}
	e.key(f, k)
	e.arrayLen(len(v))
	for _, s := range v {
		e.str(s)
	}
}

// fStruct writes a struct field: omitted when every field of the struct
// is empty (it would be written as the empty map).
func fStruct[T any](e *taskEncoder, f *fields, k string, v *T, enc func(*taskEncoder, *T)) {
	mark, n := len(e.b), f.n
	e.key(f, k)
	start := len(e.b)
	enc(e, v)
	if len(e.b) == start+1 && e.b[start] == 0x80 {
		e.b, f.n = e.b[:mark], n
	}
}

// fPtr writes a pointer field: omitted when nil, written (even as {})
// otherwise.
func fPtr[T any](e *taskEncoder, f *fields, k string, v *T, enc func(*taskEncoder, *T)) {
	if v != nil {
		e.key(f, k)
		enc(e, v)
	}
}

// fSlice writes a slice of structs: omitted when empty; every element is
// written, even as {}.
func fSlice[T any](e *taskEncoder, f *fields, k string, v []T, enc func(*taskEncoder, *T)) {
	if len(v) == 0 {
		return
	}
	e.key(f, k)
	e.arrayLen(len(v))
	for i := range v {
		enc(e, &v[i])
	}
}

func encTask(e *taskEncoder, t *Task) {
	f := e.open()
	e.fStr(&f, "id", t.ID)
	fStruct(e, &f, "machine", &t.Machine, encMachineRef)
	e.fStr(&f, "type", t.Type)
	e.fStr(&f, "state", string(t.State))
	fStruct(e, &f, "context", &t.Context, encContext)
	fSlice(e, &f, "history", t.History, encTransition)
	e.fTime(&f, "created_at", t.CreatedAt)
	e.fTime(&f, "updated_at", t.UpdatedAt)
	e.fInt(&f, "priority", t.Priority)
	e.fStrMap(&f, "metadata", t.Metadata)
	e.fUint64(&f, "version", t.Version)
	e.fUint64(&f, "seq", t.Seq)
	e.fULID(&f, "last_event", t.LastEvent)
	e.fStr(&f, "parent_task_id", t.ParentID)
	e.fStr(&f, "concurrency_key", t.ConcurrencyKey)
	fPtr(e, &f, "dispatch", t.Dispatch, encDispatch)
	e.close(f)
}

func encMachineRef(e *taskEncoder, m *MachineRef) {
	f := e.open()
	e.fStr(&f, "name", m.Name)
	e.fInt(&f, "version", m.Version)
	e.close(f)
}

func encTransition(e *taskEncoder, t *Transition) {
	f := e.open()
	e.fStr(&f, "from", string(t.From))
	e.fStr(&f, "to", string(t.To))
	e.fStr(&f, "event", string(t.Event))
	e.fULID(&f, "event_id", t.EventID)
	e.fTime(&f, "timestamp", t.Timestamp)
	e.close(f)
}

func encContext(e *taskEncoder, c *Context) {
	f := e.open()
	e.fStr(&f, "input_text", c.InputText)
	e.fStrMap(&f, "input_metadata", c.InputMetadata)
	e.fStr(&f, "source", c.Source)
	fPtr(e, &f, "perception", c.Perception, encPerception)
	fPtr(e, &f, "reasoning", c.Reasoning, encReasoning)
	fPtr(e, &f, "plan", c.Plan, encPlan)
	fSlice(e, &f, "actions_done", c.ActionsDone, encActionResult)
	fSlice(e, &f, "reflections", c.Reflections, encReflection)
	fPtr(e, &f, "post_reflection", c.PostReflection, encPostReflection)
	e.fInt(&f, "iteration", c.Iteration)
	fPtr(e, &f, "pending_call", c.PendingCall, encToolCallStarted)
	fPtr(e, &f, "pending_sub_task", c.PendingSubTask, encSubTaskCreated)
	e.fStr(&f, "final_result", c.FinalResult)
	e.fStr(&f, "error", c.Error)
	e.fBool(&f, "result_recorded", c.ResultRecorded)
	e.fStr(&f, "suspended_state", string(c.SuspendedState))
	e.fStr(&f, "suspend_reason", c.SuspendReason)
	fSlice(e, &f, "messages", c.Messages, encMessage)
	e.close(f)
}

func encPerception(e *taskEncoder, p *Perception) {
	f := e.open()
	e.fStr(&f, "text", p.Text)
	e.fStr(&f, "model", p.Model)
	e.close(f)
}

func encReasoning(e *taskEncoder, r *Reasoning) {
	f := e.open()
	e.fStr(&f, "text", r.Text)
	fSlice(e, &f, "tool_calls", r.ToolCalls, encToolCall)
	e.fBool(&f, "needs_clarification", r.NeedsClarification)
	e.fStr(&f, "question", r.Question)
	e.fStr(&f, "model", r.Model)
	e.close(f)
}

func encToolCall(e *taskEncoder, c *ToolCall) {
	f := e.open()
	e.fStr(&f, "id", c.ID)
	e.fStr(&f, "name", c.Name)
	e.fStr(&f, "arguments", c.Arguments)
	e.close(f)
}

func encPlan(e *taskEncoder, p *Plan) {
	f := e.open()
	e.fStr(&f, "goal", p.Goal)
	fSlice(e, &f, "steps", p.Steps, encPlanStep)
	e.fStr(&f, "reasoning", p.Reasoning)
	e.close(f)
}

func encPlanStep(e *taskEncoder, s *PlanStep) {
	f := e.open()
	e.fInt(&f, "index", s.Index)
	e.fStr(&f, "description", s.Description)
	e.fStr(&f, "action_type", string(s.ActionType))
	e.fStrMap(&f, "action_params", s.ActionParams)
	e.fBool(&f, "completed", s.Completed)
	e.close(f)
}

func encActionResult(e *taskEncoder, a *ActionResult) {
	f := e.open()
	e.fInt(&f, "step_index", a.StepIndex)
	e.fStr(&f, "action_type", string(a.ActionType))
	e.fStr(&f, "tool", a.Tool)
	e.fBool(&f, "success", a.Success)
	e.fStr(&f, "result", a.Result)
	e.fStr(&f, "error", a.Error)
	e.fInt64(&f, "duration_ms", a.DurationMS)
	e.fULID(&f, "event_id", a.EventID)
	e.close(f)
}

func encReflection(e *taskEncoder, r *Reflection) {
	f := e.open()
	e.fStr(&f, "verdict", r.Verdict)
	e.fStr(&f, "assessment", r.Assessment)
	e.fStrs(&f, "lessons", r.Lessons)
	e.fStr(&f, "next_focus", r.NextFocus)
	e.close(f)
}

func encPostReflection(e *taskEncoder, p *PostTaskReflection) {
	f := e.open()
	fSlice(e, &f, "facts", p.Facts, encFact)
	fPtr(e, &f, "episode", p.Episode, encEpisode)
	e.fStr(&f, "assessment", p.Assessment)
	e.fInt(&f, "tool_calls_count", p.ToolCallsCount)
	e.close(f)
}

func encFact(e *taskEncoder, x *Fact) {
	f := e.open()
	e.fStr(&f, "path", x.Path)
	e.fStr(&f, "content", x.Content)
	e.close(f)
}

func encEpisode(e *taskEncoder, x *Episode) {
	f := e.open()
	e.fStr(&f, "title", x.Title)
	e.fStr(&f, "summary", x.Summary)
	e.fStr(&f, "details", x.Details)
	e.fStr(&f, "lesson", x.Lesson)
	e.close(f)
}

func encToolCallStarted(e *taskEncoder, b *ToolCallStartedBody) {
	f := e.open()
	e.fInt(&f, "step_index", b.StepIndex)
	e.fStr(&f, "tool", b.Tool)
	e.fStr(&f, "tool_call_id", b.ToolCallID)
	e.fStr(&f, "arguments", b.Arguments)
	e.fStr(&f, "idempotency_key", b.IdempotencyKey)
	e.fStr(&f, "source", b.Source)
	e.fStr(&f, "task", b.Task)
	e.fStr(&f, "handle", b.Handle)
	e.close(f)
}

func encSubTaskCreated(e *taskEncoder, b *SubTaskCreatedBody) {
	f := e.open()
	e.fInt(&f, "step_index", b.StepIndex)
	e.fStr(&f, "task_id", b.TaskID)
	e.fStr(&f, "input", b.Input)
	e.close(f)
}

func encMessage(e *taskEncoder, m *Message) {
	f := e.open()
	e.fStr(&f, "role", m.Role)
	e.fStr(&f, "content", m.Content)
	e.fStr(&f, "name", m.Name)
	e.fStr(&f, "tool_call_id", m.ToolCallID)
	fSlice(e, &f, "tool_calls", m.ToolCalls, encToolCall)
	e.close(f)
}

func encDispatch(e *taskEncoder, d *Dispatch) {
	f := e.open()
	e.fStr(&f, "title", d.Title)
	e.fStr(&f, "description", d.Description)
	e.fStr(&f, "owner", d.Owner)
	e.fStrs(&f, "required_capabilities", d.RequiredCapabilities)
	e.fStr(&f, "assigned_agent", d.AssignedAgent)
	e.fTime(&f, "assigned_at", d.AssignedAt)
	e.fTime(&f, "started_at", d.StartedAt)
	e.fTime(&f, "completed_at", d.CompletedAt)
	e.fTime(&f, "last_progress_at", d.LastProgressAt)
	e.fStr(&f, "progress", d.Progress)
	e.fStr(&f, "result", d.Result)
	e.fStr(&f, "error", d.Error)
	e.fInt(&f, "retry_count", d.RetryCount)
	e.fInt(&f, "max_retries", d.MaxRetries)
	e.fBool(&f, "retry_eligible", d.RetryEligible)
	e.fInt(&f, "timeout_seconds", d.TimeoutSeconds)
	e.fInt(&f, "heartbeat_seconds", d.HeartbeatSeconds)
	e.fInt(&f, "retry_backoff_seconds", d.RetryBackoffSeconds)
	e.fTime(&f, "run_at", d.RunAt)
	e.fTime(&f, "not_before", d.NotBefore)
	e.fStr(&f, "timeout_reason", d.TimeoutReason)
	e.fBool(&f, "dead_lettered", d.DeadLettered)
	e.fStr(&f, "dead_letter_reason", d.DeadLetterReason)
	e.fTime(&f, "dead_lettered_at", d.DeadLetteredAt)
	e.fInt(&f, "requeues", d.Requeues)
	e.fStr(&f, "last_agent", d.LastAgent)
	e.fStrs(&f, "metadata_json", d.MetadataJSON)
	e.close(f)
}
