package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
	"github.com/pegasus-engine/pegasus/replay/replaytest"
)

func formCases() []eventlog.Event {
	return append(replaytest.Oddities(), replaytest.Generate(11, replaytest.Config{Tasks: 6, Concurrency: 3, Finish: true})...)
}

// TestEventJSONRoundTrip: every event, whatever its body, comes back from
// MarshalEvent through ParseEvent as stored, and through ParseDraft with
// the same id, envelope and body bytes; encoding is deterministic.
func TestEventJSONRoundTrip(t *testing.T) {
	for _, ev := range formCases() {
		b, err := MarshalEvent(ev)
		if err != nil {
			t.Fatalf("seq %d: %v", ev.Seq, err)
		}
		if bytes.ContainsRune(b, '\n') {
			t.Fatalf("seq %d: the form is not one line: %s", ev.Seq, b)
		}
		if again, _ := MarshalEvent(ev); !bytes.Equal(again, b) {
			t.Fatalf("seq %d: two encodings differ", ev.Seq)
		}
		got, err := ParseEvent(b)
		if err != nil {
			t.Fatalf("seq %d: %v\n%s", ev.Seq, err, b)
		}
		if want := replaytest.Stored(ev); !reflect.DeepEqual(got, want) {
			t.Errorf("seq %d %s:\n got %+v\nwant %+v", ev.Seq, ev.Type, got, want)
		}
		draft, err := ParseDraft(b)
		if err != nil {
			t.Fatalf("seq %d as a draft: %v", ev.Seq, err)
		}
		want := replaytest.Stored(ev)
		want.Seq, want.Version = 0, 0
		if !reflect.DeepEqual(draft, want) {
			t.Errorf("seq %d %s as a draft:\n got %+v\nwant %+v", ev.Seq, ev.Type, draft, want)
		}
	}
}

// TestEventJSONDerivedFields: data is the decoded body, decode_error says
// why there is none, summary is the human line; HTML is not escaped.
func TestEventJSONDerivedFields(t *testing.T) {
	byType := map[string]EventJSON{}
	for _, ev := range replaytest.Oddities() {
		j := NewEventJSON(ev)
		byType[ev.Type] = j
		if j.Time.Location() != time.UTC {
			t.Errorf("%s: time %v is not UTC", ev.Type, j.Time)
		}
	}
	check := func(typ string, data, decodeErr, summary string) {
		t.Helper()
		j := byType[typ]
		if string(j.Data) != data || !strings.Contains(j.DecodeError, decodeErr) || (decodeErr == "") != (j.DecodeError == "") ||
			!strings.Contains(j.Summary, summary) {
			t.Errorf("%s: data %s, decode_error %q, summary %q", typ, j.Data, j.DecodeError, j.Summary)
		}
	}
	check("SYSTEM_STARTED", `{"model":"offline <demo> & co","head":41,"resumed":2}`, "", `head=41 model="offline <demo> & co" resumed=2`)
	check("SYSTEM_STOPPED", `{"head":0}`, "", "head=0 clean=false")
	check("SYSTEM_REBOOTED", ``, "", "(no body)")
	check("REASON_DONE", ``, "malformed", "(body does not decode: ")
	check("SOMETHING_NEWER", ``, "unknown event type", "(body does not decode")
	check("TASK_SUSPENDED", ``, "schema 8", "(body does not decode")
	check("MEMORY_WRITTEN", `{"path":"facts/a.md","content":"line 1\nline 2 <tag>"}`, "", `path=facts/a.md content="line 1\nline 2 <tag>"`)
	b, _ := MarshalEvent(replaytest.Oddities()[1])
	if !bytes.Contains(b, []byte(`what is <b>2 & 3</b>?`)) || !bytes.Contains(b, []byte(`"metadata":{"empty":"","trace":"abc"}`)) {
		t.Errorf("input line: %s", b)
	}
}

// TestParseDraft: a hand-written event needs only its type; its body may
// be given decoded, and encodes to what the writers would store; a
// misspelt field is an error.
func TestParseDraft(t *testing.T) {
	ev, err := ParseDraft([]byte(`{"type":"STEP_COMPLETED","data":{"step_index":1,"result":"42"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := fsm.Encode(&fsm.StepCompletedBody{StepIndex: 1, Result: "42"})
	if !bytes.Equal(ev.Body, want) || ev.Schema != fsm.SchemaVersion || ev.Stream != "" || !ev.Time.IsZero() {
		t.Fatalf("draft: %+v", ev)
	}
	ev, err = ParseDraft([]byte(`{"type":"MEMORY_APPENDED","stream":"$memory","data":{"path":"p","content":"c"}}`))
	want, _ = projection.EncodeMemory(&projection.MemoryAppendedBody{Path: "p", Content: "c"})
	if err != nil || !bytes.Equal(ev.Body, want) || ev.Schema != projection.MemorySchemaVersion {
		t.Fatalf("memory draft: %+v %v", ev, err)
	}
	ev, err = ParseDraft([]byte(`{"type":"SYSTEM_STOPPED","stream":"$system","data":{"head":9,"clean":true}}`))
	want, _ = projection.EncodeSystem(&projection.SystemBody{Head: 9, Clean: true})
	if err != nil || !bytes.Equal(ev.Body, want) {
		t.Fatalf("system draft: %+v %v", ev, err)
	}
	ev, err = ParseDraft([]byte(`{"type":"TOOL_CALL_FAILED","data":{"step_index":0,"error":"boom"}}`))
	if err != nil || len(ev.Body) == 0 {
		t.Fatalf("failed tool call draft: %+v %v", ev, err)
	}
	for _, bad := range []string{
		`{"data":{}}`, `{"type":"STEP_COMPLETED","dat":{}}`, `{"type":"STEP_COMPLETED","data":{"step":1}}`,
		`{"type":"NOT_A_TYPE","data":{"x":1}}`, `{"type":"STEP_COMPLETED","id":"nope"}`, `not json`,
		`{"type":"STEP_COMPLETED"} {"type":"STEP_COMPLETED"}`,
	} {
		if _, err := ParseDraft([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", bad)
		}
	}
	for _, bad := range []string{`{"type":"X","seq":1,"stream":"s","version":1}`, `{"id":"01JPAF8SR00000000001FET001","type":"X"}`, `[]`} {
		if _, err := ParseEvent([]byte(bad)); !errors.Is(err, ErrEventJSON) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// TestReadExportBeforeTheEventForm: an export written before the event
// form had decode_error and summary (testdata/export-before-event-form.ndjson,
// verbatim) reads as it did, and rewriting it keeps every stored byte.
func TestReadExportBeforeTheEventForm(t *testing.T) {
	raw, err := os.ReadFile("testdata/export-before-event-form.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	m, hdr, err := ReadExport(bytes.NewReader(raw))
	if err != nil || !hdr.Complete || m.Len() != 10 {
		t.Fatalf("%+v %d %v", hdr, m.Len(), err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")[1:]
	for i, ev := range m.All() {
		var old, now map[string]any
		json.Unmarshal([]byte(lines[i]), &old)
		b, _ := MarshalEvent(ev)
		json.Unmarshal(b, &now)
		for _, k := range []string{"seq", "id", "stream", "version", "type", "time", "causation", "correlation", "schema", "metadata", "body", "data"} {
			if !reflect.DeepEqual(old[k], now[k]) {
				t.Errorf("line %d %s: was %v, now %v", i+2, k, old[k], now[k])
			}
		}
	}
}

// TestReadHeaderlessEvents: lines of events without a header (an API
// response's events, tail --json) read as a partial export.
func TestReadHeaderlessEvents(t *testing.T) {
	evs := replaytest.Generate(2, replaytest.Config{Tasks: 2, Finish: true})
	var buf bytes.Buffer
	buf.WriteString("\n")
	for _, ev := range evs[3:] {
		b, _ := MarshalEvent(ev)
		buf.Write(b)
		buf.WriteString("\n")
	}
	m, hdr, err := ReadExport(&buf)
	if err != nil || hdr.Complete || hdr.Format != ExportFormat || m.Len() != len(evs)-3 {
		t.Fatalf("%+v %v", hdr, err)
	}
	if !sameEvent(m.All()[0], evs[3]) {
		t.Fatalf("first event %+v", m.All()[0])
	}
	if _, _, err := ReadExport(strings.NewReader(`{"hello":1}` + "\n")); !errors.Is(err, ErrExportFormat) {
		t.Fatalf("neither header nor event: %v", err)
	}
}

// BenchmarkEventJSON measures the one encoder and parser per event on a
// generated history (what export, --file and --server pay per event).
func BenchmarkEventJSON(b *testing.B) {
	evs := replaytest.Generate(1, replaytest.Config{Tasks: 50, Finish: true})
	lines := make([][]byte, len(evs))
	size := 0
	for i, ev := range evs {
		lines[i], _ = MarshalEvent(ev)
		size += len(lines[i])
	}
	b.Run("marshal", func(b *testing.B) {
		b.SetBytes(int64(size / len(evs)))
		for i := 0; b.Loop(); i++ {
			if _, err := MarshalEvent(evs[i%len(evs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.SetBytes(int64(size / len(evs)))
		for i := 0; b.Loop(); i++ {
			if _, err := ParseEvent(lines[i%len(lines)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestDecodeSystemBodies: $system bodies decode to projection.SystemBody
// (empty is the zero body); bytes that are not one are an error, which the
// fold records as a refusal; a type this build does not know carries no
// body and no error.
func TestDecodeSystemBodies(t *testing.T) {
	sys := func(typ string, body []byte) eventlog.Event {
		return eventlog.Event{Stream: projection.SystemStream, Type: typ, Schema: projection.SystemSchemaVersion, Body: body, Seq: 1, Version: 1}
	}
	good, _ := projection.EncodeSystem(&projection.SystemBody{Head: 7, Clean: true})
	fe, err := Decode(sys("SYSTEM_STOPPED", good))
	if b, ok := fe.Body.(*projection.SystemBody); err != nil || !ok || b.Head != 7 || !b.Clean || b.EventType() != projection.SystemStopped {
		t.Fatalf("good body: %#v %v", fe.Body, err)
	}
	if fe, err := Decode(sys("SYSTEM_STARTED", nil)); err != nil || fe.Body.(*projection.SystemBody).Head != 0 {
		t.Fatalf("empty body: %#v %v", fe.Body, err)
	}
	if _, err := Decode(sys("SYSTEM_STARTED", []byte{0xc1})); !errors.Is(err, projection.ErrMalformed) {
		t.Fatalf("bad body: %v", err)
	}
	if fe, err := Decode(sys("SYSTEM_UPGRADED", []byte{0xc1})); err != nil || fe.Body != nil {
		t.Fatalf("unknown type: %#v %v", fe.Body, err)
	}
	v, err := NewView(nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Fold(context.Background(), v, mustMem(t, []eventlog.Event{sys("SYSTEM_STARTED", []byte{0xc1})}), FoldOptions{})
	if err != nil || res.Refused != 1 {
		t.Fatalf("a bad system body folds as %+v, %v; want one refusal", res, err)
	}
}

// TestMarshalStored: the form without its derived fields parses, through
// ParseEvent and ParseDraft, to exactly what the whole form parses to, and
// carries no data, decode_error or summary.
func TestMarshalStored(t *testing.T) {
	for _, ev := range formCases() {
		whole, err := MarshalEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		b, err := MarshalStored(ev)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"data", "decode_error", "summary"} {
			if _, ok := fields[k]; ok {
				t.Fatalf("seq %d: %q in the stored form: %s", ev.Seq, k, b)
			}
		}
		for name, parse := range map[string]func([]byte) (eventlog.Event, error){"ParseEvent": ParseEvent, "ParseDraft": ParseDraft} {
			want, err := parse(whole)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parse(b)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("seq %d %s, %s:\n got %+v (%v)\nwant %+v", ev.Seq, ev.Type, name, got, err, want)
			}
		}
	}
}
