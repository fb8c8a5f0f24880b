package agent

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// scheduler decides when a task's stages run, with its own lock: at most
// max tasks hold an admission slot, and at most the limit of its
// concurrency key of one key's tasks; the others wait, admitted one key
// at a time in turn, then by priority and age within a key;
// one stage goroutine per task at a time (reused: see idle); a timer for
// a task that waits until a time. It holds no task state: the agent tells it, from fsm.Next, which
// tasks have work due (schedule) and which have none (release).
type scheduler struct {
	max    int
	run    func(ctx context.Context, id string) // one stage of task id: the agent's
	base   context.Context                      // stages run under it; cancelled when the agent stops them
	now    func() time.Time
	stages *sync.WaitGroup // the agent's: Stop waits for every stage

	mu     sync.Mutex
	closed bool                   // the agent is stopping: nothing new starts
	runs   map[string]*taskRun    // tasks holding a slot, queued, or with a running stage
	active int                    // admission slots held
	queue  fairQueue              // tasks waiting for a slot
	limits ConcurrencyLimits      // per concurrency key
	byKey  map[string]int         // admission slots held, per concurrency key
	timers map[string]*time.Timer // tasks waiting until a time the machine named

	// Stage goroutines are reused: one whose task has no more work waits
	// on idle for another task's (until done closes, when the agent
	// stops), so that the stack its stages grew (the fold's copy of the
	// task, the model and tool calls, chained stages) serves the next
	// stages instead of being grown again by a new goroutine.
	idle chan string
	done chan struct{}
}

// taskRun is the scheduling record of one task: never task state (that is
// the fold's), only whether a stage goroutine runs and whether the task
// holds an admission slot.
type taskRun struct {
	holding bool
	key     string // the task's concurrency key
	running bool
	rerun   bool
	wait    *waiting
	cancel  context.CancelFunc
	ended   chan struct{} // closed when the running stage goroutine returns; made by drop, the one that waits
	seq     uint64        // the log sequence of the last event its stages appended
}

func newScheduler(max int, base context.Context, now func() time.Time, stages *sync.WaitGroup, run func(context.Context, string)) *scheduler {
	return &scheduler{max: max, base: base, now: now, stages: stages, run: run,
		runs: map[string]*taskRun{}, timers: map[string]*time.Timer{}, byKey: map[string]int{},
		idle: make(chan string), done: make(chan struct{})}
}

// setLimits replaces the limits of the concurrency keys; tasks a raised
// limit lets in are admitted at once.
func (s *scheduler) setLimits(l ConcurrencyLimits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = l
	s.admitLocked()
}

// keyFree reports whether a task of key may take a slot, as far as its
// key's limit goes.
func (s *scheduler) keyFree(key string) bool {
	n := s.limits.For(key)
	return n <= 0 || s.byKey[key] < n
}

// holdLocked gives r a slot; unholdLocked takes it back.
func (s *scheduler) holdLocked(r *taskRun) {
	r.holding = true
	s.active++
	s.byKey[r.key]++
}

func (s *scheduler) unholdLocked(r *taskRun) {
	r.holding = false
	s.active--
	if s.byKey[r.key]--; s.byKey[r.key] <= 0 {
		delete(s.byKey, r.key)
	}
}

// schedule makes sure a stage runs for task id, which has work due: at
// once if it holds a slot or one is free (for its concurrency key too),
// else it waits in the admission queue.
func (s *scheduler) schedule(id string, priority int, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	r := s.runs[id]
	if r == nil {
		r = &taskRun{key: key}
		s.runs[id] = r
	}
	switch {
	case r.holding:
		s.startLocked(id, r)
	case r.wait != nil:
		// Already waiting its turn.
	case s.active < s.max && s.keyFree(r.key):
		s.holdLocked(r)
		s.startLocked(id, r)
	default:
		r.wait = &waiting{id: id, priority: priority, key: r.key}
		s.queue.push(r.wait)
	}
}

// reserve gives task id, which the scheduler does not know yet, a free
// admission slot before its TASK_CREATED is appended with its input
// (admitWithInput): only when no task waits for a slot (those come first)
// and its key is under its limit. The hook's schedule of its TASK_CREATED
// starts its stage; release gives the slot back if the append fails.
func (s *scheduler) reserve(id, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.runs[id] != nil || s.queue.Len() > 0 || s.active >= s.max || !s.keyFree(key) {
		return false
	}
	r := &taskRun{key: key}
	s.runs[id] = r
	s.holdLocked(r)
	return true
}

// slotFree reports whether reserve could give a slot now, its key
// aside: a cheap look before building what reserve's caller appends.
func (s *scheduler) slotFree() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && s.queue.Len() == 0 && s.active < s.max
}

// release gives up task id's slot (it has no work due) and admits the
// next waiting task. cancel also stops a stage still running for it: its
// outcome would be refused as a conflict anyway.
func (s *scheduler) release(id string, cancel bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[id]; r != nil && s.releaseLocked(id, r, cancel) {
		s.admitLocked()
	}
}

// releaseLocked gives up r's wait and slot (cancel: and its running
// stage), forgets r unless its stage runs, and reports whether a slot
// was freed. The caller admits.
func (s *scheduler) releaseLocked(id string, r *taskRun, cancel bool) (freed bool) {
	if r.wait != nil {
		s.queue.remove(r.wait)
		r.wait = nil
	}
	if cancel && r.cancel != nil {
		r.cancel()
	}
	if r.holding {
		s.unholdLocked(r)
		freed = true
	}
	if !r.running {
		delete(s.runs, id)
	}
	return freed
}

func (s *scheduler) admitLocked() {
	for !s.closed && s.active < s.max && s.queue.Len() > 0 {
		w := s.queue.pop(s.keyFree)
		if w == nil {
			return // every key waiting is at its limit
		}
		r := s.runs[w.id]
		if r == nil || r.wait != w {
			continue
		}
		r.wait = nil
		s.holdLocked(r)
		s.startLocked(w.id, r)
	}
}

// startLocked starts the task's stage goroutine, or asks the running one to
// look at the task again once its current stage is done.
func (s *scheduler) startLocked(id string, r *taskRun) {
	if r.running {
		r.rerun = true
		return
	}
	r.running = true
	s.stages.Add(1)
	select {
	case s.idle <- id: // a stage goroutine waited for work
	default:
		go s.worker(id)
	}
}

// worker is a stage goroutine: it runs the stages of task id (loop), then
// of the tasks handed to it on idle, until the agent stops.
func (s *scheduler) worker(id string) {
	var sc stageContext
	defer sc.end()
	for {
		s.loop(id, &sc)
		select {
		case id = <-s.idle:
		case <-s.done:
			return
		}
	}
}

// stageContext is the context a stage goroutine's stages run under: one
// for as long as no stage of it was cancelled, a new one after. A stage
// leaves nothing behind that waits on its context (the calls it makes run
// under contexts of their own, ended when they return), so the next stage
// may reuse it: a context per stage costs its allocations and two turns of
// the base context's lock, which every stage goroutine shares.
type stageContext struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// take returns the context for the next stage under base (under s.mu,
// which every cancel of a stage holds).
func (sc *stageContext) take(base context.Context) (context.Context, context.CancelFunc) {
	if sc.ctx == nil || sc.ctx.Err() != nil {
		sc.end()
		sc.ctx, sc.cancel = context.WithCancel(base)
	}
	return sc.ctx, sc.cancel
}

// end releases the context (the stage goroutine ends).
func (sc *stageContext) end() {
	if sc.cancel != nil {
		sc.cancel()
	}
}

// loop runs the stages of one task, one at a time, for as long as new
// work keeps arriving while it works.
func (s *scheduler) loop(id string, sc *stageContext) {
	defer s.stages.Done()
	for {
		s.mu.Lock()
		r := s.runs[id]
		ctx, cancel := sc.take(s.base)
		r.cancel = cancel
		holding := r.holding && !s.closed
		s.mu.Unlock()

		if holding {
			s.run(ctx, id)
		}

		s.mu.Lock()
		r.cancel = nil
		if r.rerun && !s.closed {
			r.rerun = false
			s.mu.Unlock()
			continue
		}
		r.running, r.rerun = false, false
		if r.ended != nil {
			close(r.ended)
			r.ended = nil
		}
		if !r.holding && r.wait == nil {
			delete(s.runs, id)
		}
		s.mu.Unlock()
		return
	}
}

// wakeAt schedules task id at time at (by the agent's clock): the machine
// said nothing is due before. A later wake for the same task replaces it.
func (s *scheduler) wakeAt(id string, priority int, key string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if old := s.timers[id]; old != nil {
		old.Stop()
	}
	s.timers[id] = time.AfterFunc(max(at.Sub(s.now()), 0), func() {
		s.mu.Lock()
		delete(s.timers, id)
		s.mu.Unlock()
		s.schedule(id, priority, key)
	})
}

// close stops everything new: no stage starts, no task is admitted, no
// timer fires. Running stages finish (or are cancelled through base).
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		close(s.done) // idle stage goroutines end
	}
	s.closed = true
	for id, tm := range s.timers {
		tm.Stop()
		delete(s.timers, id)
	}
}

// queued reports whether task id waits for an admission slot.
func (s *scheduler) queued(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[id]
	return r != nil && r.wait != nil
}

// queuedIDs returns the ids of the tasks waiting for a slot.
func (s *scheduler) queuedIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue.ids()
}

// counts returns the slots held and the tasks waiting for one.
func (s *scheduler) counts() (active, queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active, s.queue.Len()
}

// drop forgets the tasks match selects (the agent no longer owns them):
// their slots are given up, their waits and timers removed, and no stage
// of theirs starts again. It returns a channel per stage still running,
// closed when it returns; cancel also cancels those stages.
func (s *scheduler) drop(match func(id string) bool, cancel bool) []<-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, tm := range s.timers {
		if match(id) {
			tm.Stop()
			delete(s.timers, id)
		}
	}
	var running []<-chan struct{}
	for id, r := range s.runs {
		if !match(id) {
			continue
		}
		r.rerun = false
		if r.running {
			if r.ended == nil {
				r.ended = make(chan struct{})
			}
			running = append(running, r.ended)
		}
		s.releaseLocked(id, r, cancel)
	}
	s.admitLocked()
	return running
}

// waitReason says why task id waits for an admission slot, and false
// when it does not wait: its key at its limit, or every slot taken.
func (s *scheduler) waitReason(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[id]
	if r == nil || r.wait == nil {
		return "", false
	}
	if n := s.limits.For(r.key); n > 0 && s.byKey[r.key] >= n {
		return fmt.Sprintf("waiting: key %s has %d of %d running", keyName(r.key), s.byKey[r.key], n), true
	}
	return fmt.Sprintf("waiting: %d of %d admission slots are taken", s.active, s.max), true
}

// holds reports whether task id holds an admission slot and the scheduler
// still starts stages: a stage may go on to the task's next one.
func (s *scheduler) holds(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.runs[id]
	return r != nil && r.holding && !s.closed
}

// appended notes that a stage of task id appended up to log sequence seq.
func (s *scheduler) appended(id string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[id]; r != nil && seq > r.seq {
		r.seq = seq
	}
}

// appendedSeq is the log sequence of the last event task id's stages
// appended while it was scheduled (0: none).
func (s *scheduler) appendedSeq(id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[id]; r != nil {
		return r.seq
	}
	return 0
}
