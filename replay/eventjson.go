package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// EventJSON is the one JSON form of an event (docs/events.md, "The JSON
// form of an event"): what the daemon's API and its event stream serve,
// what an export holds on each line, and what pegasus-replay prints with
// --json and reads with --server, --file and fork --inject. One encoder
// (NewEventJSON, MarshalEvent) writes it and one parser (ParseEvent,
// ParseDraft) reads it.
//
// Body, the stored msgpack bytes (base64 in JSON), is the truth: a parsed
// event has exactly the bytes that were stored, even when they do not
// decode. Data, DecodeError and Summary are derived from it for people and
// scripts and are ignored on reading, except that a draft without a body
// may give its body as Data.
//
// Stable: fields are only ever added.
type EventJSON struct {
	ID          string            `json:"id"`
	Seq         uint64            `json:"seq"`
	Stream      string            `json:"stream"`
	Version     uint64            `json:"version"`
	Type        string            `json:"type"`
	Schema      uint16            `json:"schema"`
	Time        time.Time         `json:"time"`
	Causation   string            `json:"causation,omitempty"`
	Correlation string            `json:"correlation,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// Body is the stored body bytes, standard base64 with padding in JSON.
	Body []byte `json:"body"`
	// Data is the body decoded (the JSON of its Go type: an fsm body, a
	// memory body, projection.SystemBody); absent when the body does not
	// decode or there is none.
	Data json.RawMessage `json:"data,omitempty"`
	// DecodeError says why the body did not decode.
	DecodeError string `json:"decode_error,omitempty"`
	// Summary is the one line a person reads: the decoded body as
	// key=value pairs (Summarize).
	Summary string `json:"summary,omitempty"`
}

// NewEventJSON returns the JSON form of a stored event: its envelope, its
// stored bytes, and the body decoded by Decode (the decoder the fold uses)
// with its summary, or the decode error.
func NewEventJSON(ev eventlog.Event) EventJSON {
	j := storedJSON(ev)
	fe, err := Decode(ev)
	if err != nil {
		j.DecodeError = err.Error()
	} else if fe.Body != nil {
		if data, merr := marshalJSON(fe.Body); merr == nil {
			j.Data = data
		}
	}
	j.Summary = Summarize(fe, err)
	return j
}

// storedJSON is the JSON form's stored fields: everything but data,
// decode_error and summary.
func storedJSON(ev eventlog.Event) EventJSON {
	j := EventJSON{
		ID: idText(ev.ID), Seq: ev.Seq, Stream: ev.Stream, Version: ev.Version, Type: ev.Type,
		Schema: ev.Schema, Time: ev.Time.UTC(), Causation: idText(ev.Causation),
		Correlation: idText(ev.Correlation), Metadata: ev.Metadata, Body: ev.Body,
	}
	if len(j.Metadata) == 0 {
		j.Metadata = nil
	}
	if j.Body == nil {
		j.Body = []byte{}
	}
	return j
}

// MarshalStored returns the JSON form of ev without the fields derived
// from its body (data, decode_error, summary), which ParseEvent and
// ParseDraft do not read, on one line: the event as stored, without
// decoding its body. The clustered log's stream carries it
// (docs/cluster.md).
func MarshalStored(ev eventlog.Event) ([]byte, error) { return AppendStored(nil, ev) }

// MarshalEvent returns the JSON form of ev on one line, without a trailing
// newline. HTML characters are not escaped (model output is full of them);
// equal events give equal bytes.
func MarshalEvent(ev eventlog.Event) ([]byte, error) {
	j := NewEventJSON(ev)
	return marshalJSON(&j)
}

// marshalJSON is json.Marshal without HTML escaping and without the
// trailing newline of json.Encoder.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func idText(id ulid.ULID) string {
	if id == (ulid.ULID{}) {
		return ""
	}
	return id.String()
}

// ErrEventJSON is returned (wrapped) by ParseEvent and ParseDraft for text
// that is not an event in the JSON form.
var ErrEventJSON = errors.New("replay: not an event")

// ParseEvent parses one stored event in the JSON form (an export line, an
// element of GET /v1/events, the data of an event-stream message, a line of
// tail --json) and returns it as it was stored: the envelope and the exact
// body bytes. It needs id, seq, stream, version and type; fields it does
// not know are ignored, and data, decode_error and summary are not read.
// Export lines written before the form had decode_error and summary are
// the same form and parse alike.
func ParseEvent(b []byte) (eventlog.Event, error) {
	var j EventJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return eventlog.Event{}, fmt.Errorf("%w: %v", ErrEventJSON, err)
	}
	return ParseEventJSON(j)
}

// ParseEventJSON is ParseEvent of an event already decoded from its JSON
// form (an api.Event converts to an EventJSON: they have the same fields).
func ParseEventJSON(j EventJSON) (eventlog.Event, error) {
	ev, err := j.envelope()
	if err != nil {
		return ev, err
	}
	if j.ID == "" || j.Seq == 0 || j.Stream == "" || j.Version == 0 || j.Type == "" {
		return ev, fmt.Errorf("%w: a stored event needs id, seq, stream, version and type", ErrEventJSON)
	}
	return ev, nil
}

// ParseDraft parses an event to append (pegasus-replay fork --inject): the
// JSON form with every field optional but type, so that any event printed
// by the tools can be injected as is and a hand-written one needs only
// what matters. seq and version are read but not returned (the log
// assigns them); stream, causation and time, when absent, are left empty
// for the caller to default; schema defaults to the current schema of the stream's body
// kind; and when "body" is absent, data (the decoded body) is encoded into
// one (EncodeData). "body":"" is an empty body, whatever data says.
// Unknown fields are refused, so a misspelt field is an error rather than
// silently dropped.
func ParseDraft(b []byte) (eventlog.Event, error) {
	var j EventJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return eventlog.Event{}, fmt.Errorf("%w: %v", ErrEventJSON, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return eventlog.Event{}, fmt.Errorf("%w: more than one JSON value on the line", ErrEventJSON)
	}
	if j.Type == "" {
		return eventlog.Event{}, fmt.Errorf(`%w: an event needs a "type"`, ErrEventJSON)
	}
	noBody := j.Body == nil // absent or null; "body":"" is an empty body
	ev, err := j.envelope()
	if err != nil {
		return ev, err
	}
	ev.Seq, ev.Version = 0, 0
	if ev.Schema == 0 {
		ev.Schema = SchemaFor(ev.Stream)
	}
	if noBody && len(j.Data) > 0 && string(j.Data) != "null" {
		if ev.Body, err = EncodeData(ev.Stream, ev.Type, j.Data); err != nil {
			return ev, err
		}
	}
	return ev, nil
}

// envelope converts the fields that are stored: everything but data,
// decode_error and summary. An empty body or metadata is nil, as the log
// returns it.
func (j *EventJSON) envelope() (eventlog.Event, error) {
	ev := eventlog.Event{
		Seq: j.Seq, Stream: j.Stream, Version: j.Version, Type: j.Type, Schema: j.Schema,
		Time: j.Time.UTC(), Metadata: j.Metadata, Body: j.Body,
	}
	if len(ev.Metadata) == 0 {
		ev.Metadata = nil
	}
	if len(ev.Body) == 0 {
		ev.Body = nil
	}
	if err := ParseIDs(&ev, j.ID, j.Causation, j.Correlation); err != nil {
		return ev, fmt.Errorf("%w: %v", ErrEventJSON, err)
	}
	return ev, nil
}

// ParseIDs sets ev's id, causation and correlation from their text, as the
// JSON form prints them; an empty text leaves the zero id.
func ParseIDs(ev *eventlog.Event, id, causation, correlation string) error {
	for _, f := range []struct {
		name string
		s    string
		dst  *ulid.ULID
	}{{"id", id, &ev.ID}, {"causation", causation, &ev.Causation}, {"correlation", correlation, &ev.Correlation}} {
		if f.s == "" {
			continue
		}
		v, err := ulid.ParseStrict(f.s)
		if err != nil {
			return fmt.Errorf("%s %q: %v", f.name, f.s, err)
		}
		*f.dst = v
	}
	return nil
}

// SchemaFor is the body schema this build writes on stream: the memory or
// system schema on those streams, fsm.SchemaVersion elsewhere.
func SchemaFor(stream string) uint16 {
	switch projection.KindOf(stream) {
	case projection.KindMemory:
		return projection.MemorySchemaVersion
	case projection.KindSystem:
		return projection.SystemSchemaVersion
	}
	return fsm.SchemaVersion
}

// EncodeData turns a decoded body (the data of the JSON form) of an event
// of type et on stream into the stored msgpack bytes. The body type is the
// one Decode returns for an empty body of that type and stream, so this
// never disagrees with the fold about which type goes with which event.
// Unknown fields in data are refused.
func EncodeData(stream, et string, data json.RawMessage) ([]byte, error) {
	probe := eventlog.Event{Stream: stream, Type: et, Schema: SchemaFor(stream), Body: []byte{0x80}} // an empty msgpack map
	if fsm.EventType(et) == fsm.ToolCallFailed {
		// The result body's own type follows its error field, empty here.
		probe.Type = string(fsm.ToolCallCompleted)
	}
	dec, err := Decode(probe)
	if err != nil || dec.Body == nil {
		if err == nil {
			err = fmt.Errorf("no body type on stream %q", stream)
		}
		return nil, fmt.Errorf("type %s: cannot build its body from \"data\": %v", et, err)
	}
	body := dec.Body
	jd := json.NewDecoder(bytes.NewReader(data))
	jd.DisallowUnknownFields()
	if err := jd.Decode(body); err != nil {
		return nil, fmt.Errorf("type %s: data: %v", et, err)
	}
	switch b := body.(type) {
	case *projection.SystemBody:
		return projection.EncodeSystem(b)
	}
	if projection.KindOf(stream) == projection.KindMemory {
		return projection.EncodeMemory(body)
	}
	return fsm.Encode(body)
}

// Summarize is the one line a person reads for an event: fsm.DescribeEvent
// without the leading type (the type has its own column), the memory and
// system bodies in the same key=value style, or why the body does not
// decode. decodeErr is Decode's error for the event.
func Summarize(fe fsm.Event, decodeErr error) string {
	if decodeErr != nil && fe.Body == nil {
		return "(body does not decode: " + decodeErr.Error() + ")"
	}
	switch x := fe.Body.(type) {
	case *projection.MemoryWrittenBody:
		return fmt.Sprintf("path=%s content=%s", x.Path, quoteText(x.Content))
	case *projection.MemoryAppendedBody:
		return fmt.Sprintf("path=%s appended=%s", x.Path, quoteText(x.Content))
	case *projection.MemoryPatchedBody:
		return fmt.Sprintf("path=%s old=%s new=%s", x.Path, quoteText(x.Old), quoteText(x.New))
	case *projection.EpisodeRecordedBody:
		s := "title=" + quoteText(x.Title)
		if x.TaskID != "" {
			s += " task=" + x.TaskID
		}
		return s
	case *projection.SystemBody:
		s := "head=" + strconv.FormatUint(x.Head, 10)
		if x.Model != "" {
			s += " model=" + quoteText(x.Model)
		}
		if x.Config != "" {
			s += " config=" + x.Config
		}
		if x.Resumed != 0 {
			s += " resumed=" + strconv.Itoa(x.Resumed)
		}
		if x.Suspended != 0 {
			s += " suspended=" + strconv.Itoa(x.Suspended)
		}
		if x.Kind == projection.SystemStopped {
			s += " clean=" + strconv.FormatBool(x.Clean)
		}
		return s
	}
	return strings.TrimSpace(strings.TrimPrefix(fsm.DescribeEvent(fe), string(fe.Type)))
}

// quoteText quotes a free text cut to 72 runes, as fsm's descriptions do.
func quoteText(s string) string {
	if utf8.RuneCountInString(s) > 72 {
		s = string([]rune(s)[:72]) + "…"
	}
	return strconv.Quote(s)
}
