package projection

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/fsm"
)

// taskEvent is event seq, version ver of the task stream id.
func taskEvent(id string, seq, ver uint64, body fsm.Body) fsm.Event {
	at := t0.Add(time.Duration(seq) * time.Second)
	eid := ulid.MustNew(ulid.Timestamp(at), strings.NewReader(strings.Repeat("y", 16)))
	eid[15] = byte(seq)
	return fsm.Event{ID: eid, Type: body.EventType(), Time: at, Stream: id, Version: ver, Seq: seq, Body: body}
}

// TestStoredTaskRefersToItsInput: the Set knows which event holds a task's
// input (InputSeq), through the daemon's flow (MESSAGE_RECEIVED, then
// TASK_CREATED with the same input) and a TASK_CREATED that changes it;
// a large input is then left out of the stored task, and the event puts
// it back byte for byte. A small input, or one whose event is unknown, is
// copied.
func TestStoredTaskRefersToItsInput(t *testing.T) {
	const id = "01JD0000000000000000000000"
	large := strings.Repeat("a large input ", 1000)
	msg := taskEvent(id, 3, 1, &fsm.Input{Kind: fsm.MessageReceived, Text: large, Source: "cli", TaskType: "general"})
	cases := []struct {
		name    string
		created string // TASK_CREATED's input
		want    uint64 // the InputSeq after it
	}{
		{"the same input", strings.Clone(large), 3},
		{"another input", "changed: " + large, 7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewSet(Options{})
			mustApply(t, s, msg)
			if got := s.InputSeq(id); got != 3 {
				t.Fatalf("InputSeq after the message: %d, want 3", got)
			}
			mustApply(t, s, taskEvent(id, 7, 2, &fsm.TaskCreatedBody{Machine: fsm.CurrentMachine, TaskType: "general",
				InputText: c.created, Source: "cli"}))
			mustApply(t, s, taskEvent(id, 9, 3, &fsm.NeedMoreInfoBody{Reasoning: fsm.Reasoning{Text: "hmm", NeedsClarification: true, Question: "which?"}}))
			mustApply(t, s, taskEvent(id, 11, 4, &fsm.Input{Kind: fsm.MessageReceived, Text: "the first one", Source: "cli"}))
			if got := s.InputSeq(id); got != c.want {
				t.Fatalf("InputSeq: %d, want %d", got, c.want)
			}
			p, err := s.Pending()
			if err != nil || len(p.Tasks) != 1 || p.Tasks[0].InputSeq != c.want {
				t.Fatalf("pending: %+v, %v", p.Tasks, err)
			}
			task := p.Tasks[0].Task
			stored, err := EncodeStoredTask(&task, c.want)
			if err != nil {
				t.Fatal(err)
			}
			if stored[0] != storedTaskRef || len(stored) > 1000 {
				t.Fatalf("stored task of %d bytes, marker %q: it copies the input", len(stored), stored[0])
			}
			got, ref, err := DecodeStoredTask(stored)
			if err != nil {
				t.Fatal(err)
			}
			if ref.Seq != c.want || ref.Len != uint64(len(task.Context.InputText)) || got.Context.InputText != "" {
				t.Fatalf("decoded ref %+v, input %d bytes", ref, len(got.Context.InputText))
			}
			holder := msg
			if c.want == 7 {
				holder = taskEvent(id, 7, 2, &fsm.TaskCreatedBody{InputText: c.created})
			}
			if err := ref.Resolve(&got, holder); err != nil {
				t.Fatal(err)
			}
			want, _ := fsm.EncodeTask(task)
			again, _ := fsm.EncodeTask(got)
			if !bytes.Equal(want, again) {
				t.Fatal("the task read back does not encode as the stored one")
			}
		})
	}

	small := fsm.Task{ID: id}
	small.Context.InputText = "short"
	withLarge := small
	withLarge.Context.InputText = large
	for _, c := range []struct {
		name string
		t    *fsm.Task
		seq  uint64
	}{{"small input", &small, 3}, {"no known event", &withLarge, 0}} {
		stored, err := EncodeStoredTask(c.t, c.seq)
		if err != nil {
			t.Fatal(err)
		}
		got, ref, err := DecodeStoredTask(stored)
		want, _ := fsm.EncodeTask(*c.t)
		again, _ := fsm.EncodeTask(got)
		if stored[0] != storedTaskCopy || !ref.IsZero() || err != nil || !bytes.Equal(want, again) {
			t.Fatalf("%s: marker %q, ref %+v, %v", c.name, stored[0], ref, err)
		}
	}
}

// TestResolveRefusesAnotherEvent: an event that is not the one the record
// names, or does not hold an input of the recorded length, is an error and
// leaves the task as it was.
func TestResolveRefusesAnotherEvent(t *testing.T) {
	const id = "01JD0000000000000000000000"
	text := strings.Repeat("x", InputRefMin)
	ref := InputRef{Seq: 5, Len: uint64(len(text))}
	for _, ev := range []fsm.Event{
		taskEvent(id, 6, 1, &fsm.Input{Text: text}),                           // another seq
		taskEvent("01JD0000000000000000000001", 5, 1, &fsm.Input{Text: text}), // another task
		taskEvent(id, 5, 1, &fsm.TaskCompletedBody{Result: text}),             // no input
		taskEvent(id, 5, 1, &fsm.Input{Text: text + "!"}),                     // another length
	} {
		task := fsm.Task{ID: id}
		if err := ref.Resolve(&task, ev); !errors.Is(err, ErrMalformed) || task.Context.InputText != "" {
			t.Fatalf("%s at %d on %s: %v, input %q", ev.Type, ev.Seq, ev.Stream, err, task.Context.InputText)
		}
	}
}

// TestDecodeStoredTaskRefusesMalformed: no marker, an unknown one, a cut
// reference, a reference to seq 0, or a record with both an input and a
// reference are ErrMalformed.
func TestDecodeStoredTaskRefusesMalformed(t *testing.T) {
	withInput := fsm.Task{ID: "01JD0000000000000000000000"}
	withInput.Context.InputText = "an input"
	enc, _ := fsm.EncodeTask(withInput)
	ref := func(seq byte, body []byte) []byte {
		return append([]byte{storedTaskRef, 0, 0, 0, 0, 0, 0, 0, seq, 0, 0, 0, 0, 0, 0, 4, 0}, body...)
	}
	for _, bad := range [][]byte{nil, {'x', 0x80}, {storedTaskRef, 0, 1}, ref(0, []byte{0x80}), ref(1, enc), {storedTaskCopy}} {
		if _, _, err := DecodeStoredTask(bad); !errors.Is(err, ErrMalformed) && !errors.Is(err, fsm.ErrMalformed) {
			t.Fatalf("DecodeStoredTask(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

// FuzzDecodeStoredTask: whatever the bytes, DecodeStoredTask returns an
// error or a task that encodes again, and never panics.
func FuzzDecodeStoredTask(f *testing.F) {
	task := fsm.Task{ID: "01JD0000000000000000000000", State: fsm.StateReasoning}
	task.Context.InputText = strings.Repeat("i", InputRefMin)
	for _, seq := range []uint64{0, 9} {
		b, _ := EncodeStoredTask(&task, seq)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ref, err := DecodeStoredTask(data)
		if err != nil {
			return
		}
		if !ref.IsZero() {
			if got.Context.InputText != "" {
				t.Fatal("a reference and an input")
			}
			got.Context.InputText = strings.Repeat("i", int(min(ref.Len, 1<<20)))
		}
		if _, err := EncodeStoredTask(&got, ref.Seq); err != nil {
			t.Fatal(err)
		}
	})
}
