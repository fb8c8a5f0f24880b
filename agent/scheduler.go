package agent

import (
	"context"
	"sync"
	"time"
)

// scheduler decides when a task's stages run, with its own lock: at most
// max tasks hold an admission slot, the others wait by priority then age;
// one stage goroutine per task; a timer for a task that waits until a
// time. It holds no task state: the agent tells it, from fsm.Next, which
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
	queue  admissionQueue         // tasks waiting for a slot
	timers map[string]*time.Timer // tasks waiting until a time the machine named
}

// taskRun is the scheduling record of one task: never task state (that is
// the fold's), only whether a stage goroutine runs and whether the task
// holds an admission slot.
type taskRun struct {
	holding bool
	running bool
	rerun   bool
	wait    *waiting
	cancel  context.CancelFunc
	ended   chan struct{} // closed when the running stage goroutine returns
}

func newScheduler(max int, base context.Context, now func() time.Time, stages *sync.WaitGroup, run func(context.Context, string)) *scheduler {
	return &scheduler{max: max, base: base, now: now, stages: stages, run: run,
		runs: map[string]*taskRun{}, timers: map[string]*time.Timer{}}
}

// schedule makes sure a stage runs for task id, which has work due: at
// once if it holds a slot or one is free, else it waits in the admission
// queue.
func (s *scheduler) schedule(id string, priority int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	r := s.runs[id]
	if r == nil {
		r = &taskRun{}
		s.runs[id] = r
	}
	switch {
	case r.holding:
		s.startLocked(id, r)
	case r.wait != nil:
		// Already waiting its turn.
	case s.active < s.max:
		r.holding = true
		s.active++
		s.startLocked(id, r)
	default:
		r.wait = &waiting{id: id, priority: priority}
		s.queue.push(r.wait)
	}
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
		r.holding = false
		s.active--
		freed = true
	}
	if !r.running {
		delete(s.runs, id)
	}
	return freed
}

func (s *scheduler) admitLocked() {
	for !s.closed && s.active < s.max && s.queue.Len() > 0 {
		w := s.queue.pop()
		r := s.runs[w.id]
		if r == nil || r.wait != w {
			continue
		}
		r.wait = nil
		r.holding = true
		s.active++
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
	r.running, r.ended = true, make(chan struct{})
	s.stages.Add(1)
	go s.loop(id)
}

// loop runs the stages of one task, one at a time, for as long as new
// work keeps arriving while it works.
func (s *scheduler) loop(id string) {
	defer s.stages.Done()
	for {
		s.mu.Lock()
		r := s.runs[id]
		ctx, cancel := context.WithCancel(s.base)
		r.cancel = cancel
		holding := r.holding && !s.closed
		s.mu.Unlock()

		if holding {
			s.run(ctx, id)
		}
		cancel()

		s.mu.Lock()
		r.cancel = nil
		if r.rerun && !s.closed {
			r.rerun = false
			s.mu.Unlock()
			continue
		}
		r.running, r.rerun = false, false
		close(r.ended)
		if !r.holding && r.wait == nil {
			delete(s.runs, id)
		}
		s.mu.Unlock()
		return
	}
}

// wakeAt schedules task id at time at (by the agent's clock): the machine
// said nothing is due before. A later wake for the same task replaces it.
func (s *scheduler) wakeAt(id string, priority int, at time.Time) {
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
		s.schedule(id, priority)
	})
}

// close stops everything new: no stage starts, no task is admitted, no
// timer fires. Running stages finish (or are cancelled through base).
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
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
			running = append(running, r.ended)
		}
		s.releaseLocked(id, r, cancel)
	}
	s.admitLocked()
	return running
}
