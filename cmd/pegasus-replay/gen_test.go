package main

// The recorded histories under testdata/ are generated here, deterministically
// (fixed clock, ids derived from a counter), and committed as NDJSON exports.
// `go test ./cmd/pegasus-replay -run TestGenerateHistories -update` rewrites
// them; every task event is checked with fsm.Apply as it is generated, so
// the histories are ones the machine accepts (except the deliberate faults
// of corrupt.ndjson).

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay"
)

// histStart is the time of the first recorded event; goldenNow is the wall
// clock the golden tests pretend it is (for the AGE column).
var (
	histStart = time.Date(2025, 3, 14, 14, 0, 0, 0, time.UTC)
	goldenNow = time.Date(2025, 3, 14, 18, 0, 0, 0, time.UTC)
)

// hist builds one history event by event.
type hist struct {
	t     testing.TB
	now   time.Time
	n     uint64 // id counter
	seq   uint64
	vers  map[string]uint64
	evs   []eventlog.Event
	tasks map[string]fsm.Task
	last  map[string]ulid.ULID // last event per stream: the next one's causation
	corr  map[string]ulid.ULID // correlation (root input) per task
	check bool                 // fail on events the machine refuses
}

func newHist(t testing.TB, start time.Time) *hist {
	return &hist{t: t, now: start, vers: map[string]uint64{}, tasks: map[string]fsm.Task{},
		last: map[string]ulid.ULID{}, corr: map[string]ulid.ULID{}, check: true}
}

// tick advances the clock.
func (h *hist) tick(d time.Duration) { h.now = h.now.Add(d) }

// id returns a ULID stamped with the current time whose random part is a
// counter: unique, increasing, and the same on every run.
func (h *hist) id() ulid.ULID {
	h.n++
	var id ulid.ULID
	if err := id.SetTime(ulid.Timestamp(h.now)); err != nil {
		h.t.Fatal(err)
	}
	binary.BigEndian.PutUint64(id[8:], 0x5eed0000+h.n)
	return id
}

// raw appends an event with an already encoded body.
func (h *hist) raw(stream string, typ fsm.EventType, cause, corr ulid.ULID, schema uint16, body []byte) eventlog.Event {
	h.seq++
	h.vers[stream]++
	ev := eventlog.Event{
		ID: h.id(), Seq: h.seq, Stream: stream, Version: h.vers[stream], Type: string(typ), Time: h.now,
		Causation: cause, Correlation: corr, Schema: schema, Body: body,
	}
	if ev.Correlation == (ulid.ULID{}) {
		ev.Correlation = ev.ID
	}
	h.evs = append(h.evs, ev)
	h.last[stream] = ev.ID
	return ev
}

// add appends an event with body b to stream, caused by cause, and folds it
// into the task when stream is a task.
func (h *hist) add(stream string, cause ulid.ULID, b fsm.Body) eventlog.Event {
	var data []byte
	var err error
	schema := uint16(fsm.SchemaVersion)
	if projection.KindOf(stream) == projection.KindMemory {
		data, err = projection.EncodeMemory(b)
		schema = projection.MemorySchemaVersion
	} else {
		data, err = fsm.Encode(b)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	corr := h.corr[stream]
	if cause != (ulid.ULID{}) && corr == (ulid.ULID{}) {
		for _, e := range h.evs {
			if e.ID == cause {
				corr = e.Correlation
			}
		}
	}
	ev := h.raw(stream, b.EventType(), cause, corr, schema, data)
	if projection.KindOf(stream) == projection.KindTask {
		t, err := fsm.Apply(h.tasks[stream], fsm.Event{
			ID: ev.ID, Type: fsm.EventType(ev.Type), Time: ev.Time, Stream: ev.Stream, Version: ev.Version,
			Seq: ev.Seq, Causation: ev.Causation, Correlation: ev.Correlation, Body: b,
		})
		if err != nil && h.check {
			h.t.Fatalf("generated event %d %s on %s refused: %v", ev.Seq, ev.Type, stream, err)
		}
		if err == nil {
			h.tasks[stream] = t
		}
	}
	return ev
}

// input records an external input and the task it creates; it returns the
// task id.
// The daemon writes the creating input as the first event of the task's
// own stream (the task id is the input's id), and TASK_CREATED when it
// admits the task; wait is how long the task waits in idle.
func (h *hist) input(in *fsm.Input, wait time.Duration) string {
	taskID := h.peekID()
	iev := h.add(taskID, ulid.ULID{}, in)
	if iev.ID.String() != taskID {
		h.t.Fatalf("task id %s, input id %s", taskID, iev.ID)
	}
	h.corr[taskID] = iev.ID
	h.tick(wait)
	h.add(taskID, iev.ID, created(in))
	return taskID
}

// inputOnInputs records the other creation flow, which logs written by
// other tools may use: the input on "$inputs", and a task stream that
// starts with TASK_CREATED (the task id is the TASK_CREATED's id).
func (h *hist) inputOnInputs(in *fsm.Input) string {
	iev := h.add(projection.InputsStream, ulid.ULID{}, in)
	h.tick(2 * time.Millisecond)
	taskID := h.peekID()
	h.corr[taskID] = iev.ID
	h.add(taskID, iev.ID, created(in))
	if got := h.evs[len(h.evs)-1].ID.String(); got != taskID {
		h.t.Fatalf("task id %s, TASK_CREATED id %s", taskID, got)
	}
	return taskID
}

func created(in *fsm.Input) *fsm.TaskCreatedBody {
	typ := in.TaskType
	if typ == "" {
		typ = "general"
	}
	return &fsm.TaskCreatedBody{Machine: fsm.CurrentMachine, TaskType: typ, InputText: in.Text,
		InputMetadata: in.Metadata, Source: in.Source, Priority: in.Priority}
}

// peekID returns the id the next event will get.
func (h *hist) peekID() string {
	id := h.id()
	h.n--
	return id.String()
}

// next appends a task event caused by the task's previous event.
func (h *hist) next(task string, d time.Duration, b fsm.Body) eventlog.Event {
	h.tick(d)
	return h.add(task, h.last[task], b)
}

func (h *hist) system(typ string) {
	h.raw(projection.SystemStream, fsm.EventType(typ), ulid.ULID{}, ulid.ULID{}, 1, nil)
}

// model records one model call attempt.
func model(purpose string, attempt int, latency int64, pt, ct int, content string, calls ...fsm.ToolCall) *fsm.ModelCalledBody {
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	return &fsm.ModelCalledBody{Purpose: purpose, Attempt: attempt, Model: "pegasus-offline-demo", LatencyMS: latency,
		Status: 200, PromptTokens: pt, CompletionTokens: ct, Content: content, ToolCalls: calls, FinishReason: finish}
}

func toolStep(i int, call fsm.ToolCall, desc string) fsm.PlanStep {
	return fsm.PlanStep{Index: i, Description: desc, ActionType: fsm.ActionToolCall,
		ActionParams: map[string]string{"tool": call.Name, "arguments": call.Arguments, "tool_call_id": call.ID}}
}

func respondStep(i int, text string) fsm.PlanStep {
	return fsm.PlanStep{Index: i, Description: "Reply to the user", ActionType: fsm.ActionRespond,
		ActionParams: map[string]string{"text": text}}
}

func toolDone(task string, step int, call fsm.ToolCall, result string, ms int64) *fsm.ToolCallResultBody {
	return &fsm.ToolCallResultBody{StepIndex: step, Tool: call.Name, ToolCallID: call.ID, IdempotencyKey: idemKey(task, call),
		Result: result, DurationMS: ms, NewMessages: []fsm.Message{{Role: "tool", Content: result, ToolCallID: call.ID, Name: call.Name}}}
}

func toolFailed(task string, step int, call fsm.ToolCall, errText string, ms int64) *fsm.ToolCallResultBody {
	return &fsm.ToolCallResultBody{StepIndex: step, Tool: call.Name, ToolCallID: call.ID, IdempotencyKey: idemKey(task, call),
		Error: errText, DurationMS: ms, NewMessages: []fsm.Message{{Role: "tool", Content: "error: " + errText, ToolCallID: call.ID, Name: call.Name}}}
}

func toolStarted(task string, step int, call fsm.ToolCall) *fsm.ToolCallStartedBody {
	return &fsm.ToolCallStartedBody{StepIndex: step, Tool: call.Name, ToolCallID: call.ID, Arguments: call.Arguments,
		IdempotencyKey: idemKey(task, call)}
}

func idemKey(task string, call fsm.ToolCall) string { return task + "/" + call.ID }

// historyTasks names the three tasks of history.ndjson, for the tests.
type historyTasks struct {
	success, resumed, failed string
	toolFailed               string // the TOOL_CALL_FAILED of the failed task
}

// genHistory records three tasks the way pegasusd would: one that
// completes after a tool call, one that is suspended by an operator,
// resumed, asks a clarifying question and completes after the answer, and
// one whose tool call fails and whose model then keeps failing.
func genHistory(t testing.TB) ([]eventlog.Event, historyTasks) {
	h := newHist(t, histStart)
	var ids historyTasks
	h.system("SYSTEM_STARTED")

	// 1. Success: a tool call, then an answer; post-task reflection writes
	// a memory fact.
	h.tick(3 * time.Second)
	ids.success = h.input(&fsm.Input{Kind: fsm.MessageReceived, Text: "What time is it in Paris?", Source: "cli", TaskType: "general"}, 2*time.Millisecond)
	s := ids.success
	clock := fsm.ToolCall{ID: "call_1", Name: "current_time", Arguments: `{"timezone":"Europe/Paris"}`}
	h.next(s, 812*time.Millisecond, model("reason", 1, 810, 412, 38, "", clock))
	h.next(s, time.Millisecond, &fsm.ReasonDoneBody{
		Reasoning: fsm.Reasoning{Text: "I need the current time in Paris.", ToolCalls: []fsm.ToolCall{clock}, Model: "pegasus-offline-demo"},
		Plan:      fsm.Plan{Goal: "Tell the time in Paris", Steps: []fsm.PlanStep{toolStep(0, clock, "Read the clock for Europe/Paris")}},
		NewMessages: []fsm.Message{
			{Role: "user", Content: "What time is it in Paris?"},
			{Role: "assistant", ToolCalls: []fsm.ToolCall{clock}},
		},
	})
	h.next(s, time.Millisecond, toolStarted(s, 0, clock))
	h.next(s, 3*time.Millisecond, toolDone(s, 0, clock, "2025-03-14T15:00:04+01:00", 3))
	h.next(s, 640*time.Millisecond, model("reason", 1, 638, 471, 22, "It is 15:00 in Paris."))
	answer := "It is 15:00 in Paris (UTC+1)."
	h.next(s, time.Millisecond, &fsm.ReasonDoneBody{
		Reasoning:   fsm.Reasoning{Text: answer, Model: "pegasus-offline-demo"},
		Plan:        fsm.Plan{Goal: "Answer", Steps: []fsm.PlanStep{respondStep(0, answer)}},
		NewMessages: []fsm.Message{{Role: "assistant", Content: answer}},
	})
	h.next(s, time.Millisecond, &fsm.StepCompletedBody{StepIndex: 0, Result: answer})
	h.next(s, time.Millisecond, &fsm.TaskCompletedBody{Result: answer})
	refl := h.next(s, 420*time.Millisecond, model("reflect", 1, 418, 530, 61, "", fsm.ToolCall{ID: "call_r1", Name: "memory_write", Arguments: `{"path":"user/timezone","content":"Europe/Paris"}`}))
	h.tick(2 * time.Millisecond)
	h.add(projection.MemoryStream, refl.ID, &projection.MemoryWrittenBody{Path: "user/timezone", Content: "Europe/Paris"})
	h.next(s, time.Millisecond, &fsm.ReflectionCompleteBody{Reflection: fsm.PostTaskReflection{
		Facts: []fsm.Fact{{Path: "user/timezone", Content: "Europe/Paris"}}, Assessment: "Simple lookup, one tool call.", ToolCallsCount: 1,
	}})

	// 2. Suspended, resumed, clarified, completed.
	h.tick(41 * time.Second)
	ids.resumed = h.input(&fsm.Input{Kind: fsm.WebhookTriggered, Name: "github", Text: "Summarise the open pull requests",
		Source: "webhook:github", TaskType: "explore", Priority: 1, Metadata: map[string]string{"delivery": "72d3162e"}}, 4*time.Second)
	r := ids.resumed
	read := fsm.ToolCall{ID: "call_1", Name: "memory_read", Arguments: `{"path":"projects/pegasus"}`}
	h.next(r, 1200*time.Millisecond, model("reason", 1, 1198, 655, 45, "", read))
	h.next(r, time.Millisecond, &fsm.ReasonDoneBody{
		Reasoning: fsm.Reasoning{Text: "Look up what I know about the project first.", ToolCalls: []fsm.ToolCall{read}, Model: "pegasus-offline-demo"},
		Plan:      fsm.Plan{Goal: "Summarise open pull requests", Steps: []fsm.PlanStep{toolStep(0, read, "Read the project notes")}},
		NewMessages: []fsm.Message{
			{Role: "user", Content: "Summarise the open pull requests"},
			{Role: "assistant", ToolCalls: []fsm.ToolCall{read}},
		},
	})
	h.next(r, 300*time.Millisecond, &fsm.TaskSuspendedBody{Reason: "operator pause: GitHub rate limit"})
	h.next(r, 10*time.Minute, &fsm.TaskResumedBody{Reason: "rate limit window reset"})
	h.next(r, 2*time.Millisecond, toolStarted(r, 0, read))
	h.next(r, 4*time.Millisecond, toolDone(r, 0, read, "repo: pegasus-engine/pegasus; default branch: main", 4))
	h.next(r, 900*time.Millisecond, model("reason", 1, 897, 702, 19, "Which branch should I summarise, main or release-1.x?"))
	h.next(r, time.Millisecond, &fsm.NeedMoreInfoBody{
		Reasoning:   fsm.Reasoning{Text: "The request is ambiguous.", NeedsClarification: true, Question: "Which branch should I summarise, main or release-1.x?", Model: "pegasus-offline-demo"},
		NewMessages: []fsm.Message{{Role: "assistant", Content: "Which branch should I summarise, main or release-1.x?"}},
	})
	h.next(r, 7*time.Minute, &fsm.Input{Kind: fsm.MessageReceived, Text: "main, please", Source: "api"})
	h.next(r, 1100*time.Millisecond, model("reason", 1, 1096, 760, 54, "3 open pull requests target main."))
	summary := "3 open pull requests target main: #41 group commit, #44 verify report, #45 replay CLI."
	h.next(r, time.Millisecond, &fsm.ReasonDoneBody{
		Reasoning:   fsm.Reasoning{Text: summary, Model: "pegasus-offline-demo"},
		Plan:        fsm.Plan{Goal: "Answer", Steps: []fsm.PlanStep{respondStep(0, summary)}},
		NewMessages: []fsm.Message{{Role: "assistant", Content: summary}},
	})
	h.next(r, time.Millisecond, &fsm.StepCompletedBody{StepIndex: 0, Result: summary})
	h.next(r, time.Millisecond, &fsm.TaskCompletedBody{Result: summary})

	// 3. Failed: a tool call fails, then the model keeps failing.
	h.tick(2 * time.Minute)
	ids.failed = h.input(&fsm.Input{Kind: fsm.ScheduleFired, Name: "nightly-report", Text: "Write the nightly report",
		Source: "schedule:nightly-report", TaskType: "plan"}, 2*time.Millisecond)
	f := ids.failed
	last := fsm.ToolCall{ID: "call_1", Name: "memory_read", Arguments: `{"path":"reports/last"}`}
	tell := fsm.ToolCall{ID: "call_2", Name: "notify", Arguments: `{"message":"Nightly report: starting"}`}
	h.next(f, 950*time.Millisecond, model("reason", 1, 948, 590, 71, "", last, tell))
	h.next(f, time.Millisecond, &fsm.ReasonDoneBody{
		Reasoning: fsm.Reasoning{Text: "Read the last report, then tell the user I started.", ToolCalls: []fsm.ToolCall{last, tell}, Model: "pegasus-offline-demo"},
		Plan: fsm.Plan{Goal: "Write the nightly report", Steps: []fsm.PlanStep{
			toolStep(0, last, "Read the last report"), toolStep(1, tell, "Tell the user the report started"),
		}},
		NewMessages: []fsm.Message{
			{Role: "user", Content: "Write the nightly report"},
			{Role: "assistant", ToolCalls: []fsm.ToolCall{last, tell}},
		},
	})
	h.next(f, time.Millisecond, toolStarted(f, 0, last))
	ids.toolFailed = h.next(f, 2*time.Millisecond, toolFailed(f, 0, last, "memory: no fact at reports/last", 2)).ID.String()
	h.next(f, time.Millisecond, toolStarted(f, 1, tell))
	h.next(f, time.Millisecond, &fsm.TaskNotifyBody{Message: "Nightly report: starting"})
	h.next(f, time.Millisecond, toolDone(f, 1, tell, "delivered", 1))
	h.next(f, 30*time.Second, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 1, Model: "pegasus-offline-demo", LatencyMS: 30000, Status: 500, Error: "500 Internal Server Error"})
	h.next(f, 1*time.Second, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 2, Model: "pegasus-offline-demo", LatencyMS: 30000, Status: 500, Error: "500 Internal Server Error"})
	h.next(f, 2*time.Second, &fsm.ModelCalledBody{Purpose: "reason", Attempt: 3, Model: "pegasus-offline-demo", LatencyMS: 120, Status: 503, Error: "503 Service Unavailable"})
	h.next(f, time.Millisecond, &fsm.TaskFailedBody{Reason: "model_error", Error: "model call failed after 3 attempts: 503 Service Unavailable"})

	h.tick(5 * time.Second)
	h.system("SYSTEM_STOPPED")
	return h.evs, ids
}

// genCorrupt records a short log with two faults written around the
// machine, in two tasks (a task stops folding at its first refused event,
// so each fault gets its own): an event appended after the task failed,
// and a body that is not msgpack. The second task is created the other
// way (input on "$inputs"), so both creation flows are covered.
func genCorrupt(t testing.TB) []eventlog.Event {
	h := newHist(t, histStart)
	h.check = false
	a := h.input(&fsm.Input{Kind: fsm.MessageReceived, Text: "Ping the build server", Source: "cli", TaskType: "general"}, time.Millisecond)
	ping := fsm.ToolCall{ID: "call_1", Name: "current_time", Arguments: `{}`}
	h.next(a, 500*time.Millisecond, model("reason", 1, 498, 300, 20, "", ping))
	h.next(a, time.Millisecond, &fsm.ReasonDoneBody{
		Reasoning: fsm.Reasoning{Text: "Check the time first.", ToolCalls: []fsm.ToolCall{ping}},
		Plan:      fsm.Plan{Goal: "Ping", Steps: []fsm.PlanStep{toolStep(0, ping, "Read the clock")}},
	})
	h.next(a, time.Millisecond, toolStarted(a, 0, ping))
	h.next(a, time.Second, &fsm.TaskFailedBody{Reason: "cancelled", Error: "cancelled: operator"})
	h.next(a, time.Millisecond, toolDone(a, 0, ping, "2025-03-14T14:00:02Z", 1)) // after the end: illegal

	h.tick(time.Minute)
	b := h.inputOnInputs(&fsm.Input{Kind: fsm.MessageReceived, Text: "Summarise yesterday", Source: "cli", TaskType: "general"})
	h.tick(300 * time.Millisecond)
	h.raw(b, fsm.ModelCalled, h.last[b], h.corr[b], fsm.SchemaVersion, []byte{0xc1, 0xff, 0x00}) // not msgpack
	return h.evs
}

// genBroker records one broker task (dispatch.task) through every kind of
// decision: assigned, started, a progress report, timed out for want of a
// heartbeat, retried, assigned to another worker that fails it as not
// retryable, dead-lettered, requeued by an operator, and completed. It
// returns the events and the task's id.
func genBroker(t testing.TB) ([]eventlog.Event, string) {
	h := newHist(t, histStart)
	id := h.peekID()
	h.add(id, ulid.ULID{}, &fsm.DispatchCreatedBody{AgentID: "mike", Title: "resize the photos", Owner: "mike",
		RequiredCapabilities: []string{"image"}, Priority: 2, TimeoutSeconds: 60, MaxRetries: 2, RetryEligible: true,
		Source: "agent", HeartbeatSeconds: 20})
	h.corr[id] = h.last[id]
	h.next(id, time.Second, &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "resizer-1", Score: 1.1})
	h.next(id, 2*time.Second, &fsm.DispatchReportBody{Kind: fsm.DispatchStarted, AgentID: "resizer-1", Message: "loading"})
	h.next(id, 5*time.Second, &fsm.DispatchReportBody{Kind: fsm.DispatchProgress, AgentID: "resizer-1", Message: "10 of 40"})
	h.next(id, 20*time.Second, &fsm.DispatchTimedOutBody{AgentID: "$broker"})
	h.next(id, time.Millisecond, &fsm.DispatchRetriedBody{AgentID: "$broker"})
	h.next(id, time.Second, &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "resizer-2", Score: 1.1})
	h.next(id, time.Second, &fsm.DispatchReportBody{Kind: fsm.DispatchStarted, AgentID: "resizer-2"})
	no := false
	h.next(id, 3*time.Second, &fsm.DispatchReportBody{Kind: fsm.DispatchFailed, AgentID: "resizer-2", Error: "corrupt input", RetryEligible: &no})
	h.next(id, time.Millisecond, &fsm.DispatchDeadLetteredBody{AgentID: "$broker", Reason: fsm.DeadLetterNotEligible})
	h.next(id, time.Minute, &fsm.DispatchRequeuedBody{AgentID: "ops", Reason: "fixed the input"})
	h.next(id, time.Second, &fsm.DispatchAssignedBody{AgentID: "$broker", Worker: "resizer-1", Score: 1.1})
	h.next(id, time.Second, &fsm.DispatchReportBody{Kind: fsm.DispatchStarted, AgentID: "resizer-1"})
	h.next(id, 4*time.Second, &fsm.DispatchReportBody{Kind: fsm.DispatchCompleted, AgentID: "resizer-1", Result: `{"resized":40}`})
	return h.evs, id
}

// writeExport writes evs as a complete NDJSON export.
func writeExport(t testing.TB, path string, evs []eventlog.Event) {
	var b bytes.Buffer
	e, err := replay.NewExporter(&b, replay.ExportHeader{Head: evs[len(evs)-1].Seq, Complete: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if err := e.Write(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b.Bytes())
}

func writeFile(t testing.TB, path string, data []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGenerateHistories checks that the committed histories are exactly
// what the generator produces (so they cannot drift from the code that
// documents them), and rewrites them with -update.
func TestGenerateHistories(t *testing.T) {
	evs, _ := genHistory(t)
	broker, _ := genBroker(t)
	for _, f := range []struct {
		name string
		evs  []eventlog.Event
	}{{"history.ndjson", evs}, {"corrupt.ndjson", genCorrupt(t)}, {"broker.ndjson", broker}} {
		path := filepath.Join("testdata", f.name)
		if *update {
			writeExport(t, path, f.evs)
			continue
		}
		var want bytes.Buffer
		e, _ := replay.NewExporter(&want, replay.ExportHeader{Head: f.evs[len(f.evs)-1].Seq, Complete: true})
		for _, ev := range f.evs {
			e.Write(ev)
		}
		e.Close()
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to generate)", err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s differs from what the generator produces; run with -update and review the diff", path)
		}
	}
}
