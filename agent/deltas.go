package agent

import (
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"
)

// DeltaFrame is one frame of a task's live model text: a piece of the
// text of the model call in progress, or the news that its attempt failed
// and another starts over. Frames are not events: they are not in the log,
// and replay never sees them; the call's outcome is, in its MODEL_CALLED.
type DeltaFrame struct {
	// Restart marks an attempt_restarted frame: the text of the attempts
	// before Attempt is void, Attempt's text follows.
	Restart bool
	// Call is the id of the event the model call follows: the causation
	// id of the call's MODEL_CALLED events.
	Call string
	// Attempt is the attempt the text belongs to (1 for the first).
	Attempt int
	// Text is the piece of text (not set on a restart).
	Text string
	// Error is why the attempt before Attempt failed (on a restart).
	Error string
}

// deltaHub holds, per task, the model call in progress (its attempt and
// its text so far) and the task's subscribers. The agent writes to it as
// the reply streams in; the HTTP server's task stream reads it.
type deltaHub struct {
	mu    sync.Mutex
	tasks map[string]*liveTask
}

type liveTask struct {
	call *liveCall // nil between calls
	subs map[*DeltaSub]struct{}
}

// liveCall is one model call of a task: the hub's record of it, and the
// stage's handle on it.
type liveCall struct {
	h       *deltaHub
	task    string
	cause   ulid.ULID // the id of the event the call follows
	id      string    // cause as text, made by the first frame that names it
	attempt int
	text    strings.Builder
	// own is the task's entry when the call made it (no subscriber and
	// no call before it): one allocation for both. Subscribers that come
	// meanwhile keep it after the call.
	own liveTask
}

// callID is the call's id in frames (under h.mu).
func (c *liveCall) callID() string {
	if c.id == "" {
		c.id = c.cause.String()
	}
	return c.id
}

func newDeltaHub() *deltaHub { return &deltaHub{tasks: map[string]*liveTask{}} }

// entry returns task's entry, creating it (under h.mu).
func (h *deltaHub) entry(task string) *liveTask {
	lt := h.tasks[task]
	if lt == nil {
		lt = &liveTask{} // subs made by the first subscriber
		h.tasks[task] = lt
	}
	return lt
}

// drop forgets task's entry when nothing uses it any more (under h.mu).
func (h *deltaHub) drop(task string, lt *liveTask) {
	if lt.call == nil && len(lt.subs) == 0 {
		delete(h.tasks, task)
	}
}

// beginIn starts a model call of task at attempt 1, with the call's
// record in c (zero), which the caller allocated with what else its call
// needs; cause is the id of the event it follows.
func (h *deltaHub) beginIn(c *liveCall, task string, cause ulid.ULID) {
	c.h, c.task, c.cause, c.attempt = h, task, cause, 1
	h.mu.Lock()
	lt := h.tasks[task]
	if lt == nil {
		lt = &c.own
		h.tasks[task] = lt
	}
	lt.call = c
	h.mu.Unlock()
}

// current returns task's entry while c is its call in progress (under h.mu).
func (c *liveCall) current() *liveTask {
	if lt := c.h.tasks[c.task]; lt != nil && lt.call == c {
		return lt
	}
	return nil
}

// text adds a piece of the current attempt's text and sends it to the
// subscribers.
func (c *liveCall) write(s string) {
	if s == "" {
		return
	}
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	lt := c.current()
	if lt == nil {
		return
	}
	c.text.WriteString(s)
	f := DeltaFrame{Call: c.callID(), Attempt: c.attempt, Text: s}
	for sub := range lt.subs {
		sub.push(f)
	}
}

// restart starts attempt n over: the text so far is dropped, and the
// subscribers get an attempt_restarted frame before any of n's text.
func (c *liveCall) restart(n int, cause error) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	lt := c.current()
	if lt == nil {
		return
	}
	c.attempt = n
	c.text.Reset()
	f := DeltaFrame{Restart: true, Call: c.callID(), Attempt: n}
	if cause != nil {
		f.Error = cause.Error()
	}
	for sub := range lt.subs {
		sub.push(f)
	}
}

// end closes the call, before its outcome is appended: a subscriber that
// comes later reads its text from the log.
func (c *liveCall) end() {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	if lt := c.current(); lt != nil {
		lt.call = nil
		c.h.drop(c.task, lt)
	}
}

// subscribe returns a subscriber to task's frames. When a model call is
// in progress its first frame is the current attempt's text so far.
func (h *deltaHub) subscribe(task string) *DeltaSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &DeltaSub{h: h, task: task, ready: make(chan struct{}, 1)}
	lt := h.entry(task)
	if lt.subs == nil {
		lt.subs = map[*DeltaSub]struct{}{}
	}
	lt.subs[s] = struct{}{}
	if c := lt.call; c != nil && c.text.Len() > 0 {
		s.push(DeltaFrame{Call: c.callID(), Attempt: c.attempt, Text: c.text.String()})
	}
	return s
}

// DeltaSub receives the frames of one task's model calls, in order. It
// never blocks the agent: frames wait in the subscriber, consecutive
// pieces of one attempt joined into one frame, until Take.
type DeltaSub struct {
	h     *deltaHub
	task  string
	ready chan struct{}

	mu      sync.Mutex
	pending []DeltaFrame
	closed  bool
}

func (s *DeltaSub) push(f DeltaFrame) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if n := len(s.pending); n > 0 && !f.Restart && !s.pending[n-1].Restart &&
		s.pending[n-1].Call == f.Call && s.pending[n-1].Attempt == f.Attempt {
		s.pending[n-1].Text += f.Text
	} else {
		s.pending = append(s.pending, f)
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Ready has a value when frames may be waiting.
func (s *DeltaSub) Ready() <-chan struct{} { return s.ready }

// Take returns the frames waiting, oldest first, and forgets them.
func (s *DeltaSub) Take() []DeltaFrame {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.pending
	s.pending = nil
	return out
}

// Close ends the subscription.
func (s *DeltaSub) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.mu.Lock()
	s.closed, s.pending = true, nil
	s.mu.Unlock()
	if lt := s.h.tasks[s.task]; lt != nil {
		delete(lt.subs, s)
		s.h.drop(s.task, lt)
	}
}

// SubscribeDeltas follows the text of task id's model calls as the model
// streams it (see DeltaFrame). A subscriber that comes in the middle of a
// call first gets the current attempt's text so far. Close it when done.
func (a *Agent) SubscribeDeltas(id string) *DeltaSub { return a.deltas.subscribe(id) }
