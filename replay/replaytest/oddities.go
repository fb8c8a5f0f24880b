package replaytest

import (
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// Oddities returns events that stress every corner of the JSON form of an
// event (docs/events.md) as their own small, consecutive log: metadata;
// text with HTML characters, quotes, newlines and non-ASCII runes; a memory
// body; typed and empty $system bodies; a type this build does not know on
// $system and on a task stream; a body that is not msgpack; a body under a
// schema this build does not read; an empty body where one is expected;
// and a time that is not UTC. Each decodes, or fails to, in its own way,
// and each must still come back from any producer and parser with its
// stored bytes.
func Oddities() []eventlog.Event {
	at := time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)
	var evs []eventlog.Event
	vers := map[string]uint64{}
	n := 0
	add := func(stream, typ string, cause, corr ulid.ULID, schema uint16, body []byte, meta map[string]string) ulid.ULID {
		n++
		vers[stream]++
		id := ulid.ULID{}
		_ = id.SetTime(ulid.Timestamp(at.Add(time.Duration(n) * time.Millisecond)))
		id[15] = byte(n)
		if corr == (ulid.ULID{}) {
			corr = id
		}
		evs = append(evs, eventlog.Event{
			ID: id, Seq: uint64(n), Stream: stream, Version: vers[stream], Type: typ,
			Time: at.Add(time.Duration(n) * time.Millisecond), Causation: cause, Correlation: corr,
			Schema: schema, Metadata: meta, Body: body,
		})
		return id
	}
	must := func(b []byte, err error) []byte {
		if err != nil {
			panic(err)
		}
		return b
	}
	sys := must(projection.EncodeSystem(&projection.SystemBody{Model: "offline <demo> & co", Head: 41, Resumed: 2}))
	add(projection.SystemStream, string(projection.SystemStarted), ulid.ULID{}, ulid.ULID{}, projection.SystemSchemaVersion, sys, nil)
	in := must(fsm.Encode(&fsm.Input{Kind: fsm.MessageReceived, Text: "what is <b>2 & 3</b>?\n\"quoted\" — ünïcødé ✓", Source: "cli",
		Metadata: map[string]string{"z": "last", "a": "first"}}))
	task := add(projection.InputsStream, string(fsm.MessageReceived), ulid.ULID{}, ulid.ULID{}, fsm.SchemaVersion, in,
		map[string]string{"trace": "abc", "empty": ""})
	created := must(fsm.Encode(&fsm.TaskCreatedBody{TaskType: "general", InputText: "what is <b>2 & 3</b>?", Source: "cli"}))
	tc := add(task.String(), string(fsm.TaskCreated), task, task, fsm.SchemaVersion, created, nil)
	add(task.String(), string(fsm.ReasonDone), tc, task, fsm.SchemaVersion, []byte{0xc1, 0xff, 'n', 'o', 't'}, nil)
	add(task.String(), "SOMETHING_NEWER", tc, task, fsm.SchemaVersion, []byte{0x81, 0xa1, 'x', 0x01}, nil)
	add(task.String(), string(fsm.TaskSuspended), tc, task, fsm.SchemaVersion+7, must(fsm.Encode(&fsm.TaskSuspendedBody{Reason: "later"})), nil)
	add(task.String(), string(fsm.TaskNotify), tc, task, fsm.SchemaVersion, nil, nil)
	mem := must(projection.EncodeMemory(&projection.MemoryWrittenBody{Path: "facts/a.md", Content: "line 1\nline 2 <tag>"}))
	add(projection.MemoryStream, string(projection.MemoryWritten), tc, task, projection.MemorySchemaVersion, mem, nil)
	add(projection.SystemStream, "SYSTEM_REBOOTED", ulid.ULID{}, ulid.ULID{}, 1, []byte{0x80}, nil)
	add(projection.SystemStream, string(projection.SystemStopped), ulid.ULID{}, ulid.ULID{}, projection.SystemSchemaVersion, nil, nil)
	// A time with a zone: the JSON form prints UTC, the instant is the same.
	evs[len(evs)-1].Time = evs[len(evs)-1].Time.In(time.FixedZone("UTC+2", 2*3600))
	return evs
}

// Stored returns ev as a log returns it once appended: its time in UTC, nil
// for empty metadata and body. A parser of the JSON form must give exactly
// this.
func Stored(ev eventlog.Event) eventlog.Event {
	ev.Time = ev.Time.UTC()
	if len(ev.Metadata) == 0 {
		ev.Metadata = nil
	}
	if len(ev.Body) == 0 {
		ev.Body = nil
	}
	return ev
}
