package eventlog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestAppendIDsWithinOneAppend checks, for appends of a few events and of
// many, that an id given twice in one append is refused with nothing
// written, and that an event caused by an earlier event of the same
// append inherits its correlation.
func TestAppendIDsWithinOneAppend(t *testing.T) {
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	ctx := context.Background()
	for _, n := range []int{2, idSetList, idSetList + 1, 3 * idSetList} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			evs := make([]Event, n)
			for i := range evs {
				evs[i] = Event{ID: l.NewID(), Type: "E", Body: []byte{byte(i)}}
				if i > 0 {
					evs[i].Causation = evs[i-1].ID
				}
			}
			dup := append([]Event(nil), evs...)
			dup[n-1].ID = dup[(n-1)/2].ID
			head := l.Head()
			if _, err := l.Append(ctx, "dup", Any, dup...); !errors.Is(err, ErrInvalid) {
				t.Fatalf("an id twice in one append of %d: %v, want ErrInvalid", n, err)
			}
			if l.Head() != head {
				t.Fatalf("the refused append moved the head from %d to %d", head, l.Head())
			}
			res := mustAppend(t, l, fmt.Sprint("chain", n), NoStream, evs...)
			for i, ev := range res.Events {
				if ev.Correlation != evs[0].ID {
					t.Errorf("event %d: correlation %s, want the first event's id %s", i, ev.Correlation, evs[0].ID)
				}
				if len(ev.Body) != 1 || ev.Body[0] != byte(i) || cap(ev.Body) != 1 {
					t.Errorf("event %d: body %v (cap %d), want [%d] (cap 1)", i, ev.Body, cap(ev.Body), i)
				}
			}
		})
	}
}

// TestCancelledAppendsWhileQueued: appenders whose contexts end while
// their requests are queued or being committed get either their events'
// positions (and the events are there) or the context's error (and they
// are not), never another append's outcome: a request's done channel is
// reused only after its appender received the one signal.
func TestCancelledAppendsWhileQueued(t *testing.T) {
	l := mustOpen(t, "db", testOptions(vfs.NewMem()))
	defer closeLog(t, l)
	const appenders, each = 16, 100
	var wg sync.WaitGroup
	errs := make(chan error, appenders)
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := fmt.Sprintf("s%d", a)
			for i := range each {
				ctx, cancel := context.WithCancel(context.Background())
				if i%2 == 0 {
					go cancel()
				}
				body := fmt.Sprintf("%d/%d", a, i)
				res, err := l.Append(ctx, stream, Any, ev("E", body))
				cancel()
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						errs <- err
						return
					}
					continue
				}
				got, gerr := l.GetSeq(res.LastSeq)
				if gerr != nil || string(got.Body) != body || got.Stream != stream || len(res.Events) != 1 || res.Events[0].Seq != res.LastSeq {
					errs <- fmt.Errorf("append %s: result %+v, stored %q %q (%v)", body, res, got.Stream, got.Body, gerr)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
