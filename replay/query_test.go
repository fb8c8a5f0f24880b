package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

func TestTimelineAndStateAtBounds(t *testing.T) {
	ctx := context.Background()
	evs := replaytest.Generate(5, replaytest.Config{Tasks: 10, Concurrency: 3, Finish: true})
	mem := mustMem(t, evs)
	id := firstTask(evs)
	tl, err := Timeline(ctx, mem, id, Bound{})
	if err != nil {
		t.Fatal(err)
	}
	var stream []eventlog.Event
	for _, ev := range evs {
		if ev.Stream == id {
			stream = append(stream, ev)
		}
	}
	if len(tl.Steps) != len(stream) {
		t.Fatalf("timeline has %d steps for %d events", len(tl.Steps), len(stream))
	}
	if tl.Steps[0].From != fsm.StateIdle || tl.Steps[0].To != fsm.StateReasoning {
		t.Fatalf("first step %s -> %s", tl.Steps[0].From, tl.Steps[0].To)
	}
	for i := 1; i < len(tl.Steps); i++ {
		if tl.Steps[i].From != tl.Steps[i-1].To || tl.Steps[i].Err != nil {
			t.Fatalf("step %d: %s -> %s after %s (err %v)", i, tl.Steps[i].From, tl.Steps[i].To, tl.Steps[i-1].To, tl.Steps[i].Err)
		}
	}
	if !tl.Task.State.IsTerminal() {
		t.Fatalf("finished history, task ends %s", tl.Task.State)
	}
	// Every bound kind at the k-th event of the stream gives the state after
	// exactly k events.
	k := len(stream) / 2
	mid := stream[k-1]
	for _, b := range []Bound{AtSeq(mid.Seq), AtID(mid.ID), AtTime(mid.Time), AtSeq(stream[k].Seq - 1)} {
		got, err := StateAt(ctx, mem, id, b)
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != uint64(k) || got.State != tl.Steps[k-1].To {
			t.Fatalf("at %v: version %d state %s, want %d %s", b, got.Version, got.State, k, tl.Steps[k-1].To)
		}
		part, err := Timeline(ctx, mem, id, b)
		if err != nil || len(part.Steps) != k {
			t.Fatalf("timeline at %v: %d steps, %v", b, len(part.Steps), err)
		}
	}
	if _, err := StateAt(ctx, mem, id, AtSeq(stream[0].Seq-1)); !errors.Is(err, projection.ErrTaskNotFound) {
		t.Fatalf("before creation: %v", err)
	}
	if _, err := StateAt(ctx, mem, id, AtID(ulid.Make())); !errors.Is(err, ErrBoundNotFound) {
		t.Fatalf("unknown bound id: %v", err)
	}
	if _, err := Timeline(ctx, mem, "01JGFJK2VQYGNJMS3GSRM9FV21", Bound{}); !errors.Is(err, projection.ErrTaskNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
}

func TestParseBound(t *testing.T) {
	id := ulid.Make()
	for in, want := range map[string]Bound{
		"42":                          AtSeq(42),
		id.String():                   AtID(id),
		"2025-01-02T03:04:05Z":        AtTime(mustTime(t, "2025-01-02T03:04:05Z")),
		"2025-01-02T03:04:05.5+01:00": AtTime(mustTime(t, "2025-01-02T03:04:05.5+01:00")),
	} {
		got, err := ParseBound(in)
		if err != nil || got.Seq != want.Seq || got.ID != want.ID || !got.Time.Equal(want.Time) {
			t.Errorf("ParseBound(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1", "yesterday", "01JGFJK2VQYGNJMS3GSRM9FV2"} {
		if _, err := ParseBound(bad); err == nil {
			t.Errorf("ParseBound(%q) accepted", bad)
		}
	}
}

func TestWhyAndTrace(t *testing.T) {
	ctx := context.Background()
	evs := replaytest.Generate(9, replaytest.Config{Tasks: 6, Concurrency: 2, Finish: true})
	l, _ := logWith(t, evs)
	defer l.Close()
	for _, r := range []Reader{mustMem(t, evs), FromLog(l)} {
		id := firstTask(evs)
		w, err := Explain(ctx, r, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if w.Chain[0].ID.String() != id || w.Chain[len(w.Chain)-1].Stream != projection.InputsStream || w.Missing != (ulid.ULID{}) {
			t.Fatalf("chain from TASK_CREATED to the input: %v", w.Chain)
		}
		// Every event of the task is in the tree of its root input.
		inTree := map[ulid.ULID]bool{}
		var walk func(n *Node)
		walk = func(n *Node) {
			inTree[n.Event.ID] = true
			for _, c := range n.Children {
				if c.Event.Causation != n.Event.ID {
					t.Fatalf("child %s not caused by its parent", c.Event.ID)
				}
				walk(c)
			}
		}
		walk(w.Tree)
		for _, ev := range evs {
			if ev.Stream == id && !inTree[ev.ID] {
				t.Fatalf("event %d of the task is not a consequence of its input", ev.Seq)
			}
		}
		if _, trunc, err := Descendants(ctx, r, w.Tree.Event.ID, 3); err != nil || !trunc {
			t.Fatalf("bounded tree: truncated %v, %v", trunc, err)
		}
		if _, err := Explain(ctx, r, "nope", 0); !errors.Is(err, projection.ErrTaskNotFound) {
			t.Fatalf("bad id: %v", err)
		}
	}
}

// TestExportImport: a whole log exported to NDJSON and imported into an
// empty log is the same log (sequences, versions, ids, bodies), folds to
// the same state, and reads back as a source; a per-task export folds into
// the same task.
func TestExportImport(t *testing.T) {
	ctx := context.Background()
	evs := replaytest.Generate(3, replaytest.Config{Tasks: 15, Concurrency: 4, Finish: true})
	l, _ := logWith(t, evs)
	defer l.Close()
	var buf bytes.Buffer
	n, err := Export(ctx, FromLog(l), &buf, ExportFilter{})
	if err != nil || n != len(evs) {
		t.Fatalf("export: %d events, %v", n, err)
	}
	// Humans get the decoded body.
	lines := strings.Split(buf.String(), "\n")
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[3]), &line); err != nil || line["data"] == nil || line["body"] == nil {
		t.Fatalf("event line without data/body: %s (%v)", lines[3], err)
	}
	m, hdr, err := ReadExport(bytes.NewReader(buf.Bytes()))
	if err != nil || !hdr.Complete || hdr.Head != uint64(len(evs)) || m.Len() != len(evs) {
		t.Fatalf("read export: %+v %d %v", hdr, m.Len(), err)
	}
	for i, ev := range m.All() {
		if !sameEvent(ev, evs[i]) {
			t.Fatalf("event %d changed in the round trip:\n%+v\n%+v", i, ev, evs[i])
		}
	}
	l2, _ := logWith(t, nil)
	defer l2.Close()
	er, err := NewExportReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Import(ctx, l2, er)
	if err != nil || res.Events != len(evs) || res.Renumbered != 0 {
		t.Fatalf("import: %+v %v", res, err)
	}
	sameState(t, "imported", dump(t, foldMem(t, FromLog(l))), dump(t, foldMem(t, FromLog(l2))))
	if rep, err := Verify(ctx, l2, nil); err != nil || !rep.OK() {
		t.Fatalf("verify imported: %v %s", err, rep.Summary())
	}
	if _, err := Import(ctx, l2, sliceIter(nil, nil)); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("import into a non-empty log: %v", err)
	}

	// One task: its stream and its input; it folds into the same task.
	id := firstTask(evs)
	buf.Reset()
	if _, err := Export(ctx, FromLog(l), &buf, ExportFilter{Tasks: []string{id}}); err != nil {
		t.Fatal(err)
	}
	m, hdr, err = ReadExport(bytes.NewReader(buf.Bytes()))
	if err != nil || hdr.Complete || hdr.Filter == nil {
		t.Fatalf("task export header %+v: %v", hdr, err)
	}
	if m.All()[0].Stream != projection.InputsStream {
		t.Fatalf("the task's input is not exported first: %s", m.All()[0].Stream)
	}
	a, _ := StateAt(ctx, m, id, Bound{})
	b, _ := StateAt(ctx, FromLog(l), id, Bound{})
	ea, _ := fsm.EncodeTask(a)
	eb, _ := fsm.EncodeTask(b)
	if !bytes.Equal(ea, eb) {
		t.Fatal("task folded from its export differs")
	}
	rep, err := VerifySource(ctx, m, &VerifyOptions{AllowGaps: true})
	if err != nil || !rep.OK() {
		t.Fatalf("verify task export: %v %s", err, rep.Summary())
	}
	if rep, _ := VerifySource(ctx, m, nil); rep.OK() {
		t.Fatal("a gappy export verified as a whole log")
	}
	if _, _, err := ReadExport(strings.NewReader("{\"seq\":1}\n")); !errors.Is(err, ErrExportFormat) {
		t.Fatalf("not an export: %v", err)
	}
}

func sameEvent(a, b eventlog.Event) bool {
	return a.ID == b.ID && a.Seq == b.Seq && a.Stream == b.Stream && a.Version == b.Version && a.Type == b.Type &&
		a.Time.Equal(b.Time) && a.Causation == b.Causation && a.Correlation == b.Correlation &&
		a.Schema == b.Schema && bytes.Equal(a.Body, b.Body) && len(a.Metadata) == len(b.Metadata)
}

// TestFork: fold a prefix, append a what-if event in memory, and see where
// the machine goes; the source log is untouched.
func TestFork(t *testing.T) {
	evs := replaytest.Generate(5, replaytest.Config{Tasks: 3, Concurrency: 1, Finish: true})
	id := firstTask(evs)
	var created eventlog.Event
	for _, ev := range evs {
		if ev.Stream == id {
			created = ev
			break
		}
	}
	m := mustMem(t, evs[:created.Seq]) // up to TASK_CREATED: the task is reasoning
	body, _ := fsm.Encode(&fsm.TaskFailedBody{Error: "what if the model failed", Reason: "model_error"})
	added, err := m.Append(eventlog.Event{Stream: id, Type: string(fsm.TaskFailed), Schema: fsm.SchemaVersion, Body: body, Causation: created.ID})
	if err != nil {
		t.Fatal(err)
	}
	if added[0].Version != 2 || added[0].Correlation != created.Correlation || added[0].ID == (ulid.ULID{}) {
		t.Fatalf("appended %+v", added[0])
	}
	again, _ := NewMemLog(evs[:created.Seq]...)
	if a2, _ := again.Append(eventlog.Event{Stream: id, Type: string(fsm.TaskFailed), Schema: fsm.SchemaVersion, Body: body, Causation: created.ID}); a2[0].ID != added[0].ID {
		t.Fatal("what-if ids are not reproducible")
	}
	v := foldMem(t, m)
	task, err := v.Task(id)
	if err != nil || task.State != fsm.StateFailed || task.Context.Error != "what if the model failed" {
		t.Fatalf("forked task: %s %q %v", task.State, task.Context.Error, err)
	}
}

func TestMemLogRejectsDisorder(t *testing.T) {
	evs := replaytest.Generate(1, replaytest.Config{Tasks: 2})
	if _, err := NewMemLog(evs[1], evs[0]); err == nil {
		t.Fatal("out-of-order events accepted")
	}
	if _, err := NewMemLog(evs[0], evs[0]); err == nil {
		t.Fatal("duplicate events accepted")
	}
}

func mustTime(t *testing.T, s string) (tm time.Time) {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestStreamedExportAndGetters folds an export read from a stream (Once,
// as from a pipe) and checks the View's read-only getters against it.
func TestStreamedExportAndGetters(t *testing.T) {
	ctx := context.Background()
	evs := replaytest.Generate(13, replaytest.Config{Tasks: 30, Concurrency: 6})
	mem := mustMem(t, evs)
	var buf bytes.Buffer
	if _, err := Export(ctx, mem, &buf, ExportFilter{}); err != nil {
		t.Fatal(err)
	}
	er, err := NewExportReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	src := Once(er)
	v := foldMem(t, src)
	sameState(t, "streamed export", dump(t, foldMem(t, mem)), dump(t, v))
	if _, err := Fold(ctx, v, src, FoldOptions{}); err == nil {
		t.Fatal("a Once source folded twice")
	}

	facts := v.Facts("")
	if len(facts) == 0 || len(v.Episodes()) == 0 {
		t.Fatalf("%d facts, %d episodes", len(facts), len(v.Episodes()))
	}
	if f, ok := v.Fact(facts[0].Path); !ok || f.Content != facts[0].Content {
		t.Fatalf("Fact(%q)", facts[0].Path)
	}
	if got := len(v.Facts("no-such-prefix/")); got != 0 {
		t.Fatalf("prefix filter: %d facts", got)
	}
	st := v.Stats()
	for _, s := range fsm.States {
		if int64(v.Count(s)) != st.ByState[s] {
			t.Fatalf("Count(%s) = %d, stats say %d", s, v.Count(s), st.ByState[s])
		}
	}
	if len(v.Active()) != v.ActiveCount() || v.ActiveCount() == 0 {
		t.Fatalf("Active %d, ActiveCount %d", len(v.Active()), v.ActiveCount())
	}
	for _, bad := range []*Options{{CheckpointEvery: -1}, {MaxIssues: -2}, {MemoryBudget: MinMemoryBudget - 1}, {MemoryBudget: -1}, {Stats: projection.StatsOptions{Window: 1 << 20}}} {
		if _, err := NewView(bad); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
}
