package eventlog

import (
	"context"
	"sync"
	"sync/atomic"
)

// Subscription delivers the log's events in seq order from a starting
// sequence: first from the log (catch-up), then live as groups commit. It
// never skips or repeats an event the log holds; it passes over the
// sequences that retention archived (Retire's holes), as Scan does.
//
// Memory is bounded: a live subscription buffers at most
// Options.SubscriberBuffer events (SubscribeBuffered: its own bound). The committer never waits for a
// subscriber; if the buffer is full it drops the subscription back to
// catch-up mode, where it reads from the log until it is current again.
//
// A Subscription is used by one goroutine calling Next. Delivered events are
// shared between subscriptions: treat their Body and Metadata as read-only.
type Subscription struct {
	l    *Log
	ctx  context.Context
	next uint64 // next seq to deliver

	it *Iterator // catch-up iterator, if catching up

	// live is non-nil while registered with the committer, which sends
	// each commit's events in one slice (shared with the other
	// subscriptions, never written after it is sent). The committer
	// closes it (under l.subMu) when it drops the subscription for falling
	// behind.
	live chan []Event
	// batch is what Next has yet to return of the last slice received.
	batch []Event
	// queued counts the events sent on live and not yet returned from
	// batch (the committer adds, Next subtracts); buffer bounds it.
	queued atomic.Int64
	buffer int

	closeOnce sync.Once
	closeCh   chan struct{}
	err       error
}

// Subscribe starts a subscription whose first event is fromSeq (0 means 1).
// The subscription ends when ctx is cancelled, Close is called, or the Log is
// closed. If fromSeq is beyond the head plus one, the first Next returns
// ErrBeyondHead: the caller saw a sequence this log does not hold, and
// waiting for it would silently skip the events before it.
func (l *Log) Subscribe(ctx context.Context, fromSeq uint64) *Subscription {
	return l.SubscribeBuffered(ctx, fromSeq, l.opts.SubscriberBuffer)
}

// SubscribeBuffered is Subscribe with room for buffer live events (at
// least 1) instead of Options.SubscriberBuffer: a subscriber that reads
// in bursts (waking now and then rather than at every commit) needs room
// for what commits meanwhile, or it reads that from the log.
func (l *Log) SubscribeBuffered(ctx context.Context, fromSeq uint64, buffer int) *Subscription {
	s := &Subscription{l: l, ctx: ctx, next: max(fromSeq, 1), buffer: max(buffer, 1), closeCh: make(chan struct{})}
	if head := l.Head(); s.next-1 > head {
		s.err = beyondHead(s.next, head)
	}
	return s
}

// Next blocks until the next event is available and returns it. It returns
// ctx.Err() (of its argument or of the Subscribe context) when cancelled,
// ErrClosed after Close or Log.Close, or an error from reading the log.
// After an error, the subscription is finished.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	if s.err != nil {
		return Event{}, s.err
	}
	ev, err := s.next1(ctx)
	if err != nil {
		if ctx.Err() == nil || err != ctx.Err() {
			s.fail(err)
		}
		return Event{}, err
	}
	s.next++
	return ev, nil
}

// Seq returns the sequence of the next event Next will return.
func (s *Subscription) Seq() uint64 { return s.next }

func (s *Subscription) next1(ctx context.Context) (Event, error) {
	for {
		if err := s.ctx.Err(); err != nil {
			return Event{}, err
		}
		if err := ctx.Err(); err != nil {
			return Event{}, err
		}
		select {
		case <-s.closeCh:
			return Event{}, ErrClosed
		default:
		}
		if len(s.batch) > 0 {
			ev := s.batch[0]
			s.batch = s.batch[1:]
			s.queued.Add(-1)
			if ev.Seq < s.next {
				continue // delivered already from the log
			}
			if ev.Seq > s.next {
				// Cannot happen: registration and publication are
				// ordered by subMu. Recover by reading the log.
				s.unregister()
				continue
			}
			return ev, nil
		}
		if s.live != nil {
			select {
			case evs, ok := <-s.live:
				if !ok {
					// Dropped for falling behind: catch up from the log.
					s.live = nil
					continue
				}
				s.batch = evs
				continue
			case <-ctx.Done():
				return Event{}, ctx.Err()
			case <-s.ctx.Done():
				return Event{}, s.ctx.Err()
			case <-s.l.done:
				return Event{}, ErrClosed
			case <-s.closeCh:
				return Event{}, ErrClosed
			}
		}
		// Catching up.
		if s.it != nil {
			if s.it.Next() {
				ev := s.it.Event()
				if ev.Seq < s.next {
					s.it.Close()
					s.it = nil
					return Event{}, corruptSeq(s.next, "subscription expected seq %d, log returned %d", s.next, ev.Seq)
				}
				// A scan passes over a gap only where hole keys cover it
				// (retention archived those events), or fails.
				s.next = ev.Seq
				return ev, nil
			}
			err := s.it.Close()
			s.it = nil
			if err != nil {
				return Event{}, err
			}
		}
		select {
		case <-s.l.done:
			return Event{}, ErrClosed
		default:
		}
		if s.next <= s.l.Head() {
			s.it = s.l.Scan(s.next, Forward)
			continue
		}
		// Caught up: switch to live under subMu, re-checking the head,
		// so that no group is published between the check and the
		// registration.
		s.l.subMu.Lock()
		if s.next <= s.l.head.Load() {
			s.l.subMu.Unlock()
			continue
		}
		s.live = make(chan []Event, s.buffer)
		s.queued.Store(0)
		s.l.subs[s] = struct{}{}
		s.l.subMu.Unlock()
		if h := s.l.testHookLive; h != nil {
			h(s)
		}
	}
}

// deliver is called by the committer with subMu held. It never blocks:
// a commit's events go in one send, and live has room for as many sends
// as the buffer has for events (every commit carries one at least).
func (s *Subscription) deliver(evs []Event) {
	// Only Next lowers queued meanwhile: the check stays true.
	if n := int64(len(evs)); s.queued.Load()+n <= int64(s.buffer) {
		s.queued.Add(n)
		select {
		case s.live <- evs:
			return
		default:
			s.queued.Add(-n)
		}
	}
	// Full: drop to catch-up. The subscriber drains what is buffered,
	// sees the channel closed, and reads the rest from the log.
	delete(s.l.subs, s)
	close(s.live)
}

// buffered returns how many delivered events Next has yet to return.
func (s *Subscription) buffered() int { return int(s.queued.Load()) }

func (s *Subscription) unregister() {
	if s.live == nil {
		return
	}
	s.l.subMu.Lock()
	delete(s.l.subs, s)
	s.l.subMu.Unlock()
	s.live = nil
	s.batch = nil
}

func (s *Subscription) fail(err error) {
	s.err = err
	s.unregister()
	if s.it != nil {
		s.it.Close()
		s.it = nil
	}
}

// Close ends the subscription: a blocked or later Next returns ErrClosed and
// releases what the subscription holds. It may be called from any goroutine.
func (s *Subscription) Close() error {
	s.closeOnce.Do(func() { close(s.closeCh) })
	return nil
}
