package projection

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/internal/codec"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// script builds the events of one task, keeping seq and versions right.
type script struct {
	seq   uint64
	at    time.Time
	tasks map[string]uint64
}

func newScript() *script { return &script{at: t0, tasks: map[string]uint64{}} }

func (s *script) ev(stream string, body fsm.Body) fsm.Event {
	s.seq++
	s.tasks[stream]++
	s.at = s.at.Add(time.Second)
	id := ulid.MustNew(ulid.Timestamp(s.at), strings.NewReader(strings.Repeat("x", 16)))
	id[15] = byte(s.seq) // unique
	if body.EventType() == fsm.TaskCreated {
		stream = id.String()
		s.tasks[stream] = 1
	}
	return fsm.Event{ID: id, Type: body.EventType(), Time: s.at, Stream: stream, Version: s.tasks[stream], Seq: s.seq, Body: body}
}

func created(src string) *fsm.TaskCreatedBody {
	return &fsm.TaskCreatedBody{TaskType: "general", InputText: "find papers", Source: src, Priority: 1}
}

func toolPlan() *fsm.ReasonDoneBody {
	return &fsm.ReasonDoneBody{Plan: fsm.Plan{Goal: "g", Steps: []fsm.PlanStep{
		{Index: 0, Description: "search the web", ActionType: fsm.ActionToolCall, ActionParams: map[string]string{"tool": "web_search"}},
		{Index: 1, Description: "answer", ActionType: fsm.ActionRespond},
	}}}
}

func mustApply(t *testing.T, s *Set, ev fsm.Event) Change {
	t.Helper()
	ch := s.Apply(ev)
	if ch.Err != nil {
		t.Fatalf("%s refused: %v", ev.Type, ch.Err)
	}
	return ch
}

// TestSetFoldsATask drives one task through tool call, respond and
// completion and checks every read model on the way.
func TestSetFoldsATask(t *testing.T) {
	s := NewSet(Options{SnapshotEvery: 2})
	sc := newScript()
	ch := mustApply(t, s, sc.ev("", created("cli")))
	id := ch.After.ID
	if ch.Before.State != "" || ch.After.State != fsm.StateReasoning || !ch.Moved() || ch.Kind != KindTask {
		t.Fatalf("created: %+v", ch)
	}
	mustApply(t, s, sc.ev(id, toolPlan()))
	p, _ := s.Progress(id)
	if strings.Join(p.NextSteps, "|") != "search the web|answer" || p.AwaitingTool != nil || !p.IsMultiStep() {
		t.Fatalf("after plan: %+v", p)
	}
	mustApply(t, s, sc.ev(id, &fsm.ToolCallStartedBody{StepIndex: 0, Tool: "web_search", IdempotencyKey: "k1"}))
	p, _ = s.Progress(id)
	if p.AwaitingTool == nil || p.AwaitingTool.Tool != "web_search" || p.AwaitingTool.IdempotencyKey != "k1" {
		t.Fatalf("awaiting tool: %+v", p.AwaitingTool)
	}
	mustApply(t, s, sc.ev(id, &fsm.ToolCallResultBody{StepIndex: 0, Tool: "web_search", Result: "3 papers"}))
	p, _ = s.Progress(id)
	if p.AwaitingTool != nil || p.StepCount != 1 || p.CompletedSteps[0] != "search the web" || p.ToolsUsed[0] != "web_search" || p.NextSteps[0] != "answer" {
		t.Fatalf("after tool: %+v", p)
	}
	ch = mustApply(t, s, sc.ev(id, &fsm.StepCompletedBody{StepIndex: 1, Result: "here"}))
	if ch.After.State != fsm.StateReasoning { // the plan had a tool call: back to reasoning
		t.Fatalf("after the last step: %s", ch.After.State)
	}
	p, _ = s.Progress(id)
	if len(p.NextSteps) != 0 || p.StepCount != 2 || p.Iteration != 2 {
		t.Fatalf("after the plan: %+v", p)
	}
	mustApply(t, s, sc.ev(id, &fsm.ReasonDoneBody{Plan: fsm.Plan{Steps: []fsm.PlanStep{{Index: 0, Description: "reply", ActionType: fsm.ActionRespond}}}}))
	ch = mustApply(t, s, sc.ev(id, &fsm.StepCompletedBody{StepIndex: 0, Result: "done"}))
	if ch.After.State != fsm.StateCompleted {
		t.Fatalf("final state %s", ch.After.State)
	}
	p, _ = s.Progress(id)
	if !p.Complete || p.StepCount != 3 || len(p.ToolsUsed) != 1 {
		t.Fatalf("final progress: %+v", p)
	}
	st := s.Stats().Report()
	if st.Tasks != 1 || st.Completed != 1 || st.ByState[fsm.StateCompleted] != 1 || st.ByState[fsm.StateReasoning] != 0 ||
		st.BySource["cli"] != 1 || st.Duration.Count != 1 || st.Duration.Max != 6000 || st.Iterations[0].Iterations != 2 {
		t.Fatalf("stats: %+v", st)
	}
	pending, err := s.Pending()
	if err != nil {
		t.Fatal(err)
	}
	if len(pending.Tasks) != 1 || pending.Seq != 7 || len(pending.Snapshots) != 3 { // versions 2, 4, 6
		t.Fatalf("pending: %d tasks, seq %d, %d snapshots", len(pending.Tasks), pending.Seq, len(pending.Snapshots))
	}
	for i, snap := range pending.Snapshots {
		if snap.Task.Version != uint64(2*(i+1)) {
			t.Fatalf("snapshot %d at version %d", i, snap.Task.Version)
		}
	}
	if evicted := s.Flushed(pending.Seq); len(evicted) != 1 || s.Tasks().Has(id) {
		t.Fatalf("terminal task not evicted: %v", evicted)
	}
	if !s.NeedsTask(id, 8) || s.NeedsTask(id, 1) || s.NeedsTask(MemoryStream, 9) {
		t.Fatal("NeedsTask")
	}
	// A late fact after eviction folds once the task is restored.
	s.RestoreTask(pending.Tasks[0].Task, pending.Tasks[0].Progress, pending.Tasks[0].InputSeq)
	mustApply(t, s, sc.ev(id, &fsm.TaskCompletedBody{Result: "done"}))
	if tk, _ := s.Tasks().Get(id); !tk.Context.ResultRecorded {
		t.Fatal("late fact not applied")
	}
}

func TestSetRefusesWithoutChanging(t *testing.T) {
	s := NewSet(Options{})
	sc := newScript()
	id := mustApply(t, s, sc.ev("", created("http"))).After.ID
	before, _ := fsm.EncodeTask(s.Tasks().slots[id].task)
	statsBefore := s.Stats().Report()
	ch := s.Apply(sc.ev(id, &fsm.StepCompletedBody{StepIndex: 0})) // no plan: illegal in reasoning
	var te *fsm.TransitionError
	if !errors.As(ch.Err, &te) || ch.Moved() || !ch.Refused() {
		t.Fatalf("illegal transition: %v", ch.Err)
	}
	after, _ := fsm.EncodeTask(s.Tasks().slots[id].task)
	if string(before) != string(after) {
		t.Fatal("a refused event changed the task")
	}
	st := s.Stats().Report()
	if st.Refused != 1 || st.Events != statsBefore.Events+1 || st.ByState[fsm.StateReasoning] != 1 {
		t.Fatalf("stats after a refusal: %+v", st)
	}
	if s.Seq() != 2 {
		t.Fatalf("seq %d", s.Seq())
	}
	// An event for a task that never existed is refused by the machine.
	if ch := s.Apply(sc.ev("01JGFJK2VQYGNJMS3GSRM9FV21", toolPlan())); ch.Err == nil {
		t.Fatal("event of an unknown task accepted")
	}
	if ch := s.Refuse(sc.ev(id, &fsm.TaskNotifyBody{}), errors.New("bad body")); ch.Err == nil || s.Seq() != 4 {
		t.Fatal("Refuse")
	}
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	mk := func(id string, st fsm.State) fsm.Task { return fsm.Task{ID: id, State: st} }
	for _, tk := range []fsm.Task{mk("c", fsm.StateActing), mk("a", fsm.StateReasoning), mk("b", fsm.StateCompleted), mk("d", fsm.StateSuspended)} {
		if err := r.Register(tk); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Register(mk("a", fsm.StateIdle)); !errors.Is(err, ErrTaskExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := r.Register(fsm.Task{}); err == nil {
		t.Fatal("empty id accepted")
	}
	if _, err := r.Get("zz"); !errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if r.GetOrNil("zz") != nil || r.GetOrNil("a").State != fsm.StateReasoning {
		t.Fatal("GetOrNil")
	}
	if got := ids(r.ListActive()); got != "a,c,d" {
		t.Fatalf("ListActive %s", got)
	}
	if got := ids(r.ListAll()); got != "a,b,c,d" {
		t.Fatalf("ListAll %s", got)
	}
	if r.ActiveCount() != 3 || r.Count(fsm.StateCompleted) != 1 {
		t.Fatalf("counts %d %d", r.ActiveCount(), r.Count(fsm.StateCompleted))
	}
	r.put(mk("c", fsm.StateFailed))
	if got := r.CleanupTerminal(); strings.Join(got, ",") != "b,c" || r.Len() != 2 || r.ActiveCount() != 2 {
		t.Fatalf("CleanupTerminal %v, len %d", got, r.Len())
	}
	if !r.Remove("a") || r.Remove("a") || r.ActiveCount() != 1 {
		t.Fatal("Remove")
	}
}

func ids(ts []fsm.Task) string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return strings.Join(out, ",")
}

func TestMemory(t *testing.T) {
	s := NewSet(Options{})
	sc := newScript()
	apply := func(b fsm.Body) Change { return s.Apply(sc.ev(MemoryStream, b)) }
	if ch := apply(&MemoryWrittenBody{Path: "user.md", Content: "likes tea"}); ch.Err != nil || ch.Kind != KindMemory {
		t.Fatal(ch.Err)
	}
	apply(&MemoryAppendedBody{Path: "user.md", Content: "\nlives in Oslo"})
	cur, _ := s.Memory().Fact("user.md")
	patch, err := NewMemoryPatch("user.md", cur.Content, "tea", "coffee")
	if err != nil || patch.Content != "likes coffee\nlives in Oslo" {
		t.Fatalf("NewMemoryPatch: %+v %v", patch, err)
	}
	if ch := apply(patch); ch.Err != nil || ch.Warn != nil {
		t.Fatal(ch.Err, ch.Warn)
	}
	if _, err := NewMemoryPatch("user.md", cur.Content, "juice", "x"); !errors.Is(err, ErrPatchNoMatch) {
		t.Fatalf("patch without a match: %v", err)
	}
	// A patch whose recorded result disagrees is applied (the body is the
	// truth) and flagged.
	ch := apply(&MemoryPatchedBody{Path: "user.md", Old: "Oslo", New: "Bergen", Content: "likes coffee\nlives in Trondheim"})
	var pm *PatchMismatchError
	if ch.Err != nil || !errors.As(ch.Warn, &pm) {
		t.Fatalf("mismatch: err %v warn %v", ch.Err, ch.Warn)
	}
	if ch := apply(&MemoryWrittenBody{Content: "no path"}); ch.Err == nil {
		t.Fatal("empty path accepted")
	}
	apply(&EpisodeRecordedBody{Title: "papers", Summary: "found 3", Lesson: "use arxiv", TaskID: "t1"})
	f, ok := s.Memory().Fact("user.md")
	if !ok || f.Content != "likes coffee\nlives in Trondheim" || f.Revision != 4 || !f.CreatedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("fact %+v", f)
	}
	if eps := s.Memory().Episodes(); len(eps) != 1 || eps[0].Lesson != "use arxiv" || eps[0].Seq != 6 {
		t.Fatalf("episodes %+v", eps)
	}
	facts, eps := s.Memory().Changes()
	if len(facts) != 1 || facts[0].Path != "user.md" || len(eps) != 1 {
		t.Fatalf("changes: %d facts, %d episodes", len(facts), len(eps))
	}
	s.Flushed(s.Seq())
	if facts, eps := s.Memory().Changes(); len(facts)+len(eps) != 0 {
		t.Fatal("changes not cleared by Flushed")
	}
	apply(&MemoryAppendedBody{Path: "other.md", Content: "x"})
	if facts, eps := s.Memory().Changes(); len(facts) != 1 || facts[0].Path != "other.md" || len(eps) != 0 {
		t.Fatalf("changes after flush: %v %v", facts, eps)
	}
	restored := RestoreMemory(s.Memory().Facts(""), s.Memory().Episodes())
	b, err := s.Memory().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if rb, _ := restored.Encode(); string(rb) != string(b) {
		t.Fatal("RestoreMemory differs")
	}
	m2, err := DecodeMemoryState(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := m2.Encode()
	if string(b) != string(b2) {
		t.Fatal("memory does not round-trip")
	}
	if s.Stats().Report().MemoryEvents != 6 {
		t.Fatalf("memory events %d", s.Stats().Report().MemoryEvents)
	}
	// Bodies round-trip through their codec; other types are refused.
	for _, body := range []fsm.Body{&MemoryWrittenBody{Path: "p", Content: "c"}, &MemoryPatchedBody{Path: "p", Old: "a", New: "b", Content: "b"},
		&MemoryAppendedBody{Path: "p", Content: "c"}, &EpisodeRecordedBody{Title: "t", TaskID: "x"}} {
		data, err := EncodeMemory(body)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMemory(body.EventType(), MemorySchemaVersion, data)
		if err != nil || got.EventType() != body.EventType() {
			t.Fatalf("%s: %v", body.EventType(), err)
		}
		if _, err := DecodeMemory(body.EventType(), 9, data); !errors.Is(err, fsm.ErrSchema) {
			t.Fatalf("schema: %v", err)
		}
		if _, err := DecodeMemory(body.EventType(), 1, []byte{0xc1}); !errors.Is(err, ErrMalformed) {
			t.Fatalf("garbage: %v", err)
		}
	}
	if _, err := DecodeMemory("MEMORY_FORGOTTEN", 1, nil); !errors.Is(err, fsm.ErrUnknownEvent) {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := EncodeMemory(&fsm.TaskNotifyBody{}); !errors.Is(err, fsm.ErrUnknownEvent) {
		t.Fatalf("encode a task body: %v", err)
	}
}

func TestHistogram(t *testing.T) {
	var h Histogram
	for v := int64(1); v <= 1000; v++ {
		h.Add(v)
	}
	for _, q := range []struct {
		q    float64
		want int64
	}{{0.5, 500}, {0.9, 900}, {0.99, 990}, {1, 1000}} {
		got := h.Quantile(q.q)
		if got < q.want || float64(got) > float64(q.want)*1.125+1 {
			t.Errorf("q%.2f = %d, want within 12.5%% above %d", q.q, got, q.want)
		}
	}
	if h.Min != 1 || h.Max != 1000 || h.Mean() != 500.5 || len(h.Counts) > 80 {
		t.Fatalf("min %d max %d mean %f buckets %d", h.Min, h.Max, h.Mean(), len(h.Counts))
	}
	for _, v := range []int64{0, 7, 8, 9, 15, 16, 1 << 40, 1<<62 + 12345} {
		if i := bucketOf(v); bucketUpper(i) < v || (i > 0 && bucketUpper(i-1) >= v) {
			t.Errorf("value %d in bucket %d [.., %d]", v, i, bucketUpper(i))
		}
	}
	var e Histogram
	if e.Quantile(0.5) != 0 || e.Mean() != 0 {
		t.Fatal("empty histogram")
	}
}

// TestStatsBounded: the per-minute window slides with event time and the
// distinct keys are capped.
func TestStatsBounded(t *testing.T) {
	st := NewStats(StatsOptions{Window: 3, MaxKeys: 2})
	for i, src := range []string{"a", "b", "c", "d", "a"} {
		at := t0.Add(time.Duration(i) * time.Minute)
		after := fsm.Task{State: fsm.StateReasoning, Type: "general", CreatedAt: at, Context: fsm.Context{Source: src}}
		st.task(fsm.Event{Type: fsm.TaskCreated, Time: at}, &fsm.Task{}, &after)
	}
	r := st.Report()
	if len(r.PerMinute) != 3 || !r.PerMinute[0].Time.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("window: %+v", r.PerMinute)
	}
	if len(r.BySource) != 3 || r.BySource["a"] != 2 || r.BySource[OtherKey] != 2 {
		t.Fatalf("bounded sources: %v", r.BySource)
	}
	// An event older than the window counts in the totals only.
	old := fsm.Task{State: fsm.StateReasoning, CreatedAt: t0}
	st.task(fsm.Event{Type: fsm.TaskCreated, Time: t0}, &fsm.Task{}, &old)
	if r := st.Report(); r.Tasks != 6 || len(r.PerMinute) != 3 {
		t.Fatalf("old event: %d tasks, %d minutes", r.Tasks, len(r.PerMinute))
	}
	b, _ := st.Encode()
	st2, err := DecodeStats(b, st.Options())
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := st2.Encode()
	if string(b) != string(b2) {
		t.Fatal("stats do not round-trip")
	}
}

func TestSummaryAndFilter(t *testing.T) {
	tk := fsm.Task{ID: "x", Type: "plan", State: fsm.StateFailed, Priority: 2, CreatedAt: t0,
		Context: fsm.Context{Source: "http", InputText: strings.Repeat("é", 100), Error: "boom"}}
	s := Summarize(&tk)
	if len(s.Input) > MaxSummaryText || !strings.HasSuffix(s.Input, "…") || !strings.HasPrefix(s.Input, "éé") {
		t.Fatalf("cut input: %q (%d bytes)", s.Input, len(s.Input))
	}
	one, three := 1, 3
	for i, c := range []struct {
		f    Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{States: []fsm.State{fsm.StateFailed, fsm.StateCompleted}}, true},
		{Filter{States: []fsm.State{fsm.StateCompleted}}, false},
		{Filter{Types: []string{"plan"}, Sources: []string{"http"}}, true},
		{Filter{Sources: []string{"cli"}}, false},
		{Filter{MinPriority: &one, MaxPriority: &three}, true},
		{Filter{MinPriority: &three}, false},
		{Filter{CreatedFrom: t0, CreatedTo: t0.Add(time.Second)}, true},
		{Filter{CreatedTo: t0}, false},
	} {
		if got := c.f.Match(&s); got != c.want {
			t.Errorf("filter %d: %v, want %v", i, got, c.want)
		}
	}
}

func TestKindOf(t *testing.T) {
	for stream, want := range map[string]StreamKind{
		"01JGFJK2VQYGNJMS3GSRM9FV21": KindTask, InputsStream: KindInputs, MemoryStream: KindMemory,
		SystemStream: KindSystem, "$other": KindOther,
	} {
		if got := KindOf(stream); got != want {
			t.Errorf("KindOf(%q) = %s, want %s", stream, got, want)
		}
	}
}

func TestIdentity(t *testing.T) {
	a := Identity(Options{})
	if a != Identity(Options{Stats: StatsOptions{Window: 60, MaxKeys: 256}}) {
		t.Fatal("defaults and explicit defaults differ")
	}
	if a == Identity(Options{Stats: StatsOptions{Window: 30}}) {
		t.Fatal("the stats window is not part of the identity")
	}
	type v1 struct {
		A string `msgpack:"a"`
	}
	type v2 struct {
		A string `msgpack:"a"`
		B int    `msgpack:"b"`
	}
	if fingerprint(reflect.TypeFor[v1]()) == fingerprint(reflect.TypeFor[v2]()) {
		t.Fatal("adding a field does not change the fingerprint")
	}
	if !strings.Contains(a, "shape/") || strings.Contains(a, "shape/ ") {
		t.Fatalf("identity %q", a)
	}
}

func TestProgressJSONListsAreNeverNull(t *testing.T) {
	b, err := json.Marshal(Progress{TaskID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"completed_steps":[]`, `"next_steps":[]`, `"tools_used":[]`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("%s lacks %s", b, k)
		}
	}
	b, _ = json.Marshal(Progress{NextSteps: []string{"call search"}})
	if !strings.Contains(string(b), `"next_steps":["call search"]`) {
		t.Errorf("a non-empty list is not kept: %s", b)
	}
}

// TestStatsByMachine: tasks are counted by the machine they were created
// under, NAME@VERSION, through the real fold, and the count survives the
// persisted form.
func TestStatsByMachine(t *testing.T) {
	s := NewSet(Options{})
	sc := newScript()
	mustApply(t, s, sc.ev("", created("cli")))
	mustApply(t, s, sc.ev("", created("api")))
	v0 := created("api")
	v0.Machine = fsm.MachineRef{Name: fsm.MachineName, Version: 0}
	mustApply(t, s, sc.ev("", v0))
	r := s.Stats().Report()
	want := map[string]int64{"pegasus.task@1": 2, "pegasus.task@0": 1}
	if !reflect.DeepEqual(r.ByMachine, want) || fsm.CurrentMachine.String() != "pegasus.task@1" {
		t.Fatalf("by machine: %v, want %v", r.ByMachine, want)
	}
	b, err := s.Stats().Encode()
	if err != nil {
		t.Fatal(err)
	}
	st, err := DecodeStats(b, s.Stats().Options())
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Report().ByMachine; !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded by machine: %v, want %v", got, want)
	}
	j, _ := json.Marshal(st.Report())
	if !strings.Contains(string(j), `"by_machine":{"pegasus.task@0":1,"pegasus.task@1":2}`) {
		t.Fatalf("JSON form: %s", j)
	}
}

// TestStatsDecodeBeforeByMachine: a stats record persisted before the
// by_machine field existed still decodes, with every other count intact,
// and counts machines from the next created task on.
func TestStatsDecodeBeforeByMachine(t *testing.T) {
	st := NewStats(StatsOptions{})
	after := fsm.Task{State: fsm.StateReasoning, Type: "general", Machine: fsm.CurrentMachine, CreatedAt: t0, Context: fsm.Context{Source: "cli"}}
	st.task(fsm.Event{Type: fsm.TaskCreated, Time: t0}, &fsm.Task{}, &after)
	b, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// The old record: the same fields without by_machine.
	var old map[string]any
	if err := codec.Decode(b, &old); err != nil {
		t.Fatal(err)
	}
	if _, ok := old["by_machine"]; !ok {
		t.Fatalf("the new record has no by_machine: %v", old)
	}
	delete(old, "by_machine")
	ob, err := codec.Encode(old)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeStats(ob, st.Options())
	if err != nil {
		t.Fatalf("old record: %v", err)
	}
	r := got.Report()
	if r.Tasks != 1 || r.ByType["general"] != 1 || r.BySource["cli"] != 1 || r.ByState[fsm.StateReasoning] != 1 || len(r.ByMachine) != 0 {
		t.Fatalf("old record decoded as %+v", r)
	}
	if r.ByMachine == nil {
		t.Fatal("the report's by_machine is nil: JSON would show null")
	}
	got.task(fsm.Event{Type: fsm.TaskCreated, Time: t0}, &fsm.Task{}, &after)
	if n := got.Report().ByMachine[fsm.CurrentMachine.String()]; n != 1 {
		t.Fatalf("after one more task: %v", got.Report().ByMachine)
	}
}

// TestFilterText keeps tasks whose id or summarised input contains the
// text, ignoring case, and nothing else.
func TestFilterText(t *testing.T) {
	s := Summary{ID: "01JABCDEF", Input: "What time is it in Lisbon?"}
	for _, c := range []struct {
		text string
		want bool
	}{{"", true}, {"lisbon", true}, {"TIME IS", true}, {"abcdef", true}, {"paris", false}} {
		f := Filter{Text: c.text}
		if got := f.Match(&s); got != c.want {
			t.Errorf("Text %q: Match = %v, want %v", c.text, got, c.want)
		}
	}
}

// TestRegistryFindAfterRemove: the slot find remembers is forgotten when
// its task leaves, and a task put back under the same id is found; through
// the Set, NeedsTask asks for a task that left right after a step found it.
func TestRegistryFindAfterRemove(t *testing.T) {
	r := NewRegistry()
	r.put(fsm.Task{ID: "a", State: fsm.StateReasoning})
	if r.find("a") == nil || r.find("b") != nil || r.find("a").task.State != fsm.StateReasoning {
		t.Fatal("find")
	}
	r.Remove("a")
	if r.find("a") != nil {
		t.Fatal("a removed task is still found")
	}
	r.put(fsm.Task{ID: "a", State: fsm.StateActing})
	if sl := r.find("a"); sl == nil || sl.task.State != fsm.StateActing {
		t.Fatalf("put back: %+v", sl)
	}
	r.Remove("a")
	if r.find("a") != nil {
		t.Fatal("removed again, still found")
	}

	s := NewSet(Options{})
	sc := newScript()
	id := mustApply(t, s, sc.ev("", created("cli"))).After.ID
	mustApply(t, s, sc.ev(id, &fsm.TaskFailedBody{Reason: "cancelled"}))
	if s.NeedsTask(id, 3) {
		t.Fatal("NeedsTask for a task in memory")
	}
	if ev := s.Flushed(s.Seq()); len(ev) != 1 {
		t.Fatalf("evicted %v", ev)
	}
	if !s.NeedsTask(id, 3) {
		t.Fatal("NeedsTask does not ask for a task that left")
	}
	ch := s.Apply(sc.ev(id, &fsm.TaskFailedBody{Reason: "again"}))
	if ch.Err == nil || ch.Before.State != "" {
		t.Fatalf("folded into a task that left: %+v", ch)
	}
}

// TestStateSlot checks the counters' switch against stateIndex, and that
// every state of every machine has a slot of its own.
func TestStateSlot(t *testing.T) {
	for i, s := range stateIndex {
		if got := stateSlot(s); got != i {
			t.Errorf("stateSlot(%q) = %d, want %d", s, got, i)
		}
	}
	if got := stateSlot(fsm.StateNone); got != 0 {
		t.Errorf("stateSlot of the zero state = %d, want 0 (idle)", got)
	}
	if got := stateSlot("no_such_state"); got != len(stateIndex)-1 {
		t.Errorf("stateSlot of an unknown state = %d, want %d", got, len(stateIndex)-1)
	}
	for _, m := range fsm.Machines() {
		for _, s := range m.States() {
			if stateIndex[stateSlot(s)] != s {
				t.Errorf("machine %s: state %q has no slot of its own", m.Ref(), s)
			}
		}
	}
}
