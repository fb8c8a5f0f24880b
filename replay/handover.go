package replay

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

// Expect hands the View the decoded body of an event its caller is about
// to append: id is the event's id, data its stored body, fsm.Encode(body).
// When the fold meets the event with that id on a task stream, and the
// log holds exactly data as its body, with body's type and
// fsm.SchemaVersion, it folds body instead of decoding data again: the
// same fold, since decoding what body encodes to gives body back
// (TestHandoverEqualsDecoding) for the types it takes and the form they
// are decoded in (decodedForm). Anything else (another body, a schema, an
// event never appended or one folded long after) is decoded from the log
// as always, so the View stays a fold of what the log holds.
//
// Neither body nor data may change once handed over: the View's tasks
// keep what fsm.Apply keeps of body, as they keep what a decoded body
// holds, and data is compared with the log's bytes when the event is
// folded. body's strings should be its own, not parts of a larger buffer
// the View would keep alive. The agent hands over the bodies of the stage
// outcomes it appends; a View that is never handed a body decodes every
// event. A nil View ignores the call.
func (v *View) Expect(id ulid.ULID, data []byte, body fsm.Body) {
	if v == nil {
		return
	}
	v.hand.put(id, data, body)
}

// handover holds the bodies handed over by Expect, by event id, until
// the fold takes them. An event that is never folded (a stale outcome
// dropped on a conflict) leaves its entry behind, so entries live two
// generations at most: a generation ends after handoverGen task events
// folded, or handoverGen bodies handed over, whichever comes first. What
// it holds is bounded by what was appended lately, and an entry dropped
// before its event is folded (one held back by a long stage) is decoded
// from the log instead.
type handover struct {
	n        atomic.Int64 // entries held: a fold with none takes no lock
	mu       sync.Mutex
	cur, old map[ulid.ULID]handed
	folded   int // task events folded in this generation
}

// handed is one body handed over, with the bytes it encodes to.
type handed struct {
	data []byte
	body fsm.Body
}

// handoverGen is the size of a generation of handover: far more than the
// events appended and not yet folded at any time.
const handoverGen = 4096

func (h *handover) put(id ulid.ULID, data []byte, body fsm.Body) {
	if body == nil || !decodedForm(body) {
		return // the fold would decode it anyway: not kept
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil {
		h.cur, h.old = make(map[ulid.ULID]handed, 256), make(map[ulid.ULID]handed, 256)
	}
	if len(h.cur) >= handoverGen {
		h.rotate()
	}
	if _, ok := h.cur[id]; !ok {
		h.n.Add(1)
	}
	h.cur[id] = handed{data: data, body: body}
}

// rotate starts a generation: the entries of the one before go. Called
// with mu held.
func (h *handover) rotate() {
	h.n.Add(-int64(len(h.old)))
	clear(h.old)
	h.cur, h.old, h.folded = h.old, h.cur, 0
}

// take returns the body handed over for ev, if the log holds exactly what
// it encodes to, and forgets it; nil when there is none (decode ev). put
// keeps only bodies in decodedForm.
func (h *handover) take(ev *eventlog.Event) fsm.Body {
	if h.n.Load() == 0 || projection.KindOf(ev.Stream) != projection.KindTask {
		return nil
	}
	h.mu.Lock()
	e, ok := h.cur[ev.ID]
	if ok {
		delete(h.cur, ev.ID)
	} else if e, ok = h.old[ev.ID]; ok {
		delete(h.old, ev.ID)
	}
	if ok {
		h.n.Add(-1)
	}
	if h.folded++; h.folded >= handoverGen {
		h.rotate()
	}
	h.mu.Unlock()
	if !ok || ev.Schema != fsm.SchemaVersion || ev.Type != string(e.body.EventType()) ||
		!bytes.Equal(e.data, ev.Body) {
		return nil
	}
	if handoverCheck != nil {
		handoverCheck(*ev, e.body)
	}
	return e.body
}

// decodedForm reports whether body is of a type the fold takes when handed
// over, and as fsm.Decode gives it back from its encoding: decoding an
// empty list or map gives nil, so a body holding an empty one that is not
// nil (a model's answer with "tool_calls": []) would make the View's task
// differ from a fold of the log, if only as a value. Other types are
// decoded. TestDecodedFormCoversEveryList fails when one of these types
// gains a field this does not check.
func decodedForm(body fsm.Body) bool {
	switch b := body.(type) {
	case *fsm.ModelCalledBody:
		return some(b.ToolCalls)
	case *fsm.ReasonDoneBody:
		if !some(b.Reasoning.ToolCalls) || !messages(b.NewMessages) || !some(b.Plan.Steps) {
			return false
		}
		for i := range b.Plan.Steps {
			if p := b.Plan.Steps[i].ActionParams; p != nil && len(p) == 0 {
				return false
			}
		}
		return true
	case *fsm.StepCompletedBody:
		return messages(b.NewMessages)
	case *fsm.ToolCallResultBody:
		return messages(b.NewMessages) && some(b.Parts)
	case *fsm.TaskCompletedBody:
		return true
	}
	return false
}

// some reports whether s is nil or not empty.
func some[T any](s []T) bool { return s == nil || len(s) > 0 }

func messages(ms []fsm.Message) bool {
	if !some(ms) {
		return false
	}
	for i := range ms {
		if !some(ms[i].ToolCalls) {
			return false
		}
	}
	return true
}

// handoverCheck, if set (tests), is called with every event the fold
// takes a handed-over body for, and that body.
var handoverCheck func(ev eventlog.Event, body fsm.Body)
