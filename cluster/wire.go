package cluster

import (
	"bytes"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

// A stream message is the stored part of its event's JSON form
// (replay.MarshalStored: without data, decode_error and summary, which
// the follower does not read), built once per append by prepare, whatever
// the attempts. The follower
// parses every message back (decodeEvent), except the messages of this
// node's own appends in flight: sending holds each one's bytes and event,
// and a message whose body and schema are those bytes is that event,
// which is what parsing them would give (onWire). The bytes are compared,
// not only the id: another node may have stored other content under the
// same id first, and the copy must hold what the stream holds.

// wireOf is the messages' bodies of parts' events, in order.
func wireOf(parts []eventlog.StreamAppend) ([][]byte, error) {
	var wire [][]byte
	for _, p := range parts {
		for _, ev := range p.Events {
			data, err := replay.MarshalStored(onWire(ev))
			if err != nil {
				return nil, err
			}
			wire = append(wire, data)
		}
	}
	return wire, nil
}

// sentEvent is one message of an append in flight and its event.
type sentEvent struct {
	data   []byte
	schema string
	ev     eventlog.Event
}

// onWire is ev as the stream carries it and the follower parses it back:
// no local sequence or version, the time in UTC without a monotonic
// reading, no empty metadata or body.
func onWire(ev eventlog.Event) eventlog.Event {
	ev.Seq, ev.Version = 0, 0
	ev.Time = ev.Time.UTC().Round(0)
	if len(ev.Metadata) == 0 {
		ev.Metadata = nil
	}
	if len(ev.Body) == 0 {
		ev.Body = nil
	}
	return ev
}

// noteSent records an append's messages as in flight and returns the
// function that forgets them, once the append returned (stored and
// applied, or not: a message applied later is parsed).
func (r *ReplicatedLog) noteSent(parts []eventlog.StreamAppend, wire [][]byte) func() {
	var sent []*sentEvent
	k := 0
	for _, p := range parts {
		for _, ev := range p.Events {
			s := &sentEvent{data: wire[k], schema: strconv.FormatUint(uint64(ev.Schema), 10), ev: onWire(ev)}
			k++
			if _, loaded := r.sending.LoadOrStore(ev.ID.String(), s); !loaded {
				sent = append(sent, s)
			}
		}
	}
	return func() {
		for _, s := range sent {
			r.sending.CompareAndDelete(s.ev.ID.String(), s)
		}
	}
}

// ownMessage is decodeEvent for a message of this node's appends in
// flight, without parsing its JSON: ok false if it is not one.
func (r *ReplicatedLog) ownMessage(h nats.Header, data []byte, sseq uint64) (ev eventlog.Event, i, n int, ok bool) {
	v, found := r.sending.Load(h.Get(jetstream.MsgIDHeader))
	if !found {
		return ev, 0, 0, false
	}
	s := v.(*sentEvent)
	if !bytes.Equal(s.data, data) || h.Get(HeaderSchema) != s.schema {
		return ev, 0, 0, false
	}
	if i, n, ok = batchPart(h); !ok {
		return ev, 0, 0, false
	}
	ev = asStored(s.ev, sseq)
	return ev, i, n, true
}

// batchPart parses the HeaderBatch "i/n" of a message.
func batchPart(h nats.Header) (i, n int, ok bool) {
	a, b, found := bytes.Cut([]byte(h.Get(HeaderBatch)), []byte("/"))
	if !found {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(string(a))
	n, err2 := strconv.Atoi(string(b))
	if err1 != nil || err2 != nil || i < 1 || i > n {
		return 0, 0, false
	}
	return i, n, true
}
