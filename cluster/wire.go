package cluster

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

// An event's form in the stream is the stored part of its JSON form
// (replay.MarshalStored: without data, decode_error and summary, which
// the follower does not read), built once per append by prepare, whatever
// the attempts. Each part of an append (its events on one stream, one
// subject) is one message, as many of its events as fit in packLimit
// bytes: the stream carries a task's step as one message, not one a
// event (docs/cluster.md, "The stream's messages"). Two formats:
//
//   - format 1, one event a message (every message before the packed
//     format, and still any event alone in its message): the body is the
//     event's form, HeaderSchema its schema;
//   - format 2 (HeaderFormat "2"), k >= 2 events of one stream: the body
//     is their forms one after the other, HeaderSizes their sizes in
//     bytes and HeaderSchema their schemas, comma-separated, in order.
//
// Either way Nats-Msg-Id is the message's first event's id. The follower
// parses every message back (decodeEvents), except the messages of this
// node's own appends in flight: sending holds each one's bytes and
// events, and a message whose body and headers are those is those events,
// which is what parsing it would give (onWire). The bytes are compared,
// not only the id: another node may have stored other content under the
// same id first, and the copy must hold what the stream holds.

// Headers of the packed format. Stable.
const (
	// HeaderFormat is "2" on a message of several events; absent on a
	// message of one.
	HeaderFormat = "Pegasus-Format"
	// HeaderSizes is the size in bytes of each event's form in a
	// format-2 message's body, comma-separated.
	HeaderSizes = "Pegasus-Sizes"
)

// packedFormat is HeaderFormat's value on a message of several events.
const packedFormat = "2"

// packHeadroom is what packLimit leaves of the servers' max_payload for a
// message's headers (ids, batch headers, the sizes and schemas of up to
// maxBatch events).
const packHeadroom = 32 << 10

// wireMsg is one message of an append: events of one part, its first
// message or not (the part's check goes on its first).
type wireMsg struct {
	first  bool
	stream string
	id     string           // Nats-Msg-Id: the first event's id
	evs    []eventlog.Event // as sent (onWire)
	data   []byte
	schema string // HeaderSchema
	sizes  string // HeaderSizes, "" for one event (format 1)
	// res, on a part's first message, receives the part's local
	// positions when the follower writes it at its acknowledgement
	// (ownacked.go); shared by the copies of the message.
	res *partResult
}

// partResult is where the follower leaves a part's local positions.
type partResult struct {
	v atomic.Pointer[eventlog.AppendResult]
}

// setHeader sets the message's id, its part i of n and its format's
// headers.
func (w *wireMsg) setHeader(h nats.Header, i, n int) {
	h.Set(jetstream.MsgIDHeader, w.id)
	h.Set(HeaderBatch, strconv.Itoa(i)+"/"+strconv.Itoa(n))
	h.Set(HeaderSchema, w.schema)
	if w.sizes != "" {
		h.Set(HeaderFormat, packedFormat)
		h.Set(HeaderSizes, w.sizes)
	}
}

// packLimit is the most bytes of event forms one message carries: the
// servers' max_payload less packHeadroom; 0 (one event a message) if the
// connection does not know it yet.
func (r *ReplicatedLog) packLimit() int {
	if r.pack >= 0 {
		return r.pack
	}
	return max(int(r.nc.MaxPayload())-packHeadroom, 0)
}

// wireOf is the messages of parts' events, in order: each part's events
// as few messages as fit in limit bytes of forms each (an event larger
// than limit alone in its message, as is every event when limit is 0).
func wireOf(parts []eventlog.StreamAppend, limit int) ([]wireMsg, error) {
	var wire []wireMsg
	var buf []byte // one event's form
	for _, p := range parts {
		var cur *wireMsg
		var sizes, schemas []string
		flush := func() {
			if cur != nil && len(cur.evs) > 1 {
				cur.sizes, cur.schema = strings.Join(sizes, ","), strings.Join(schemas, ",")
			}
			sizes, schemas = sizes[:0], schemas[:0]
		}
		for j, ev := range p.Events {
			ev = onWire(ev)
			var err error
			if buf, err = replay.AppendStored(buf[:0], ev); err != nil {
				return nil, err
			}
			data := buf
			schema := strconv.FormatUint(uint64(ev.Schema), 10)
			if cur == nil || len(cur.data)+len(data) > limit {
				flush()
				wire = append(wire, wireMsg{first: j == 0, stream: p.Stream, id: ev.ID.String(), schema: schema})
				cur = &wire[len(wire)-1]
				if cur.first {
					cur.res = new(partResult)
				}
			}
			cur.evs = append(cur.evs, ev)
			cur.data = append(cur.data, data...)
			sizes, schemas = append(sizes, strconv.Itoa(len(data))), append(schemas, schema)
		}
		flush()
	}
	return wire, nil
}

// events is how many events the messages carry.
func events(wire []wireMsg) int {
	n := 0
	for _, w := range wire {
		n += len(w.evs)
	}
	return n
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
func (r *ReplicatedLog) noteSent(wire []wireMsg) func() {
	var sent []*wireMsg
	for k := range wire {
		w := &wire[k]
		if _, loaded := r.sending.LoadOrStore(w.id, w); !loaded {
			sent = append(sent, w)
		}
	}
	return func() {
		for _, w := range sent {
			r.sending.CompareAndDelete(w.id, w)
		}
	}
}

// ownMessage is decodeEvents for a message of this node's appends in
// flight, without parsing its JSON: ok false if it is not one.
func (r *ReplicatedLog) ownMessage(h nats.Header, data []byte, sseq uint64) (evs []eventlog.Event, i, n int, ok bool) {
	evs, i, n, w := r.ownWire(h, data, sseq)
	return evs, i, n, w != nil
}

// ownWire is ownMessage, with the message as this node sent it (nil: not
// one of its appends in flight).
func (r *ReplicatedLog) ownWire(h nats.Header, data []byte, sseq uint64) (evs []eventlog.Event, i, n int, w *wireMsg) {
	v, found := r.sending.Load(h.Get(jetstream.MsgIDHeader))
	if !found {
		return nil, 0, 0, nil
	}
	w = v.(*wireMsg)
	if !bytes.Equal(w.data, data) || h.Get(HeaderSchema) != w.schema || h.Get(HeaderSizes) != w.sizes ||
		(h.Get(HeaderFormat) == packedFormat) != (w.sizes != "") {
		return nil, 0, 0, nil
	}
	var ok bool
	if i, n, ok = batchPart(h); !ok {
		return nil, 0, 0, nil
	}
	evs = make([]eventlog.Event, len(w.evs))
	for k, ev := range w.evs {
		evs[k] = asStored(ev, sseq)
	}
	return evs, i, n, w
}

// decodeEvents returns the events the stream message at sseq holds, in
// either format, each with sseq in its metadata, and its part i of n.
func decodeEvents(h nats.Header, data []byte, sseq uint64) (evs []eventlog.Event, i, n int, err error) {
	var ok bool
	if i, n, ok = batchPart(h); !ok {
		return nil, 0, 0, fmt.Errorf("message %d: bad %s header %q", sseq, HeaderBatch, h.Get(HeaderBatch))
	}
	switch f := h.Get(HeaderFormat); f {
	case "":
		ev, err := decodeEvent(data, h.Get(HeaderSchema), sseq)
		if err != nil {
			return nil, 0, 0, err
		}
		return []eventlog.Event{ev}, i, n, nil
	case packedFormat:
		sizes, schemas := strings.Split(h.Get(HeaderSizes), ","), strings.Split(h.Get(HeaderSchema), ",")
		if len(sizes) < 2 || len(sizes) != len(schemas) {
			return nil, 0, 0, fmt.Errorf("message %d: %d sizes and %d schemas in a packed message", sseq, len(sizes), len(schemas))
		}
		for k, s := range sizes {
			size, err := strconv.Atoi(s)
			if err != nil || size <= 0 || size > len(data) {
				return nil, 0, 0, fmt.Errorf("message %d: bad %s header (event %d)", sseq, HeaderSizes, k+1)
			}
			ev, err := decodeEvent(data[:size], schemas[k], sseq)
			if err != nil {
				return nil, 0, 0, err
			}
			evs, data = append(evs, ev), data[size:]
		}
		if len(data) != 0 {
			return nil, 0, 0, fmt.Errorf("message %d: %d bytes after its events", sseq, len(data))
		}
		return evs, i, n, nil
	default:
		return nil, 0, 0, fmt.Errorf("message %d: format %q unknown to this build (a newer node wrote it: upgrade this one)", sseq, f)
	}
}

// decodeEvent returns the event of one form, with its schema and its
// message's stream sequence in its metadata.
func decodeEvent(data []byte, schema string, sseq uint64) (eventlog.Event, error) {
	ev, err := replay.ParseDraft(data)
	if err != nil {
		return ev, fmt.Errorf("message %d: %w", sseq, err)
	}
	s, err := strconv.ParseUint(schema, 10, 16)
	if err != nil {
		return ev, fmt.Errorf("message %d: bad %s header", sseq, HeaderSchema)
	}
	ev.Schema = uint16(s)
	if ev.Metadata == nil {
		ev.Metadata = map[string]string{}
	}
	ev.Metadata[MetaStreamSeq] = strconv.FormatUint(sseq, 10)
	return ev, nil
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

// MessageEvents returns the events a message of the replicated log's
// stream holds, in either format, each with the message's stream
// sequence sseq in its metadata (MetaStreamSeq): for audits that read the
// stream itself.
func MessageEvents(h nats.Header, data []byte, sseq uint64) ([]eventlog.Event, error) {
	evs, _, _, err := decodeEvents(h, data, sseq)
	return evs, err
}
