// Package replaytest generates random, valid Pegasus histories for tests
// and benchmarks: many tasks interleaved, each driven through the real
// fsm (so every event is legal), with their inputs, memory writes and
// system events. The same seed gives the same history, byte for byte.
package replaytest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// Config shapes a generated history.
type Config struct {
	// Tasks is how many tasks are created.
	Tasks int
	// Concurrency is how many tasks are in progress at once (their events
	// interleave). Default 8.
	Concurrency int
	// Start is the time of the first event. Default 2025-01-01T00:00:00Z.
	Start time.Time
	// Finish drives every task to a terminal state; otherwise up to
	// Concurrency tasks are left where they are (reasoning, acting,
	// suspended), as a crash would leave them.
	Finish bool
	// TextSize is the typical size of text fields in bytes. Default 64.
	TextSize int
	// InputSize is the typical size of a task's input text in bytes.
	// Default TextSize.
	InputSize int
}

// Generator produces one history.
type Generator struct {
	cfg    Config
	rng    *rand.Rand
	now    time.Time
	seq    uint64
	vers   map[string]uint64
	events []eventlog.Event
	memory map[string]string
	live   []*genTask
	made   int
	// started and ended mark SYSTEM_STARTED and the end of the history
	// written (see step).
	started, ended bool
}

type genTask struct {
	task    fsm.Task
	last    ulid.ULID // last event id of the task, the causation of the next
	root    ulid.ULID // the input
	done    bool      // nothing more will be appended
	results bool      // TASK_COMPLETED recorded
}

// New returns a generator for seed.
func New(seed uint64, cfg Config) *Generator {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if cfg.TextSize <= 0 {
		cfg.TextSize = 64
	}
	if cfg.InputSize <= 0 {
		cfg.InputSize = cfg.TextSize
	}
	return &Generator{
		cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: cfg.Start,
		vers: map[string]uint64{}, memory: map[string]string{},
	}
}

// Generate returns the whole history for seed.
func Generate(seed uint64, cfg Config) []eventlog.Event {
	g := New(seed, cfg)
	g.Run()
	return g.Events()
}

// Events returns the events generated so far, Seq and Version assigned.
func (g *Generator) Events() []eventlog.Event { return g.events }

// Run generates the history.
func (g *Generator) Run() {
	for g.step() {
	}
}

// Next generates at least n more events (fewer at the end of the history)
// and hands them over: the generator forgets them, so a long history can
// be streamed in constant memory. It returns nil once the history ended.
func (g *Generator) Next(n int) []eventlog.Event {
	for len(g.events) < n && g.step() {
	}
	out := g.events
	g.events = nil
	return out
}

// step generates the next event or few; false once the history ended.
func (g *Generator) step() bool {
	switch {
	case g.ended:
		return false
	case !g.started:
		g.started = true
		g.system("SYSTEM_STARTED")
		return true
	}
	if g.made < g.cfg.Tasks || len(g.live) > 0 {
		for g.made < g.cfg.Tasks && len(g.live) < g.cfg.Concurrency {
			g.create()
		}
		if len(g.live) > 0 {
			i := g.rng.IntN(len(g.live))
			t := g.live[i]
			if !g.cfg.Finish && g.made >= g.cfg.Tasks && g.rng.IntN(4) == 0 {
				// Leave the remaining tasks mid-flight, like a crash would.
				if t.task.State.IsActive() || t.task.State == fsm.StateSuspended {
					g.live = append(g.live[:i], g.live[i+1:]...)
					return true
				}
			}
			g.advance(t)
			if t.done {
				g.live = append(g.live[:i], g.live[i+1:]...)
			}
			return true
		}
	}
	g.ended = true
	if g.rng.IntN(2) == 0 {
		g.system("SYSTEM_STOPPED")
	}
	return false
}

func (g *Generator) tick() time.Time {
	g.now = g.now.Add(time.Duration(1+g.rng.IntN(2000)) * time.Millisecond)
	return g.now
}

func (g *Generator) newID(t time.Time) ulid.ULID {
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(t))
	var e [10]byte
	binary.BigEndian.PutUint64(e[:8], g.rng.Uint64())
	binary.BigEndian.PutUint16(e[8:], uint16(g.rng.Uint32()))
	_ = id.SetEntropy(e[:])
	return id
}

func (g *Generator) text(what string) string { return g.textOf(what, g.cfg.TextSize) }

func (g *Generator) textOf(what string, size int) string {
	n := size/2 + g.rng.IntN(size+1)
	var b strings.Builder
	b.Grow(n + 16)
	b.WriteString(what)
	words := []string{"search", "the", "papers", "about", "event", "sourcing", "and", "write", "a", "summary", "file", "tool", "result", "plan"}
	for b.Len() < n {
		b.WriteByte(' ')
		b.WriteString(words[g.rng.IntN(len(words))])
	}
	return b.String()
}

// emit appends one event with a body, assigning its position.
func (g *Generator) emit(stream string, id ulid.ULID, at time.Time, causation, correlation ulid.ULID, body fsm.Body, data []byte, schema uint16) eventlog.Event {
	g.seq++
	g.vers[stream]++
	ev := eventlog.Event{
		ID: id, Seq: g.seq, Stream: stream, Version: g.vers[stream], Type: string(body.EventType()),
		Time: at, Causation: causation, Correlation: correlation, Schema: schema, Body: data,
	}
	if correlation == (ulid.ULID{}) {
		ev.Correlation = id
	}
	g.events = append(g.events, ev)
	return ev
}

func (g *Generator) emitTask(t *genTask, body fsm.Body) {
	data, err := fsm.Encode(body)
	if err != nil {
		panic(err)
	}
	at := g.tick()
	id := g.newID(at)
	stream := t.task.ID
	if t.task.State == fsm.StateNone {
		stream = id.String() // the creating event names the task
	}
	ev := g.emit(stream, id, at, t.last, t.root, body, data, fsm.SchemaVersion)
	if t.root == (ulid.ULID{}) {
		t.root = ev.Correlation // a creating input is its own root
	}
	fe := fsm.Event{ID: ev.ID, Type: body.EventType(), Time: ev.Time, Stream: ev.Stream, Version: ev.Version,
		Seq: ev.Seq, Causation: ev.Causation, Correlation: ev.Correlation, Body: body}
	n, err := fsm.Apply(t.task, fe)
	if err != nil {
		panic(fmt.Sprintf("replaytest: generated an illegal event: %v", err))
	}
	t.task = n
	t.last = ev.ID
}

func (g *Generator) system(typ string) {
	at := g.tick()
	g.seq++
	g.vers[projection.SystemStream]++
	id := g.newID(at)
	g.events = append(g.events, eventlog.Event{
		ID: id, Seq: g.seq, Stream: projection.SystemStream, Version: g.vers[projection.SystemStream],
		Type: typ, Time: at, Correlation: id, Schema: 1, Body: []byte{0x80},
	})
}

func (g *Generator) memoryEvent(cause, root ulid.ULID, taskID string) {
	var body fsm.Body
	path := fmt.Sprintf("facts/topic-%d.md", g.rng.IntN(6))
	prev, exists := g.memory[path]
	switch k := g.rng.IntN(4); {
	case k == 0 || !exists:
		c := g.text("fact")
		body = &projection.MemoryWrittenBody{Path: path, Content: c}
		g.memory[path] = c
	case k == 1:
		c := "\n" + g.text("more")
		body = &projection.MemoryAppendedBody{Path: path, Content: c}
		g.memory[path] = prev + c
	case k == 2:
		old := prev[:min(len(prev), 4)]
		nw := "PATCH"
		res := strings.Replace(prev, old, nw, 1)
		body = &projection.MemoryPatchedBody{Path: path, Old: old, New: nw, Content: res}
		g.memory[path] = res
	default:
		body = &projection.EpisodeRecordedBody{Title: g.text("episode"), Summary: g.text("summary"),
			Details: g.text("details"), Lesson: g.text("lesson"), TaskID: taskID}
	}
	data, err := projection.EncodeMemory(body)
	if err != nil {
		panic(err)
	}
	at := g.tick()
	g.emit(projection.MemoryStream, g.newID(at), at, cause, root, body, data, projection.MemorySchemaVersion)
}

func (g *Generator) create() {
	g.made++
	kinds := []fsm.EventType{fsm.MessageReceived, fsm.WebhookTriggered, fsm.ScheduleFired}
	types := []string{"general", "explore", "plan"}
	sources := []string{"cli", "http", "webhook", "cron"}
	in := &fsm.Input{
		Kind: kinds[g.rng.IntN(len(kinds))], Text: g.textOf("do", g.cfg.InputSize), Source: sources[g.rng.IntN(len(sources))],
		TaskType: types[g.rng.IntN(len(types))], Priority: g.rng.IntN(3),
	}
	data, err := fsm.Encode(in)
	if err != nil {
		panic(err)
	}
	if g.rng.IntN(2) == 0 {
		// The daemon's flow: the input is the task stream's first event and
		// leaves the task idle until TASK_CREATED admits it (see advance).
		t := &genTask{}
		g.emitTask(t, in)
		g.live = append(g.live, t)
		return
	}
	// Create and start at once: the input on $inputs, then TASK_CREATED
	// first on the task's stream (older logs and tools write this).
	at := g.tick()
	inEv := g.emit(projection.InputsStream, g.newID(at), at, ulid.ULID{}, ulid.ULID{}, in, data, fsm.SchemaVersion)
	t := &genTask{last: inEv.ID, root: inEv.ID}
	g.emitTask(t, &fsm.TaskCreatedBody{
		Machine: fsm.CurrentMachine, TaskType: in.TaskType, InputText: in.Text, Source: in.Source,
		Priority: in.Priority, Metadata: map[string]string{"n": fmt.Sprint(g.made)},
	})
	g.live = append(g.live, t)
}

func (g *Generator) plan(finish bool) fsm.Plan {
	n := 1 + g.rng.IntN(3)
	p := fsm.Plan{Goal: g.text("goal"), Reasoning: g.text("because")}
	for i := 0; i < n; i++ {
		s := fsm.PlanStep{Index: i, Description: fmt.Sprintf("step %d: %s", i, g.text("")[:8])}
		if !finish && g.rng.IntN(2) == 0 {
			s.ActionType = fsm.ActionToolCall
			tool := []string{"web_search", "read_file", "memory_read", "current_time"}[g.rng.IntN(4)]
			s.ActionParams = map[string]string{"tool": tool, "arguments": `{"q":"x"}`, "tool_call_id": fmt.Sprintf("call_%d", i)}
		} else {
			s.ActionType = fsm.ActionRespond
			s.ActionParams = map[string]string{"text": g.text("answer")}
		}
		p.Steps = append(p.Steps, s)
	}
	return p
}

// advance appends the next event of t.
func (g *Generator) advance(t *genTask) {
	r := g.rng.IntN(100)
	ctx := &t.task.Context
	switch t.task.State {
	case fsm.StateIdle:
		if r < 90 {
			c := &t.task.Context
			g.emitTask(t, &fsm.TaskCreatedBody{Machine: fsm.CurrentMachine, TaskType: t.task.Type, InputText: c.InputText,
				InputMetadata: c.InputMetadata, Source: c.Source, Priority: t.task.Priority})
		} else {
			g.emitTask(t, &fsm.TaskFailedBody{Error: "cancelled", Reason: "cancelled"})
		}
	case fsm.StateReasoning:
		switch {
		case r < 15:
			g.emitTask(t, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "offline", LatencyMS: int64(g.rng.IntN(900)),
				PromptTokens: g.rng.IntN(2000), CompletionTokens: g.rng.IntN(500), Content: g.text("thinking")})
		case r < 18:
			g.emitTask(t, &fsm.TaskNotifyBody{Message: g.text("working")})
		case r < 21:
			g.emitTask(t, &fsm.TaskSuspendedBody{Reason: "user"})
		case r < 25:
			g.emitTask(t, &fsm.TaskFailedBody{Error: "model error: 500", Reason: []string{"model_error", "max_iterations", "cancelled"}[g.rng.IntN(3)]})
		case r < 33:
			g.emitTask(t, &fsm.NeedMoreInfoBody{Reasoning: fsm.Reasoning{Text: g.text("hmm"), NeedsClarification: true, Question: "which one?"},
				NewMessages: []fsm.Message{{Role: "assistant", Content: "which one?"}}})
		default:
			p := g.plan(ctx.Iteration >= 3)
			var calls []fsm.ToolCall
			for _, s := range p.Steps {
				if s.ActionType == fsm.ActionToolCall {
					calls = append(calls, fsm.ToolCall{ID: s.ActionParams["tool_call_id"], Name: s.Tool(), Arguments: s.ActionParams["arguments"]})
				}
			}
			g.emitTask(t, &fsm.ReasonDoneBody{Reasoning: fsm.Reasoning{Text: g.text("plan"), ToolCalls: calls, Model: "offline"}, Plan: p,
				NewMessages: []fsm.Message{{Role: "assistant", Content: g.text("ok"), ToolCalls: calls}}})
		}
	case fsm.StateActing:
		step := ctx.Plan.CurrentStep()
		switch {
		case r < 3:
			g.emitTask(t, &fsm.TaskSuspendedBody{Reason: "user"})
		case r < 5:
			g.emitTask(t, &fsm.TaskFailedBody{Error: "cancelled by user", Reason: "cancelled"})
		case r < 8:
			g.emitTask(t, &fsm.TaskNotifyBody{Message: g.text("progress")})
		case step.ActionType == fsm.ActionToolCall && ctx.PendingCall == nil && r < 60:
			g.emitTask(t, &fsm.ToolCallStartedBody{StepIndex: step.Index, Tool: step.Tool(), ToolCallID: step.ActionParams["tool_call_id"],
				Arguments: step.ActionParams["arguments"], IdempotencyKey: fmt.Sprintf("%s/%d/%d", t.task.ID, ctx.Iteration, step.Index)})
		case step.ActionType == fsm.ActionToolCall:
			res := &fsm.ToolCallResultBody{StepIndex: step.Index, Tool: step.Tool(), ToolCallID: step.ActionParams["tool_call_id"],
				IdempotencyKey: fmt.Sprintf("%s/%d/%d", t.task.ID, ctx.Iteration, step.Index), DurationMS: int64(g.rng.IntN(3000))}
			if r < 80 {
				res.Result = g.text("result")
			} else {
				res.Error = "tool timed out"
			}
			res.NewMessages = []fsm.Message{{Role: "tool", Content: res.Result + res.Error, ToolCallID: res.ToolCallID}}
			g.emitTask(t, res)
		default:
			g.emitTask(t, &fsm.StepCompletedBody{StepIndex: step.Index, Result: step.ActionParams["text"],
				NewMessages: []fsm.Message{{Role: "assistant", Content: step.ActionParams["text"]}}})
		}
	case fsm.StateSuspended:
		switch {
		case r < 10:
			g.emitTask(t, &fsm.TaskFailedBody{Error: "cancelled while suspended", Reason: "cancelled"})
		case r < 55 && ctx.SuspendedState.IsActive():
			g.emitTask(t, &fsm.TaskResumedBody{Reason: "resume"})
		default:
			g.emitTask(t, &fsm.Input{Kind: fsm.MessageReceived, Text: g.text("answer"), Source: "cli"})
		}
	case fsm.StateCompleted:
		switch {
		case !t.results:
			g.emitTask(t, &fsm.TaskCompletedBody{Result: g.text("result")})
			t.results = true
		case r < 40:
			cause := t.last
			for i := 0; i < 1+g.rng.IntN(2); i++ {
				g.memoryEvent(cause, t.root, t.task.ID)
			}
			g.emitTask(t, &fsm.ReflectionCompleteBody{Reflection: fsm.PostTaskReflection{Assessment: g.text("fine"), ToolCallsCount: 2}})
			t.done = true
		case r < 55:
			g.emitTask(t, &fsm.ModelCalledBody{Purpose: "reflect", Attempt: 1, Model: "offline", LatencyMS: 10})
		default:
			t.done = true
		}
	default:
		t.done = true
	}
}

// AppendAll appends generated events to an empty log in atomic batches of
// up to batch events (default 1000), keeping ids, times and bodies, so the
// log assigns the same sequences and versions as the generator did.
func AppendAll(ctx context.Context, l *eventlog.Log, evs []eventlog.Event, batch int) error {
	if batch <= 0 {
		batch = 1000
	}
	for len(evs) > 0 {
		n := min(batch, len(evs))
		var appends []eventlog.StreamAppend
		for _, ev := range evs[:n] {
			if k := len(appends); k > 0 && appends[k-1].Stream == ev.Stream {
				appends[k-1].Events = append(appends[k-1].Events, ev)
				continue
			}
			appends = append(appends, eventlog.StreamAppend{Stream: ev.Stream, Expected: eventlog.Any, Events: []eventlog.Event{ev}})
		}
		res, err := l.AppendMulti(ctx, appends...)
		if err != nil {
			return err
		}
		i := 0
		for _, r := range res {
			for _, got := range r.Events {
				if got.Seq != evs[i].Seq || got.Version != evs[i].Version {
					return fmt.Errorf("replaytest: event %d landed at seq %d version %d, want %d/%d", i, got.Seq, got.Version, evs[i].Seq, evs[i].Version)
				}
				i++
			}
		}
		evs = evs[n:]
	}
	return nil
}
