package projection

import (
	"encoding/binary"
	"fmt"

	"github.com/pegasus-engine/pegasus/fsm"
)

// A stored task (a task record or a per-task snapshot the replay layer
// persists) refers to its input text instead of copying it when the text
// is large and an event of the log holds it: the event that created the
// task, whose body the log keeps as long as the task. A checkpoint then
// writes a large input once, in that event, instead of in the task's
// record every time the task changes.
//
// The encoding (EncodeStoredTask) is one marker byte, then:
//
//	'c'                       fsm.EncodeTask of the task, input included
//	'r' <seq (8)> <len (8)>   fsm.EncodeTask of the task without its input text,
//	                          which is the len bytes of input text in the body of
//	                          the event at global sequence seq
//
// Integers are big-endian. Decoding a reference gives the task without its
// input and the InputRef; the replay layer reads that event from the log
// and puts the text back (InputRef.Resolve), so a task read back is the
// task that was stored, byte for byte.
const (
	storedTaskCopy byte = 'c'
	storedTaskRef  byte = 'r'
)

// InputRefMin is the input text size, in bytes, from which a stored task
// refers to the event holding its input instead of copying it. Below it a
// copy costs less than the log read that resolving a reference takes.
const InputRefMin = 1 << 10

// InputRef is where a stored task's input text is: the body of the event
// at global sequence Seq, Len bytes. The zero InputRef means the input is
// in the record.
type InputRef struct {
	Seq uint64
	Len uint64
}

// IsZero reports whether r refers to nothing (the record holds the input).
func (r InputRef) IsZero() bool { return r.Seq == 0 }

// EncodeStoredTask returns the encoding of t as persisted in its record or
// a snapshot. inputSeq is the global sequence of an event whose body holds
// t's input text (Set.InputSeq, TaskRecord.InputSeq), 0 for none: a large
// input is then referred to rather than copied. DecodeStoredTask reverses
// it.
func EncodeStoredTask(t *fsm.Task, inputSeq uint64) ([]byte, error) {
	return AppendStoredTask(nil, t, inputSeq), nil
}

// AppendStoredTask appends EncodeStoredTask's encoding of t to dst: a
// reader that only compares or hashes it reuses one buffer.
func AppendStoredTask(dst []byte, t *fsm.Task, inputSeq uint64) []byte {
	if inputSeq == 0 || len(t.Context.InputText) < InputRefMin {
		return fsm.AppendTask(append(dst, storedTaskCopy), t)
	}
	dst = append(dst, storedTaskRef)
	dst = binary.BigEndian.AppendUint64(dst, inputSeq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(t.Context.InputText)))
	q := *t // Context is inline: the copy's input can be cleared
	q.Context.InputText = ""
	return fsm.AppendTask(dst, &q)
}

// DecodeStoredTask decodes an encoding written by EncodeStoredTask. When
// the record refers to its input (ref not zero), the task is returned
// without its input text: InputRef.Resolve puts it back.
func DecodeStoredTask(data []byte) (fsm.Task, InputRef, error) {
	if len(data) == 0 {
		return fsm.Task{}, InputRef{}, fmt.Errorf("%w: empty stored task", ErrMalformed)
	}
	var ref InputRef
	switch data[0] {
	case storedTaskCopy:
		data = data[1:]
	case storedTaskRef:
		if len(data) < 17 {
			return fsm.Task{}, InputRef{}, fmt.Errorf("%w: stored task with a truncated input reference", ErrMalformed)
		}
		ref = InputRef{Seq: binary.BigEndian.Uint64(data[1:]), Len: binary.BigEndian.Uint64(data[9:])}
		if ref.Seq == 0 {
			return fsm.Task{}, InputRef{}, fmt.Errorf("%w: stored task refers to %d bytes of input at seq %d", ErrMalformed, ref.Len, ref.Seq)
		}
		data = data[17:]
	default:
		return fsm.Task{}, InputRef{}, fmt.Errorf("%w: stored task without its marker (0x%02x)", ErrMalformed, data[0])
	}
	t, err := fsm.DecodeTask(data)
	if err != nil {
		return fsm.Task{}, InputRef{}, err
	}
	if !ref.IsZero() && t.Context.InputText != "" {
		return fsm.Task{}, InputRef{}, fmt.Errorf("%w: stored task has an input text and refers to one", ErrMalformed)
	}
	return t, ref, nil
}

// Resolve puts into t, decoded by DecodeStoredTask with the reference r,
// its input text from ev, the event at r.Seq read from the log. It fails,
// leaving t unchanged, when ev is not an event of t that holds r.Len bytes
// of input text.
func (r InputRef) Resolve(t *fsm.Task, ev fsm.Event) error {
	text, ok := inputOf(ev)
	switch {
	case ev.Seq != r.Seq || ev.Stream != t.ID:
		return fmt.Errorf("%w: the input of task %s is at seq %d, not in event %d of %q", ErrMalformed, t.ID, r.Seq, ev.Seq, ev.Stream)
	case !ok:
		return fmt.Errorf("%w: the input of task %s is at seq %d, a %s, which holds no input", ErrMalformed, t.ID, r.Seq, ev.Type)
	case uint64(len(text)) != r.Len:
		return fmt.Errorf("%w: the input of task %s at seq %d is %d bytes, its record says %d", ErrMalformed, t.ID, r.Seq, len(text), r.Len)
	}
	t.Context.InputText = text
	return nil
}

// inputOf returns the input text an event's body gives the task it
// creates: the events that set fsm.Context.InputText.
func inputOf(ev fsm.Event) (string, bool) {
	switch b := ev.Body.(type) {
	case *fsm.Input:
		return b.Text, true
	case *fsm.TaskCreatedBody:
		return b.InputText, true
	case *fsm.DispatchCreatedBody:
		return b.Title, true
	}
	return "", false
}

// nextInputSeq is the InputSeq of a task after ev moved it from before to
// after, cur before it: the sequence of an event whose body holds the
// task's input text, or 0. The input is set by the events that create a
// task; an event that changes it otherwise drops the reference. Strings
// compare in O(1) when they share their bytes, as a task's input does from
// one event to the next.
func nextInputSeq(cur uint64, ev *fsm.Event, before, after *fsm.Task) uint64 {
	same := after.Context.InputText == before.Context.InputText
	if same && cur != 0 {
		return cur
	}
	if text, ok := inputOf(*ev); ok && text == after.Context.InputText {
		return ev.Seq
	}
	if same {
		return cur
	}
	return 0
}
