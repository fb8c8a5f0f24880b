package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// exampleOptions keeps the examples deterministic: an in-memory filesystem,
// a fixed clock and seeded ids. Real code passes nil (or sets only what it
// needs) to get the OS filesystem, time.Now and crypto/rand.
func exampleOptions() *eventlog.Options {
	return &eventlog.Options{
		FS:      vfs.NewMem(),
		Clock:   func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
		Entropy: rand.New(rand.NewSource(1)),
	}
}

func Example() {
	ctx := context.Background()
	l, err := eventlog.Open("data", exampleOptions())
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	// Append returns once the events are durable (a synced commit).
	res, err := l.Append(ctx, "task-1", eventlog.NoStream,
		eventlog.Event{Type: "TASK_CREATED", Body: []byte{0x80}},
		eventlog.Event{Type: "TASK_STARTED"},
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("seqs", res.FirstSeq, "to", res.LastSeq, "stream version", res.Version)

	// Read the stream back. Iterators stream from disk; always Close them.
	it := l.ReadStream("task-1", 1)
	defer it.Close()
	for it.Next() {
		e := it.Event()
		fmt.Println(e.Seq, e.Stream, e.Version, e.Type)
	}
	if err := it.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// seqs 1 to 2 stream version 2
	// 1 task-1 1 TASK_CREATED
	// 2 task-1 2 TASK_STARTED
}

func ExampleLog_Append_expectedVersion() {
	ctx := context.Background()
	l, _ := eventlog.Open("data", exampleOptions())
	defer l.Close()

	l.Append(ctx, "task-1", eventlog.NoStream, eventlog.Event{Type: "TASK_CREATED"})
	// A writer that read version 0 and tries to append loses the race.
	_, err := l.Append(ctx, "task-1", eventlog.Exactly(0), eventlog.Event{Type: "TASK_CREATED"})
	var conflict *eventlog.ConflictError
	if errors.As(err, &conflict) {
		fmt.Println(errors.Is(err, eventlog.ErrConflict), "current version:", conflict.Current)
	}
	// Output:
	// true current version: 1
}

func ExampleLog_Append_idempotent() {
	ctx := context.Background()
	l, _ := eventlog.Open("data", exampleOptions())
	defer l.Close()

	// Give the event an id before the first attempt; a retry after a
	// timeout or a crash then cannot append it twice.
	ev := eventlog.Event{ID: l.NewID(), Type: "TOOL_CALL_COMPLETED", Body: []byte{0xc0}}
	first, _ := l.Append(ctx, "task-1", eventlog.Any, ev)
	retry, err := l.Append(ctx, "task-1", eventlog.Any, ev)
	fmt.Println(first.FirstSeq, retry.FirstSeq, err, l.Head())

	ev.Body = []byte{0xc3} // same id, different content
	_, err = l.Append(ctx, "task-1", eventlog.Any, ev)
	fmt.Println(errors.Is(err, eventlog.ErrIDReused))
	// Output:
	// 1 1 <nil> 1
	// true
}

func ExampleLog_AppendMulti() {
	ctx := context.Background()
	l, _ := eventlog.Open("data", exampleOptions())
	defer l.Close()

	parent := l.NewID()
	res, err := l.AppendMulti(ctx,
		eventlog.StreamAppend{Stream: "task-1", Expected: eventlog.Any, Events: []eventlog.Event{
			{ID: parent, Type: "SUBTASK_SPAWNED"},
		}},
		eventlog.StreamAppend{Stream: "task-2", Expected: eventlog.NoStream, Events: []eventlog.Event{
			{Type: "TASK_CREATED", Causation: parent},
		}},
	)
	if err != nil {
		log.Fatal(err)
	}
	child := res[1].Events[0]
	fmt.Println(res[0].FirstSeq, res[1].FirstSeq, child.Correlation == parent)

	// The causation index lists an event's children.
	it := l.Children(parent)
	defer it.Close()
	for it.Next() {
		fmt.Println("child:", it.Event().Stream, it.Event().Type)
	}
	// Output:
	// 1 2 true
	// child: task-2 TASK_CREATED
}

func ExampleLog_Subscribe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, _ := eventlog.Open("data", exampleOptions())
	defer l.Close()
	l.Append(ctx, "task-1", eventlog.Any, eventlog.Event{Type: "A"}, eventlog.Event{Type: "B"})

	// From seq 1: catch up from the log, then follow live appends.
	sub := l.Subscribe(ctx, 1)
	defer sub.Close()
	go l.Append(ctx, "task-2", eventlog.Any, eventlog.Event{Type: "C"})
	for range 3 {
		e, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(e.Seq, e.Type)
	}
	// Output:
	// 1 A
	// 2 B
	// 3 C
}

func ExampleLog_WriteAux() {
	ctx := context.Background()
	l, _ := eventlog.Open("data", exampleOptions())
	defer l.Close()

	// A projection stores its state and its position in one synced batch.
	err := l.WriteAux(ctx, func(b *eventlog.AuxBatch) error {
		b.Set([]byte("registry/task-1"), []byte("running"))
		b.Set([]byte("registry/@applied"), []byte("42"))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	v, _ := l.GetAux([]byte("registry/task-1"))
	fmt.Println(string(v))
	it := l.ScanAux([]byte("registry/"))
	defer it.Close()
	for it.Next() {
		fmt.Printf("%s=%s\n", it.Key(), it.Value())
	}
	// Output:
	// running
	// registry/@applied=42
	// registry/task-1=running
}

func ExampleLog_Checkpoint() {
	ctx := context.Background()
	opts := exampleOptions()
	l, _ := eventlog.Open("data", opts)
	defer l.Close()
	l.Append(ctx, "task-1", eventlog.Any, eventlog.Event{Type: "A"})

	// A consistent copy while the log stays open, for a post-mortem.
	if err := l.Checkpoint("copy"); err != nil {
		log.Fatal(err)
	}
	// Offline tools open copies (or a crashed daemon's directory) read-only.
	ro, err := eventlog.Open("copy", &eventlog.Options{FS: opts.FS, ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer ro.Close()
	rep, err := ro.Verify(ctx)
	fmt.Println(rep.Events, err)
	_, err = ro.Append(ctx, "task-1", eventlog.Any, eventlog.Event{Type: "B"})
	fmt.Println(errors.Is(err, eventlog.ErrReadOnly))
	// Output:
	// 1 <nil>
	// true
}

// A consumer resumes after the last sequence it saw. If that is beyond this
// log's head (it saw events of another log, or of this one before a
// restore), the log says so instead of waiting and silently skipping the
// events in between.
func ExampleLog_Subscribe_beyondHead() {
	ctx := context.Background()
	l, err := eventlog.Open("data", exampleOptions())
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(ctx, "s", eventlog.Any, eventlog.Event{Type: "E"}); err != nil {
		log.Fatal(err)
	}
	lastSeen := uint64(7) // e.g. SSE Last-Event-ID
	_, err = l.Subscribe(ctx, lastSeen+1).Next(ctx)
	fmt.Println(errors.Is(err, eventlog.ErrBeyondHead))
	fmt.Println(err)
	// Output:
	// true
	// eventlog: position is beyond the head of the log: asked to start at seq 8, the log ends at 1
}

// Health turns non-nil as soon as the log refuses writes (a failed commit,
// a full disk) or has found corruption; a daemon's readiness probe reports
// it, and Failed lets it react at once.
func ExampleLog_Health() {
	l, err := eventlog.Open("data", exampleOptions())
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	fmt.Println(l.Health())
	select {
	case <-l.Failed():
		fmt.Println("refusing writes")
	default:
		fmt.Println("taking writes")
	}
	// Output:
	// <nil>
	// taking writes
}
