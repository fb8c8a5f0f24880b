package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// heldView is a read model whose fold is held: WaitFor(seq) reports the
// sequence asked for and returns once the test lets it (or ctx ends).
type heldView struct {
	fakeView
	asked   chan uint64
	release chan struct{}
}

func (v *heldView) WaitFor(ctx context.Context, seq uint64) error {
	v.asked <- seq
	select {
	case <-v.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newHeldView() *heldView {
	return &heldView{asked: make(chan uint64, 16), release: make(chan struct{})}
}

// heldLog is a log with two events, the second on the stream "task-b",
// served over a held view.
func heldLog(t *testing.T) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for _, stream := range []string{"task-a", "task-b"} {
		if _, err := l.Append(context.Background(), stream, eventlog.NoStream, eventlog.Event{Type: "TASK_CREATED"}); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// TestStreamWaitsForTheFold: the event stream hands out an event only once
// the read model has folded it, so a client that saw DISPATCH_COMPLETED
// and then reads the task finds it completed, not as it was before (the
// stream follows the log, which runs ahead of the fold).
func TestStreamWaitsForTheFold(t *testing.T) {
	v := newHeldView()
	hs := fakeServer(t, &fakeEngine{accepting: true}, heldLog(t), v)
	resp, err := hs.Client().Get(hs.URL + "/v1/events/stream?after_seq=0&stream=task-b")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	frames := make(chan string, 4)
	go func() {
		defer close(frames)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "id: ") {
				frames <- line
			}
		}
	}()
	// The stream's filter skips task-a's event without waiting for it.
	select {
	case seq := <-v.asked:
		if seq != 2 {
			t.Fatalf("the stream waits for the fold of sequence %d, want 2 (the only event it serves)", seq)
		}
	case f := <-frames:
		t.Fatalf("the stream sent %q without waiting for the read model to fold it", f)
	}
	select {
	case f := <-frames:
		t.Fatalf("the stream sent %q before the read model folded it", f)
	default:
	}
	close(v.release)
	if f := <-frames; f != "id: 2" {
		t.Fatalf("after the fold the stream sent %q, want id: 2", f)
	}
}

// TestListsWaitForTheFold: GET /v1/events answers once the read model has
// folded the last event it lists.
func TestListsWaitForTheFold(t *testing.T) {
	v := newHeldView()
	hs := fakeServer(t, &fakeEngine{accepting: true}, heldLog(t), v)
	type answer struct {
		status int
		body   map[string]json.RawMessage
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := hs.Client().Get(hs.URL + "/v1/events?after_seq=0")
		if err != nil {
			done <- answer{}
			return
		}
		defer resp.Body.Close()
		var a answer
		a.status = resp.StatusCode
		_ = json.NewDecoder(resp.Body).Decode(&a.body)
		done <- a
	}()
	select {
	case seq := <-v.asked:
		if seq != 2 {
			t.Fatalf("the list waits for the fold of sequence %d, want 2 (its last event)", seq)
		}
	case a := <-done:
		t.Fatalf("the list answered %d without waiting for the read model to fold its events", a.status)
	}
	select {
	case a := <-done:
		t.Fatalf("the list answered %d before the read model folded its events", a.status)
	default:
	}
	close(v.release)
	a := <-done
	if a.status != http.StatusOK || string(a.body["next_after_seq"]) != "2" {
		t.Fatalf("the list answered %d, next_after_seq %s; want 200 and 2", a.status, a.body["next_after_seq"])
	}
}
