package traces

import (
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/attribute"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// Build maps the events of one task tree (the root task's stream and the
// streams of its descendants, as replay.TraceEvents gathers them, in log
// order) to spans. The first span is the root task's.
//
// Build is pure: the same events give the same spans with the same ids.
// Each task stream is a task span; within it, waiting for admission, each
// model call (its attempts as child spans when there were several), each
// tool call and each suspension are spans, and a broker task's waits for
// a worker and its attempts too. A descendant task's span is the child of
// the span its first event's causation belongs to (a worker tool's broker
// task under its tool call, the built-in agent's task under the broker
// attempt that started it). docs/tracing.md has the table.
func Build(events []eventlog.Event, opt Options) []Span {
	return new(Builder).build(events, opt, false)
}

// BuildShared is Build for events whose bodies are never changed while
// the spans are in use (the live export's copies): the spans' strings may
// be substrings of the bodies instead of copies.
func BuildShared(events []eventlog.Event, opt Options) []Span {
	return new(Builder).build(events, opt, true)
}

// Builder maps task trees as Build does, keeping its memory from one tree
// to the next: the spans of every build since the last Reset share a few
// arrays (their spans, attributes and span events), and its maps and
// per-task state are cleared rather than made again. The spans a build
// returns stay valid, unchanged, until Reset. A Builder is not safe for
// concurrent use; its zero value is ready.
type Builder struct {
	b      builder
	spans  arena[Span]
	attrs  arena[Attr]
	marks  arena[SpanEvent]
	states []*taskState               // kept for the next build's tasks
	names  map[[2]string]string       // "task T", "chat M": each once
	lists  map[string]attribute.Value // one-string lists (finish reasons)
}

// Build is Build with m's memory.
func (m *Builder) Build(events []eventlog.Event, opt Options) []Span {
	return m.build(events, opt, false)
}

// BuildShared is BuildShared with m's memory.
func (m *Builder) BuildShared(events []eventlog.Event, opt Options) []Span {
	return m.build(events, opt, true)
}

// Reset lets m reuse the memory of the spans it built: they must no
// longer be in use.
func (m *Builder) Reset() {
	m.spans.reset()
	m.attrs.reset()
	m.marks.reset()
}

// maxKept bounds the entries of a Builder's maps kept from one build to
// the next (beyond it they are made again: clearing a map costs its
// room).
const maxKept = 1024

func (m *Builder) build(events []eventlog.Event, opt Options, shared bool) []Span {
	if len(events) == 0 {
		return nil
	}
	root := events[0]
	corr := root.Correlation
	if corr == (ulid.ULID{}) {
		corr = root.ID
	}
	b := &m.b
	if b.tasks == nil || len(b.tasks) > maxKept {
		b.tasks = map[string]*taskState{}
	} else {
		clear(b.tasks)
	}
	b.spanOf.reset()
	b.mem, b.opt, b.shared, b.trace, b.last, b.order = m, opt, shared, TraceID(corr), time.Time{}, b.order[:0]
	b.spans = m.spans.open(len(events)/2 + 2)
	m.attrs.room(spanAttrs * (len(events)/4 + 1))
	for _, ev := range events {
		if ev.Time.After(b.last) {
			b.last = ev.Time
		}
	}
	for _, ev := range events {
		b.event(ev)
	}
	for _, ts := range b.order {
		b.finish(ts)
	}
	spans := b.spans
	m.spans.close(spans)
	clear(b.order) // the states stay in m.states
	b.spans, b.order, b.mem = nil, b.order[:0], nil
	return spans
}

// spanIndex maps event ids to span indexes: in two slices searched in
// turn while a tree has few events (a task's usual tree: cheaper than
// hashing each id), in a map beyond. Its memory is kept from one build
// to the next.
type spanIndex struct {
	ids   []ulid.ULID
	spans []int
	m     map[ulid.ULID]int // when more than spanIndexSlice ids
}

// spanIndexSlice is how many ids a spanIndex keeps in its slices.
const spanIndexSlice = 32

func (x *spanIndex) reset() {
	x.ids, x.spans = x.ids[:0], x.spans[:0]
	if x.m != nil {
		if len(x.m) > maxKept {
			x.m = nil
		} else {
			clear(x.m)
		}
	}
}

func (x *spanIndex) get(id ulid.ULID) (int, bool) {
	if len(x.m) > 0 {
		i, ok := x.m[id]
		return i, ok
	}
	for k := range x.ids {
		if x.ids[k] == id {
			return x.spans[k], true
		}
	}
	return 0, false
}

func (x *spanIndex) set(id ulid.ULID, span int) {
	if len(x.m) > 0 {
		x.m[id] = span
		return
	}
	for k := range x.ids {
		if x.ids[k] == id {
			x.spans[k] = span
			return
		}
	}
	if len(x.ids) < spanIndexSlice {
		x.ids, x.spans = append(x.ids, id), append(x.spans, span)
		return
	}
	if x.m == nil {
		x.m = make(map[ulid.ULID]int, 2*spanIndexSlice)
	}
	for k := range x.ids {
		x.m[x.ids[k]] = x.spans[k]
	}
	x.m[id] = span
	x.ids, x.spans = x.ids[:0], x.spans[:0]
}

// arena hands out consecutive parts of one array, kept between builds:
// a part that outgrows its room is given an array of its own by append,
// and a part that does not fit in what is left starts a larger array
// (the parts already handed out stay where they are).
type arena[T any] struct{ buf []T }

// room makes sure n more fit in the array.
func (a *arena[T]) room(n int) {
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]T, 0, max(2*cap(a.buf), n))
	}
}

// carve hands out an empty part with room for n.
func (a *arena[T]) carve(n int) []T {
	a.room(n)
	l := len(a.buf)
	a.buf = a.buf[:l+n]
	return a.buf[l : l : l+n]
}

// open hands out an empty part with room for at least n and all that is
// left, for appends until close.
func (a *arena[T]) open(n int) []T {
	a.room(n)
	return a.buf[len(a.buf):len(a.buf):cap(a.buf)]
}

// close takes back the room of open's part p that p did not use.
func (a *arena[T]) close(p []T) {
	if len(p) > 0 && cap(a.buf) > len(a.buf) && unsafe.SliceData(p) == unsafe.SliceData(a.buf[len(a.buf):]) {
		a.buf = a.buf[:len(a.buf)+len(p)]
	}
}

// reset takes back every part (clearing them: nothing they point at is
// kept alive).
func (a *arena[T]) reset() {
	clear(a.buf)
	a.buf = a.buf[:0]
}

// Handled lists every event type Build knows, with what it does with it:
// a type that opens, closes or marks a span, or one deliberately ignored
// (the streams that are not tasks').
var Handled = map[fsm.EventType]string{
	fsm.MessageReceived:    "input: the task span and its admission span; later, the answer that ends a suspension",
	fsm.WebhookTriggered:   "input: the task span and its admission span",
	fsm.ScheduleFired:      "input: the task span and its admission span",
	fsm.TaskCreated:        "ends the admission span (or starts the task span)",
	fsm.ReasonDone:         "ends the model call",
	fsm.NeedMoreInfo:       "ends the model call, opens a suspension (waiting for a human)",
	fsm.ToolCallStarted:    "opens a tool span (a repeat of the step's is an event of it)",
	fsm.ToolCallCompleted:  "ends the tool span",
	fsm.ToolCallFailed:     "ends the tool span with an error",
	fsm.StepCompleted:      "an event of the task span",
	fsm.TaskSuspended:      "opens a suspension",
	fsm.TaskResumed:        "ends the suspension",
	fsm.TaskFailed:         "ends the task span with an error",
	fsm.ModelCalled:        "an attempt of a model call span",
	fsm.TaskNotify:         "an event of the current span",
	fsm.TaskCompleted:      "ends the task span",
	fsm.ReflectionComplete: "ends the reflection's model call, an event of the task span",
	fsm.BudgetExceeded:     "an event of the task span",

	fsm.PerceiveDone:   "ends the model call",
	fsm.ThinkDone:      "ends the model call",
	fsm.PlanDone:       "ends the model call",
	fsm.ReflectDone:    "ends the model call",
	fsm.ActDone:        "ends the wait for a child task, an event of the task span",
	fsm.SubTaskCreated: "opens a suspension (waiting for a child task)",

	fsm.DispatchCreated:      "the broker task's span and its wait for a worker",
	fsm.DispatchAssigned:     "ends the wait, opens an attempt span",
	fsm.DispatchStarted:      "an event of the attempt",
	fsm.DispatchProgress:     "an event of the attempt",
	fsm.DispatchCompleted:    "ends the attempt and the broker task's span",
	fsm.DispatchFailed:       "ends the attempt with an error",
	fsm.DispatchTimedOut:     "ends the attempt with an error",
	fsm.DispatchRetried:      "opens a new wait for a worker",
	fsm.DispatchDeadLettered: "ends the broker task's span with an error",
	fsm.DispatchRequeued:     "reopens the broker task's span and a wait for a worker",
	fsm.DispatchUpdated:      "an event of the broker task's span",
	fsm.DispatchCancelled:    "ends the wait or the attempt with an error",

	"MEMORY_WRITTEN":    Ignored,
	"MEMORY_PATCHED":    Ignored,
	"MEMORY_APPENDED":   Ignored,
	"EPISODE_RECORDED":  Ignored,
	"SYSTEM_STARTED":    Ignored,
	"SYSTEM_STOPPED":    Ignored,
	"WORKER_REGISTERED": Ignored,
	"WORKER_DRAINED":    Ignored,
	"EVENTS_ARCHIVED":   Ignored,
	"SEQ_LOST":          Ignored,
	"DATA_LOST":         Ignored,
}

// Ignored is the entry of Handled for the types of the streams that are
// not tasks' ($memory, $system, $workers): Build draws nothing for them.
const Ignored = "ignored: not a task's event"

type builder struct {
	mem    *Builder
	opt    Options
	shared bool // decode with fsm.DecodeShared (BuildShared)
	trace  [16]byte
	last   time.Time // the latest event time: the end of an open span
	spans  []Span
	spanOf spanIndex // event id -> the span it belongs to
	tasks  map[string]*taskState
	order  []*taskState
}

// taskState is what Build holds of one stream while it maps it.
type taskState struct {
	stream string
	root   int

	admission int // open spans, -1 for none
	tool      int
	suspend   int
	wait      int // a broker task's wait for a worker
	attempt   int // a broker task's attempt
	attempts  int

	call    *modelCall
	callBuf modelCall // what call points at

	toolKey  string        // the open tool call's step and idempotency key
	messages []fsm.Message // the conversation so far (Options.Contents)
}

// modelCall is the model call being mapped: its span and its attempts.
type modelCall struct {
	span     int
	purpose  string
	attempts []attempt
}

type attempt struct {
	ev   eventlog.Event
	body *fsm.ModelCalledBody
}

// SpanIDFor is the id of a span an event opens besides the one SpanID
// gives (a task's admission, a model call around its attempts): FNV-1a
// over the event's ULID and part, never zero. SpanIDFor(id, "") is
// SpanID(id).
func SpanIDFor(id ulid.ULID, part string) [8]byte {
	h := fnv.New64a()
	h.Write(id[:])
	h.Write([]byte(part))
	v := h.Sum64()
	if v == 0 {
		v = 1
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b
}

func (b *builder) open(id [8]byte, parent int, kind Kind, name, task string, start time.Time) int {
	s := Span{TraceID: b.trace, SpanID: id, Name: name, Kind: kind, Task: task, Start: start, End: start, Open: true}
	if parent >= 0 {
		s.Parent = b.spans[parent].SpanID
	}
	b.spans = append(b.spans, s)
	return len(b.spans) - 1
}

// close ends span i at t with status code and message.
func (b *builder) close(i int, t time.Time, code StatusCode, msg string) {
	if i < 0 {
		return
	}
	s := &b.spans[i]
	if t.After(s.End) {
		s.End = t
	}
	if s.End.Before(s.Start) {
		s.End = s.Start
	}
	s.Open = false
	s.Status = code
	s.StatusMessage = msg
}

func (b *builder) attr(i int, a Attr) {
	if isEmpty(a) {
		return
	}
	s := &b.spans[i]
	if s.Attrs == nil {
		// A span's usual attributes, carved from the builder's arena.
		n := spanAttrs
		if s.Kind == KindTask || s.Kind == KindWorker {
			n = taskAttrs
		}
		s.Attrs = b.mem.attrs.carve(n)
	}
	s.Attrs = append(s.Attrs, a)
}

// isEmpty says a is an empty string: the mapping leaves those out (and
// empty lists, which it does not make).
func isEmpty(a Attr) bool {
	return a.Value.Type() == attribute.STRING && a.Value.AsString() == ""
}

// spanAttrs is the room a span's attributes get in the arena (taskAttrs
// a task's); a span with more grows its own.
const (
	spanAttrs = 10
	taskAttrs = 16
)

// spanMarks is the room a span's events get in the arena.
const spanMarks = 4

func (b *builder) mark(i int, name string, t time.Time, attrs ...Attr) {
	if i < 0 {
		return
	}
	n := 0
	for _, a := range attrs {
		if !isEmpty(a) {
			n++
		}
	}
	var kept []Attr
	if n > 0 {
		kept = b.mem.attrs.carve(n)
		for _, a := range attrs {
			if !isEmpty(a) {
				kept = append(kept, a)
			}
		}
	}
	s := &b.spans[i]
	if s.Events == nil {
		s.Events = b.mem.marks.carve(spanMarks)
	}
	s.Events = append(s.Events, SpanEvent{Name: name, Time: t, Attrs: kept})
}

// task returns the state of ev's stream, opening its span at its first
// event (first reports that it did).
func (b *builder) task(ev eventlog.Event) (ts *taskState, first bool) {
	if ts, ok := b.tasks[ev.Stream]; ok {
		return ts, false
	}
	parent := -1
	if len(b.spans) > 0 {
		parent = 0
		if i, ok := b.spanOf.get(ev.Causation); ok && ev.Causation != (ulid.ULID{}) {
			parent = i
		}
	}
	ts = b.newState(ev.Stream)
	kind, name := KindTask, "task"
	if ev.Type == string(fsm.DispatchCreated) {
		kind, name = KindWorker, "dispatch"
	}
	id := SpanID(ev.ID)
	switch fsm.EventType(ev.Type) {
	case fsm.MessageReceived, fsm.WebhookTriggered, fsm.ScheduleFired, fsm.TaskCreated, fsm.DispatchCreated:
	default:
		// A stream seen from the middle (a part of an archive): its first
		// event may open a span of its own.
		id = SpanIDFor(ev.ID, "task")
	}
	ts.root = b.open(id, parent, kind, name, ev.Stream, ev.Time)
	b.attr(ts.root, attribute.String("pegasus.task.id", ev.Stream))
	b.tasks[ev.Stream] = ts
	b.order = append(b.order, ts)
	return ts, true
}

// newState is the state of a task the build has not seen yet, reusing
// one of an earlier build.
func (b *builder) newState(stream string) *taskState {
	var ts *taskState
	if n := len(b.order); n < len(b.mem.states) {
		ts = b.mem.states[n]
	} else {
		ts = new(taskState)
		b.mem.states = append(b.mem.states, ts)
	}
	attempts := ts.callBuf.attempts[:0]
	clear(attempts[:cap(attempts)])
	*ts = taskState{stream: stream, admission: -1, tool: -1, suspend: -1, wait: -1, attempt: -1}
	ts.callBuf.attempts = attempts
	return ts
}

// joined is prefix+s, made once while the builder keeps it.
func (b *builder) joined(prefix, s string) string {
	m := b.mem
	if v, ok := m.names[[2]string{prefix, s}]; ok {
		return v
	}
	v := prefix + s
	if m.names == nil || len(m.names) >= maxKept {
		m.names = map[[2]string]string{}
	}
	m.names[[2]string{prefix, v[len(prefix):]}] = v // the key is v's, not the body's
	return v
}

// stringList is the list of the one string s, made once while the
// builder keeps it.
func (b *builder) stringList(s string) attribute.Value {
	m := b.mem
	if v, ok := m.lists[s]; ok {
		return v
	}
	s = strings.Clone(s)
	v := attribute.StringSliceValue([]string{s})
	if m.lists == nil || len(m.lists) >= maxKept {
		m.lists = map[string]attribute.Value{}
	}
	m.lists[s] = v
	return v
}

func (b *builder) event(ev eventlog.Event) {
	if strings.HasPrefix(ev.Stream, "$") || ev.Stream == "" {
		return
	}
	if _, dup := b.spanOf.get(ev.ID); dup {
		return // the log holds each event once
	}
	switch fsm.EventType(ev.Type) {
	case fsm.ModelCalled, fsm.ToolCallStarted, fsm.ToolCallCompleted, fsm.ToolCallFailed:
		ev.Time = known(ev)
	}
	ts, first := b.task(ev)
	cur := ts.root
	if r := &b.spans[ts.root]; r.Open && ev.Time.After(r.End) {
		r.End = ev.Time // an ended task keeps its end: a later reflection is a child after it
	}
	if ts.call != nil && ev.Type != string(fsm.ModelCalled) {
		b.endCall(ts, ev.Time, true)
	}
	if b.bodyUnused(fsm.EventType(ev.Type)) {
		if ev.Type == string(fsm.TaskCompleted) {
			b.completed(ts, ev)
		}
		b.spanOf.set(ev.ID, cur)
		return
	}
	var body fsm.Body
	var err error
	if b.shared && len(ev.Body) > 0 {
		body, err = fsm.DecodeShared(fsm.EventType(ev.Type), ev.Schema, unsafe.String(unsafe.SliceData(ev.Body), len(ev.Body)))
	} else {
		body, err = fsm.Decode(fsm.EventType(ev.Type), ev.Schema, ev.Body)
	}
	if err != nil {
		b.mark(ts.root, "undecodable event", ev.Time, attribute.String("pegasus.event.type", ev.Type), attribute.String("error.type", err.Error()))
		b.spanOf.set(ev.ID, cur)
		return
	}
	switch x := body.(type) {
	case *fsm.Input:
		cur = b.input(ts, ev, x, first)
	case *fsm.TaskCreatedBody:
		b.created(ts, ev, x)
	case *fsm.ModelCalledBody:
		cur = b.modelCalled(ts, ev, x)
	case *fsm.ReasonDoneBody:
		b.conversation(ts, x.NewMessages)
	case *fsm.NeedMoreInfoBody:
		b.conversation(ts, x.NewMessages)
		cur = b.suspend(ts, ev, "waiting for a human", "human")
		if b.opt.Contents {
			b.attr(cur, attribute.String("pegasus.question", x.Reasoning.Question))
		}
	case *fsm.PerceiveDoneBody:
		b.conversation(ts, x.NewMessages)
	case *fsm.ThinkDoneBody:
		b.conversation(ts, x.NewMessages)
	case *fsm.PlanDoneBody:
		b.conversation(ts, x.NewMessages)
	case *fsm.ReflectDoneBody:
		b.conversation(ts, x.NewMessages)
		b.mark(ts.root, "reflected", ev.Time, attribute.String("pegasus.verdict", x.Reflection.Verdict))
	case *fsm.ToolCallStartedBody:
		cur = b.toolStarted(ts, ev, x)
	case *fsm.ToolCallResultBody:
		cur = b.toolEnded(ts, ev, x)
	case *fsm.StepCompletedBody:
		b.conversation(ts, x.NewMessages)
		b.mark(ts.root, "step completed", ev.Time, attribute.Int64("pegasus.step.index", int64(x.StepIndex)))
	case *fsm.TaskSuspendedBody:
		cur = b.suspend(ts, ev, "suspended", x.Reason)
	case *fsm.TaskResumedBody:
		b.mark(ts.suspend, "resumed", ev.Time, attribute.String("pegasus.reason", x.Reason))
		b.close(ts.suspend, ev.Time, StatusUnset, "")
		ts.suspend = -1
	case *fsm.TaskFailedBody:
		msg := x.Error
		if msg == "" {
			msg = x.Reason
		}
		b.endAll(ts, ev.Time, "task failed")
		b.attr(ts.root, attribute.String("pegasus.task.state", "failed"))
		b.attr(ts.root, attribute.String("pegasus.task.reason", x.Reason))
		b.close(ts.root, ev.Time, StatusError, msg)
	case *fsm.ReflectionCompleteBody:
		b.mark(ts.root, "reflection complete", ev.Time)
	case *fsm.TaskNotifyBody:
		at := ts.root
		if ts.tool >= 0 {
			at = ts.tool
		}
		var attrs []Attr
		if b.opt.Contents {
			attrs = append(attrs, attribute.String("pegasus.message", x.Message))
		}
		b.mark(at, "notify", ev.Time, attrs...)
		cur = at
	case *fsm.BudgetExceededBody:
		b.mark(ts.root, "budget exceeded", ev.Time, attribute.String("pegasus.budget", x.Budget), attribute.String("pegasus.budget.policy", x.Policy),
			attribute.String("gen_ai.request.model", x.Model), attribute.Int64("pegasus.budget.spent_tokens", int64(x.SpentTokens)),
			attribute.Int64("pegasus.budget.max_tokens", int64(x.MaxTokens)))
	case *fsm.SubTaskCreatedBody:
		cur = b.suspend(ts, ev, "waiting for a child task", "child")
		b.attr(cur, attribute.String("pegasus.child_task", x.TaskID))
	case *fsm.ActDoneBody:
		b.conversation(ts, x.NewMessages)
		if ts.suspend >= 0 && b.spans[ts.suspend].Name == "waiting for a child task" {
			code, msg := StatusUnset, ""
			if x.Error != "" {
				code, msg = StatusError, x.Error
			}
			b.close(ts.suspend, ev.Time, code, msg)
			ts.suspend = -1
		}
		b.mark(ts.root, "step done", ev.Time, attribute.Int64("pegasus.step.index", int64(x.StepIndex)))

	case *fsm.DispatchCreatedBody:
		b.dispatchCreated(ts, ev, x)
		cur = ts.root
	case *fsm.DispatchAssignedBody:
		b.endWait(ts, ev.Time, StatusUnset, "")
		ts.attempt = b.open(SpanID(ev.ID), ts.root, KindAttempt, "attempt "+itoa(ts.attempts+1)+" "+x.Worker, ts.stream, ev.Time)
		b.attr(ts.attempt, attribute.String("pegasus.worker", x.Worker))
		ts.attempts++
		b.attr(ts.attempt, attribute.Int64("pegasus.attempt", int64(ts.attempts)))
		cur = ts.attempt
	case *fsm.DispatchReportBody:
		cur = b.dispatchReport(ts, ev, x)
	case *fsm.DispatchTimedOutBody:
		cur = max(ts.attempt, ts.root)
		b.mark(ts.attempt, "timed out", ev.Time)
		b.close(ts.attempt, ev.Time, StatusError, "timed out")
		ts.attempt = -1
	case *fsm.DispatchRetriedBody:
		b.mark(ts.root, "retried", ev.Time, attribute.Int64("pegasus.jitter_ms", x.JitterMS))
		b.openWait(ts, ev)
		cur = ts.wait
	case *fsm.DispatchDeadLetteredBody:
		b.endWait(ts, ev.Time, StatusError, "dead-lettered")
		b.mark(ts.root, "dead-lettered", ev.Time, attribute.String("pegasus.reason", x.Reason))
		b.attr(ts.root, attribute.String("pegasus.task.state", "dead_lettered"))
		b.close(ts.root, ev.Time, StatusError, "dead-lettered: "+x.Reason)
	case *fsm.DispatchRequeuedBody:
		b.mark(ts.root, "requeued", ev.Time, attribute.String("pegasus.reason", x.Reason), attribute.String("pegasus.agent", x.AgentID))
		r := &b.spans[ts.root]
		r.Open, r.Status, r.StatusMessage = true, StatusUnset, ""
		b.openWait(ts, ev)
		cur = ts.wait
	case *fsm.DispatchUpdatedBody:
		b.mark(ts.root, "updated", ev.Time, attribute.String("pegasus.agent", x.AgentID))
	case *fsm.DispatchCancelledBody:
		msg := "cancelled: " + x.Reason
		b.mark(ts.root, "cancelled", ev.Time, attribute.String("pegasus.reason", x.Reason), attribute.String("pegasus.agent", x.AgentID))
		b.endWait(ts, ev.Time, StatusError, msg)
		b.close(ts.attempt, ev.Time, StatusError, msg)
		ts.attempt = -1
	}
	b.spanOf.set(ev.ID, cur)
}

// bodyUnused says the mapping draws nothing from the body of an event of
// type t: a task's result, and without Options.Contents the stages'
// conversations. Such bodies are not decoded.
func (b *builder) bodyUnused(t fsm.EventType) bool {
	switch t {
	case fsm.TaskCompleted:
		return true
	case fsm.ReasonDone, fsm.PerceiveDone, fsm.ThinkDone, fsm.PlanDone:
		return !b.opt.Contents
	}
	return false
}

// completed ends a task that completed.
func (b *builder) completed(ts *taskState, ev eventlog.Event) {
	b.endAll(ts, ev.Time, "")
	b.attr(ts.root, attribute.String("pegasus.task.state", "completed"))
	b.close(ts.root, ev.Time, StatusOK, "")
}

// input maps an input: the first event of a task (its span, and the wait
// for admission), or an answer to a suspended task.
func (b *builder) input(ts *taskState, ev eventlog.Event, x *fsm.Input, first bool) int {
	if first {
		r := ts.root
		if x.TaskType != "" {
			b.spans[r].Name = b.joined("task ", x.TaskType)
		}
		b.attr(r, attribute.String("pegasus.task.type", x.TaskType))
		b.attr(r, attribute.String("pegasus.source", x.Source))
		b.attr(r, attribute.String("pegasus.input.kind", string(x.Kind)))
		b.attr(r, attribute.String("pegasus.input.name", x.Name))
		b.attr(r, attribute.String("pegasus.parent_task_id", x.ParentTaskID))
		if b.opt.Contents {
			b.attr(r, attribute.String("pegasus.input.text", x.Text))
		}
		ts.admission = b.open(SpanIDFor(ev.ID, "admission"), r, KindAdmission, "admission", ts.stream, ev.Time)
		return ts.admission
	}
	// An answer: it ends the suspension.
	if b.opt.Contents {
		ts.messages = append(ts.messages, fsm.Message{Role: "user", Content: x.Text})
	}
	b.mark(ts.suspend, "answered", ev.Time, attribute.String("pegasus.source", x.Source))
	b.close(ts.suspend, ev.Time, StatusUnset, "")
	ts.suspend = -1
	return ts.root
}

func (b *builder) created(ts *taskState, ev eventlog.Event, x *fsm.TaskCreatedBody) {
	r := ts.root
	b.close(ts.admission, ev.Time, StatusUnset, "")
	ts.admission = -1
	if x.TaskType != "" {
		b.spans[r].Name = b.joined("task ", x.TaskType)
	}
	m := x.Machine
	if m.Name == "" {
		m = fsm.CurrentMachine
	}
	b.setAttr(r, attribute.String("pegasus.task.type", x.TaskType))
	machine := currentMachine
	if m != fsm.CurrentMachine {
		machine = m.String()
	}
	b.setAttr(r, attribute.String("pegasus.machine", machine))
	b.setAttr(r, attribute.String("pegasus.source", x.Source))
	b.setAttr(r, attribute.String("pegasus.parent_task_id", x.ParentTaskID))
	b.setAttr(r, attribute.String("pegasus.model", x.Model))
	b.setAttr(r, attribute.String("pegasus.concurrency_key", x.ConcurrencyKey))
	b.setAttr(r, attribute.Int64("pegasus.priority", int64(x.Priority)))
	b.mark(r, "admitted", ev.Time)
	if b.opt.Contents {
		b.setAttr(r, attribute.String("pegasus.input.text", x.InputText))
	}
}

// currentMachine is the name of the machine most tasks run.
var currentMachine = fsm.CurrentMachine.String()

// setAttr sets key on span i, replacing a value it has.
func (b *builder) setAttr(i int, a Attr) {
	for j, o := range b.spans[i].Attrs {
		if o.Key == a.Key {
			if !isEmpty(a) {
				b.spans[i].Attrs[j] = a
			}
			return
		}
	}
	b.attr(i, a)
}

func (b *builder) conversation(ts *taskState, msgs []fsm.Message) {
	if b.opt.Contents {
		ts.messages = append(ts.messages, msgs...)
	}
}

// modelCalled maps one attempt: a new model call at attempt 1 (or after
// another purpose's), else the next attempt of the call.
func (b *builder) modelCalled(ts *taskState, ev eventlog.Event, x *fsm.ModelCalledBody) int {
	if c := ts.call; c != nil && (x.Attempt <= 1 || c.purpose != x.Purpose) {
		b.endCall(ts, ev.Time, true) // a new call: the last one gave up
	}
	start := ev.Time.Add(-time.Duration(x.LatencyMS) * time.Millisecond)
	if ts.call == nil {
		name := "chat"
		if x.Model != "" {
			name = b.joined("chat ", x.Model)
		}
		i := b.open(SpanIDFor(ev.ID, "call"), ts.root, KindModel, name, ts.stream, start)
		ts.callBuf = modelCall{span: i, purpose: x.Purpose, attempts: ts.callBuf.attempts[:0]}
		ts.call = &ts.callBuf
		b.attr(i, attribute.String("gen_ai.operation.name", "chat"))
		b.attr(i, attribute.String("gen_ai.request.model", x.Model))
		b.attr(i, attribute.String("pegasus.purpose", x.Purpose))
		if b.opt.Contents {
			b.attr(i, attribute.String("gen_ai.input.messages", inputMessages(ts.messages)))
		}
	}
	c := ts.call
	c.attempts = append(c.attempts, attempt{ev: ev, body: x})
	s := &b.spans[c.span]
	if start.Before(s.Start) {
		s.Start = start
	}
	if ev.Time.After(s.End) {
		s.End = ev.Time
	}
	return c.span
}

// endCall ends the model call of ts: its attributes from its attempts,
// its attempts as child spans when there were several. outcome says an
// event of the stream followed the call (so it ended even if its last
// attempt failed).
func (b *builder) endCall(ts *taskState, t time.Time, outcome bool) {
	c := ts.call
	ts.call = nil
	i := c.span
	lastA := c.attempts[len(c.attempts)-1]
	var in, out int64
	for _, a := range c.attempts {
		in += int64(a.body.PromptTokens)
		out += int64(a.body.CompletionTokens)
	}
	if lastA.body.Error == "" {
		b.attr(i, attribute.String("gen_ai.response.model", lastA.body.Model))
		b.attr(i, attribute.Int64("gen_ai.usage.input_tokens", in))
		b.attr(i, attribute.Int64("gen_ai.usage.output_tokens", out))
		if lastA.body.FinishReason != "" {
			b.attr(i, attribute.KeyValue{Key: "gen_ai.response.finish_reasons", Value: b.stringList(lastA.body.FinishReason)})
		}
		if b.opt.Contents {
			b.attr(i, attribute.String("gen_ai.output.messages", outputMessages(lastA.body)))
		}
	}
	b.attr(i, attribute.Int64("pegasus.attempts", int64(len(c.attempts))))
	if len(c.attempts) > 1 {
		for n, a := range c.attempts {
			start := a.ev.Time.Add(-time.Duration(a.body.LatencyMS) * time.Millisecond)
			j := b.open(SpanID(a.ev.ID), i, KindAttempt, "attempt "+itoa(a.body.Attempt)+" "+a.body.Model, ts.stream, start)
			b.attr(j, attribute.Int64("pegasus.attempt", int64(a.body.Attempt)))
			b.attr(j, attribute.String("gen_ai.request.model", a.body.Model))
			if a.body.Status != 0 {
				b.attr(j, attribute.Int64("http.response.status_code", int64(a.body.Status)))
			}
			if n > 0 && a.body.Model != c.attempts[n-1].body.Model {
				b.attr(j, attribute.Bool("pegasus.fallback", true))
			}
			code, msg := StatusOK, ""
			if a.body.Error != "" {
				code, msg = StatusError, a.body.Error
				b.attr(j, attribute.String("error.type", errorType(a.body)))
			}
			b.close(j, a.ev.Time, code, msg)
			b.spanOf.set(a.ev.ID, j)
		}
	}
	switch {
	case lastA.body.Error != "" && !outcome:
		// a retry may follow: the call is still running.
		b.spans[i].End = b.last
		return
	case lastA.body.Error != "":
		b.attr(i, attribute.String("error.type", errorType(lastA.body)))
		b.close(i, lastA.ev.Time, StatusError, lastA.body.Error)
	default:
		b.close(i, lastA.ev.Time, StatusOK, "")
	}
}

func errorType(x *fsm.ModelCalledBody) string {
	if x.Status != 0 {
		return "http " + itoa(x.Status)
	}
	return "error"
}

func itoa(n int) string { return strconv.Itoa(n) }

func (b *builder) suspend(ts *taskState, ev eventlog.Event, name, reason string) int {
	b.close(ts.suspend, ev.Time, StatusUnset, "")
	ts.suspend = b.open(SpanID(ev.ID), ts.root, KindSuspend, name, ts.stream, ev.Time)
	b.attr(ts.suspend, attribute.String("pegasus.suspend.reason", reason))
	return ts.suspend
}

func (b *builder) toolStarted(ts *taskState, ev eventlog.Event, x *fsm.ToolCallStartedBody) int {
	key := itoa(x.StepIndex) + "\x00" + x.IdempotencyKey
	if ts.tool >= 0 && ts.toolKey == key {
		// The same call again: a handle recorded, or a run after a crash.
		b.mark(ts.tool, "started again", ev.Time, attribute.String("pegasus.tool.handle", x.Handle))
		return ts.tool
	}
	b.close(ts.tool, ev.Time, StatusError, "superseded")
	name := "execute_tool"
	if x.Tool != "" {
		name = b.joined("execute_tool ", x.Tool)
	}
	i := b.open(SpanID(ev.ID), ts.root, KindTool, name, ts.stream, ev.Time)
	ts.tool, ts.toolKey = i, key
	b.attr(i, attribute.String("gen_ai.operation.name", "execute_tool"))
	b.attr(i, attribute.String("gen_ai.tool.name", x.Tool))
	b.attr(i, attribute.String("gen_ai.tool.call.id", x.ToolCallID))
	source := x.Source
	if source == "" {
		source = "built-in"
	}
	b.attr(i, attribute.String("pegasus.tool.source", source))
	if s, ok := strings.CutPrefix(x.Source, "mcp:"); ok {
		b.attr(i, attribute.String("pegasus.tool.mcp_server", s))
	}
	if s, ok := strings.CutPrefix(x.Source, "worker:"); ok {
		b.attr(i, attribute.String("pegasus.tool.capability", s))
	}
	b.attr(i, attribute.String("pegasus.broker_task", x.Task))
	b.attr(i, attribute.Int64("pegasus.step.index", int64(x.StepIndex)))
	if b.opt.Contents {
		b.attr(i, attribute.String("gen_ai.tool.call.arguments", x.Arguments))
	}
	return i
}

func (b *builder) toolEnded(ts *taskState, ev eventlog.Event, x *fsm.ToolCallResultBody) int {
	b.conversation(ts, x.NewMessages)
	i := ts.tool
	if i < 0 {
		// No TOOL_CALL_STARTED (a log written before it existed): the span
		// is drawn from the call's duration.
		start := ev.Time.Add(-time.Duration(x.DurationMS) * time.Millisecond)
		i = b.open(SpanIDFor(ev.ID, "tool"), ts.root, KindTool, "execute_tool "+x.Tool, ts.stream, start)
		b.attr(i, attribute.String("gen_ai.operation.name", "execute_tool"))
		b.attr(i, attribute.String("gen_ai.tool.name", x.Tool))
		b.attr(i, attribute.String("gen_ai.tool.call.id", x.ToolCallID))
	}
	ts.tool = -1
	b.attr(i, attribute.Int64("pegasus.tool.duration_ms", x.DurationMS))
	if b.opt.Contents {
		b.attr(i, attribute.String("gen_ai.tool.call.result", x.Result))
	}
	if x.Error != "" {
		b.attr(i, attribute.String("error.type", "tool_error"))
		b.close(i, ev.Time, StatusError, x.Error)
	} else {
		b.close(i, ev.Time, StatusOK, "")
	}
	return i
}

// endAll ends the open spans of ts at t (the task ended); msg, when set,
// is the error of the ones that were still running.
func (b *builder) endAll(ts *taskState, t time.Time, msg string) {
	code := StatusUnset
	if msg != "" {
		code = StatusError
	}
	b.close(ts.admission, t, StatusUnset, "")
	b.close(ts.suspend, t, StatusUnset, "")
	b.close(ts.tool, t, code, msg)
	ts.admission, ts.suspend, ts.tool = -1, -1, -1
}

func (b *builder) dispatchCreated(ts *taskState, ev eventlog.Event, x *fsm.DispatchCreatedBody) {
	r := ts.root
	b.spans[r].Name = b.joined("dispatch ", x.Title)
	b.attr(r, attribute.String("pegasus.machine", "dispatch.task@1"))
	b.attr(r, attribute.String("pegasus.source", x.Source))
	b.attr(r, attribute.String("pegasus.parent_task_id", x.ParentTaskID))
	if len(x.RequiredCapabilities) > 0 {
		b.attr(r, attribute.StringSlice("pegasus.dispatch.capabilities", x.RequiredCapabilities))
	}
	b.attr(r, attribute.Int64("pegasus.dispatch.max_retries", int64(x.MaxRetries)))
	b.attr(r, attribute.Int64("pegasus.dispatch.timeout_seconds", int64(x.TimeoutSeconds)))
	b.openWait(ts, ev)
	if !x.RunAt.IsZero() {
		b.attr(ts.wait, attribute.String("pegasus.dispatch.run_at", x.RunAt.UTC().Format(time.RFC3339Nano)))
	}
}

func (b *builder) openWait(ts *taskState, ev eventlog.Event) {
	b.endWait(ts, ev.Time, StatusUnset, "")
	ts.wait = b.open(SpanIDFor(ev.ID, "wait"), ts.root, KindSuspend, "waiting for a worker", ts.stream, ev.Time)
}

func (b *builder) endWait(ts *taskState, t time.Time, code StatusCode, msg string) {
	b.close(ts.wait, t, code, msg)
	ts.wait = -1
}

func (b *builder) dispatchReport(ts *taskState, ev eventlog.Event, x *fsm.DispatchReportBody) int {
	at := ts.attempt
	if at < 0 {
		at = ts.root
	}
	switch fsm.EventType(ev.Type) {
	case fsm.DispatchStarted:
		b.mark(at, "started", ev.Time, attribute.String("pegasus.message", x.Message))
	case fsm.DispatchProgress:
		b.mark(at, "progress", ev.Time, attribute.String("pegasus.message", x.Message))
	case fsm.DispatchCompleted:
		if b.opt.Contents {
			b.attr(at, attribute.String("pegasus.dispatch.result", x.Result))
		}
		b.close(ts.attempt, ev.Time, StatusOK, "")
		ts.attempt = -1
		b.endWait(ts, ev.Time, StatusUnset, "")
		b.attr(ts.root, attribute.String("pegasus.task.state", "completed"))
		b.close(ts.root, ev.Time, StatusOK, "")
	case fsm.DispatchFailed:
		b.close(ts.attempt, ev.Time, StatusError, x.Error)
		ts.attempt = -1
	}
	return at
}

// finish leaves the spans of a stream that did not end open, up to the
// latest event.
func (b *builder) finish(ts *taskState) {
	if ts.call != nil {
		b.endCall(ts, b.last, false)
	}
	for _, i := range []int{ts.root, ts.admission, ts.tool, ts.suspend, ts.wait, ts.attempt} {
		if i >= 0 && b.spans[i].Open {
			b.spans[i].End = b.last
		}
	}
}

// inputMessages is the gen_ai.input.messages of a call: the conversation
// so far, in the GenAI conventions' JSON shape.
func inputMessages(msgs []fsm.Message) string {
	out := make([]map[string]any, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, message(m.Role, m.Content, m.ToolCallID, m.ToolCalls, ""))
	}
	return jsonText(out)
}

func outputMessages(x *fsm.ModelCalledBody) string {
	return jsonText([]map[string]any{message("assistant", x.Content, "", x.ToolCalls, x.FinishReason)})
}

func message(role, content, callID string, calls []fsm.ToolCall, finish string) map[string]any {
	var parts []map[string]any
	if role == "tool" {
		parts = append(parts, map[string]any{"type": "tool_call_response", "id": callID, "response": content})
	} else if content != "" {
		parts = append(parts, map[string]any{"type": "text", "content": content})
	}
	for _, c := range calls {
		parts = append(parts, map[string]any{"type": "tool_call", "id": c.ID, "name": c.Name, "arguments": json.RawMessage(validJSON(c.Arguments))})
	}
	m := map[string]any{"role": role, "parts": parts}
	if finish != "" {
		m["finish_reason"] = finish
	}
	return m
}

func validJSON(s string) string {
	if json.Valid([]byte(s)) {
		return s
	}
	q, _ := json.Marshal(s)
	return string(q)
}

func jsonText(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(data)
}

// known is when a model call's or a tool call's event became known: its
// commit's time, or the earlier time of its id when the agent drew the id
// and held the event for a later commit (a tool call's outcome appended
// with the next model call's, a built-in tool that only reads recorded
// with the model's answer that asked for it: docs/agent.md). An id the
// log drew at the commit is of the commit's millisecond.
func known(ev eventlog.Event) time.Time {
	if t := ulid.Time(ev.ID.Time()); ev.Time.Sub(t) > time.Millisecond {
		return t.UTC()
	}
	return ev.Time
}
