package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// The owner of a partition is its single writer (docs/cluster.md,
// "Appends to an owned partition"): every append of this node whose
// streams all belong to one partition it holds goes through that
// partition's committer, as the embedded log's appends go through its
// group commit. While one atomic batch is in flight, the appends that
// arrive gather; the next batch takes them all, each checked against the
// node's own view of the partition (the local copy, caught up with the
// previous batch, plus the batch's earlier appends), and carries one
// check: the partition's expected last sequence on its first message. A
// node so never refuses or sleeps on its own appends, and the fence is as
// strong as before against another node: any append to the partition by
// another node since (a submission, a message, a worker's report on
// another daemon, a new owner's PARTITION_OWNED) moves that sequence, and
// the whole batch is refused and never stored. The committer then catches
// up, answers the appends that now conflict, and sends the others again;
// a new owner's PARTITION_OWNED makes every one ErrFenced.
//
// Partitions are pipelined independently, one batch in flight each (the
// order of a partition's appends is the order of its batches).

// committer is one partition's single writer on this node.
type committer struct {
	r    *ReplicatedLog
	p    int
	reqs chan *commitReq
	// acked is the stream sequence of the last message of this
	// committer's last acknowledged batch: the next batch waits until the
	// local copy holds it, so that versions are read from the copy.
	acked uint64
	// carry is the append taken from reqs that goes first in the next
	// batch (a hold, or one its batch had no room for).
	carry *commitReq
	// waiting counts the appends handed to this committer that are in no
	// batch yet (tests).
	waiting atomic.Int32
}

// commitReq is one AppendMulti waiting for its batch, or a hold: an
// append over several partitions asks each of their committers to stop
// between two batches while it is published (holdCommitters).
type commitReq struct {
	ctx   context.Context
	parts []eventlog.StreamAppend
	wire  []wireMsg          // its messages (prepare)
	done  chan commitOutcome // buffered: the committer never blocks on it
	// release, for a hold, receives the stream sequence of the last
	// message the holder stored in the partition (0: none; unknownLast:
	// its outcome is unknown) once it is done.
	release chan uint64
}

// unknownLast releases a hold whose append's outcome is unknown: the
// committer catches up with the stream before its next batch.
const unknownLast = ^uint64(0)

// commitOutcome is a request's answer: the stream sequence of its last
// message, or why it was not stored.
type commitOutcome struct {
	last uint64
	res  []eventlog.AppendResult // set when the events were found stored (a retry)
	err  error
	// alone: not stored, to be sent by itself (the committer of streams
	// of no partition, loose.go).
	alone bool
}

// CommitStats counts what the partitions' committers did, for benchmarks
// and audits.
type CommitStats struct {
	Appends  uint64 // appends stored through a committer
	Batches  uint64 // batches published
	Refused  uint64 // batches JetStream refused (another node moved the partition, or a busy check)
	Messages uint64 // messages in the stored batches
	Combined uint64 // requests that carried the batches of several partitions (combine.go)
	Joined   uint64 // appends that joined their partition's batch while it waited for a request (combine.go)
}

type commitCounters struct{ appends, batches, refused, messages, combined, joined atomic.Uint64 }

// CommitStats returns the committers' counters since the log opened.
func (r *ReplicatedLog) CommitStats() CommitStats {
	c := &r.commits
	return CommitStats{Appends: c.appends.Load(), Batches: c.batches.Load(), Refused: c.refused.Load(), Messages: c.messages.Load(), Combined: c.combined.Load(), Joined: c.joined.Load()}
}

// ownedPartition is the partition every part of an append belongs to, if
// this node holds it (lost or not: a lost lease is answered by the
// committer with ErrFenced).
func (r *ReplicatedLog) ownedPartition(parts []eventlog.StreamAppend) (int, bool) {
	p := PartitionOf(parts[0].Stream, r.parts)
	if p < 0 {
		return -1, false
	}
	for _, sa := range parts[1:] {
		if PartitionOf(sa.Stream, r.parts) != p {
			return -1, false
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return p, r.held[p] != nil
}

// committerFor returns partition p's committer, starting it on first use.
func (r *ReplicatedLog) committerFor(p int) *committer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.committers == nil {
		r.committers = map[int]*committer{}
	}
	c := r.committers[p]
	if c == nil {
		c = &committer{r: r, p: p, reqs: make(chan *commitReq, maxBatch)}
		r.committers[p] = c
		go c.run(r.ctx)
	}
	return c
}

// commit sends an append through partition p's committer and waits for
// its outcome.
func (r *ReplicatedLog) commit(ctx context.Context, p int, parts []eventlog.StreamAppend, wire []wireMsg) commitOutcome {
	req := &commitReq{ctx: ctx, parts: parts, wire: wire, done: make(chan commitOutcome, 1)}
	c := r.committerFor(p)
	return r.enqueue(ctx, c.reqs, req, &c.waiting)
}

// enqueue queues req for a committer and waits for its outcome.
// queued, if not nil, counts it in once queued.
func (r *ReplicatedLog) enqueue(ctx context.Context, reqs chan<- *commitReq, req *commitReq, queued *atomic.Int32) commitOutcome {
	select {
	case reqs <- req:
		if queued != nil {
			queued.Add(1)
		}
	case <-ctx.Done():
		return commitOutcome{err: ctx.Err()} // not queued: nothing sent
	case <-r.ctx.Done():
		return commitOutcome{err: fmt.Errorf("%w: closed", eventlog.ErrClosed)}
	}
	select {
	case o := <-req.done:
		return o
	case <-ctx.Done():
		// It may be in the batch in flight.
		return commitOutcome{err: fmt.Errorf("%w: %v", ErrUnknownOutcome, ctx.Err())}
	}
}

// run takes the waiting appends, as many as a batch holds, and commits
// them, until the log closes.
func (c *committer) run(ctx context.Context) {
	for {
		first := c.carry
		c.carry = nil
		if first == nil {
			select {
			case first = <-c.reqs:
			case <-ctx.Done():
				drain(c.reqs, fmt.Errorf("%w: closed", eventlog.ErrClosed))
				return
			}
		}
		if first.release != nil {
			c.hold(ctx, first)
			continue
		}
		batch, msgs := []*commitReq{first}, len(first.wire)
	gather:
		for {
			select {
			case req := <-c.reqs:
				if req.release != nil || msgs+len(req.wire) > maxBatch {
					c.carry = req
					break gather
				}
				batch, msgs = append(batch, req), msgs+len(req.wire)
			default:
				break gather
			}
		}
		c.commit(ctx, batch)
	}
}

// drain answers every append waiting in reqs with err.
func drain(reqs <-chan *commitReq, err error) {
	for {
		select {
		case req := <-reqs:
			req.reply(commitOutcome{err: err})
		default:
			return
		}
	}
}

// Pauses of an append or a batch that found no stream leader (an
// election), or whose check JetStream refused as busy with another node's
// append in flight: from the first to the longest, until AckTimeout.
const (
	firstRetryWait = 5 * time.Millisecond
	maxRetryWait   = 250 * time.Millisecond
)

// commit stores batch as one or more atomic batches and answers each
// append.
func (c *committer) commit(ctx context.Context, batch []*commitReq) {
	r := c.r
	c.waiting.Add(-int32(len(batch)))
	deadline := time.Now().Add(r.opts.AckTimeout)
	wait := firstRetryWait
	for attempt := 0; len(batch) > 0; attempt++ {
		actx, cancel := context.WithDeadline(ctx, deadline)
		var last uint64
		var err error
		batch, last, err = c.send(actx, batch, attempt > 0)
		cancel()
		switch {
		case err == nil && len(batch) == 0:
			return // every append answered without a batch
		case err == nil:
			r.answerStored(batch, last)
			c.acked = last
			return
		case isWrongLastSeq(err):
			// Another node appended to the partition, or took it, or
			// JetStream refused the check as busy with another node's
			// append in flight. Nothing of the batch was stored: catch
			// up and check every append again.
			r.commits.refused.Add(1)
			moved, ferr := c.caughtUp(ctx, deadline)
			if ferr != nil {
				replyAll(batch, ferr)
				return
			}
			if !moved && !errors.Is(err, errCombined) && !r.retryPause(ctx, deadline, &wait) {
				replyAll(batch, fmt.Errorf("%w: partition %d's check refused as busy until the time ran out", ErrUnavailable, c.p))
				return
			}
		case errors.Is(err, errCombined) && !isNoResponders(err):
			// Refused with the batches of other partitions, maybe for
			// one of theirs (combine.go): nothing was stored. Once the
			// copy is caught up, it is checked again and sent by
			// itself, which says what its own outcome is.
			if _, ferr := c.caughtUp(ctx, deadline); ferr != nil {
				replyAll(batch, ferr)
				return
			}
		case isDuplicateInFlight(err) || isDuplicateInBatch(err):
			// An append sent again (its first attempt's answer was
			// lost) is, or is being, stored: answer it from the copy
			// once there, send the others.
			if _, ferr := c.caughtUp(ctx, deadline); ferr != nil {
				replyAll(batch, ferr)
				return
			}
			if !r.retryPause(ctx, deadline, &wait) {
				replyAll(batch, fmt.Errorf("%w: the same events were still being stored by another request", ErrUnknownOutcome))
				return
			}
		case isNoResponders(err):
			if !r.retryPause(ctx, deadline, &wait) {
				replyAll(batch, fmt.Errorf("%w: stream %s has no leader: %v", ErrUnavailable, r.opts.Stream, err))
				return
			}
		default:
			// ErrUnknownOutcome among others: the copy is caught up
			// before the next batch is checked.
			c.acked = 0
			replyAll(batch, err)
			return
		}
	}
}

// send checks the waiting appends against the node's view of the
// partition, answers those that conflict or are already stored (again:
// AppendMulti looked before it queued them, so only a batch sent again
// looks), and publishes the others as one atomic batch with the
// partition's expected last sequence. It returns the appends not answered
// (those it published, or all of them when it could not check them) and
// the stream sequence of the batch's last message.
func (c *committer) send(ctx context.Context, batch []*commitReq, again bool) ([]*commitReq, uint64, error) {
	r := c.r
	if c.acked == 0 {
		if err := r.catchUp(ctx); err != nil {
			return batch, 0, err
		}
	} else if err := r.waitApplied(ctx, c.acked); err != nil {
		return batch, 0, err
	}
	r.mu.Lock()
	l, last := r.held[c.p], r.partLast[c.p]
	var ferr error
	if l == nil {
		ferr = fenceError(c.p, r.owners[c.p])
	} else {
		ferr = r.fenceErrLocked(c.p, l)
	}
	r.mu.Unlock()
	if ferr != nil {
		return batch, 0, ferr
	}
	v := &batchVersions{r: r, after: map[string]uint64{}}
	var parts []eventlog.StreamAppend
	var wire []wireMsg
	sent := batch[:0]
	for _, req := range batch {
		if err := req.ctx.Err(); err != nil {
			req.reply(commitOutcome{err: err}) // never sent
			continue
		}
		if again {
			if res, ok, err := r.storedAll(req.parts); ok || err != nil {
				req.reply(commitOutcome{res: res, err: err})
				continue
			}
		}
		if err := v.check(ctx, req.parts); err != nil {
			req.reply(commitOutcome{err: err})
			continue
		}
		sent = append(sent, req)
		parts = append(parts, req.parts...)
		wire = append(wire, req.wire...)
	}
	if len(sent) == 0 {
		return nil, 0, nil
	}
	checks := make([]check, len(parts))
	for i := range checks {
		checks[i].seq = -1
	}
	checks[0] = check{seq: int64(last), subj: partitionFilter(c.p)}
	if h := r.beforeBatch; h != nil {
		h(c.p, len(sent))
	}
	// A first attempt goes with the batches of other partitions ready at
	// the same moment (combine.go); a batch sent again goes by itself.
	if again {
		seq, err := r.publish(ctx, wire, checks)
		return sent, seq, err
	}
	return c.publishCombined(ctx, sent, v, wire, checks)
}

// batchVersions is a batch's view of its streams' versions: the local
// copy's, moved on by the batch's earlier appends.
type batchVersions struct {
	r      *ReplicatedLog
	after  map[string]uint64 // versions after the batch's earlier appends
	caught bool              // the copy caught up with the stream once
}

// check checks an append's expected versions and, if they hold, counts
// its events in.
func (v *batchVersions) check(ctx context.Context, parts []eventlog.StreamAppend) error {
	next := map[string]uint64{}
	for _, sa := range parts {
		cur, ok := v.after[sa.Stream]
		if !ok {
			var err error
			if cur, err = v.r.local.StreamVersion(sa.Stream); err != nil {
				return err
			}
			if sa.Expected != eventlog.Any && uint64(sa.Expected) > cur && !v.caught {
				// The caller saw a version this copy does not hold yet
				// (another node's append): catch up once. The
				// partition's sequence read before may then be behind,
				// and JetStream refuses the batch: it is checked again.
				v.caught = true
				if err := v.r.catchUp(ctx); err != nil {
					return err
				}
				if cur, err = v.r.local.StreamVersion(sa.Stream); err != nil {
					return err
				}
			}
		}
		if sa.Expected != eventlog.Any && uint64(sa.Expected) != cur {
			return &eventlog.ConflictError{Stream: sa.Stream, Expected: sa.Expected, Current: cur}
		}
		next[sa.Stream] = cur + uint64(len(sa.Events))
	}
	for s, n := range next {
		v.after[s] = n
	}
	return nil
}

// caughtUp waits until the local copy holds what the stream holds, and
// reports whether the partition moved meanwhile; ErrFenced if another
// node took it.
func (c *committer) caughtUp(ctx context.Context, deadline time.Time) (bool, error) {
	r := c.r
	r.mu.Lock()
	before := r.partLast[c.p]
	r.mu.Unlock()
	cctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := r.catchUp(cctx); err != nil {
		return false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.held[c.p]; l == nil {
		return false, fenceError(c.p, r.owners[c.p])
	} else if err := r.fenceErrLocked(c.p, l); err != nil {
		return false, err
	}
	return r.partLast[c.p] != before, nil
}

// retryPause waits *wait, or less if the local copy moves first (the
// append in the way may be the one that arrives), and doubles *wait up to
// maxRetryWait; false when the deadline comes first or ctx ends.
func (r *ReplicatedLog) retryPause(ctx context.Context, deadline time.Time, wait *time.Duration) bool {
	d := min(*wait, time.Until(deadline))
	if d <= 0 {
		return false
	}
	*wait = min(2**wait, maxRetryWait)
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_ = r.waitApplied(wctx, r.Applied()+1)
	return ctx.Err() == nil
}

// answerStored counts a stored batch and answers each of its appends: last is
// the batch's last message, each append's last is counted back from it.
func (r *ReplicatedLog) answerStored(batch []*commitReq, last uint64) {
	r.commits.batches.Add(1)
	for i := len(batch) - 1; i >= 0; i-- {
		r.commits.appends.Add(1)
		r.commits.messages.Add(uint64(len(batch[i].wire)))
		batch[i].reply(commitOutcome{last: last})
		last -= uint64(len(batch[i].wire))
	}
}

// reply answers the append (done is buffered: it never blocks).
func (req *commitReq) reply(o commitOutcome) { req.done <- o }

// replyAll answers every append of a batch with err.
func replyAll(batch []*commitReq, err error) {
	for _, req := range batch {
		req.reply(commitOutcome{err: err})
	}
}

// jsErrCodeDuplicateInBatch is JetStream's refusal of an atomic batch one
// of whose messages' Nats-Msg-Id is already stored.
const jsErrCodeDuplicateInBatch jetstream.ErrorCode = 10201

// isNoResponders: no stream leader listens (an election); nothing stored.
func isNoResponders(err error) bool { return errors.Is(err, nats.ErrNoResponders) }

func isDuplicateInBatch(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeDuplicateInBatch
}

// hold stops this committer between two batches for an append over
// several partitions: once the local copy holds the committer's last
// batch (so that the holder's partition checks, read from the copy, are
// current), it tells the holder and waits for its release, then counts
// the holder's messages as its own last batch.
func (c *committer) hold(ctx context.Context, req *commitReq) {
	var err error
	if c.acked != 0 {
		err = c.r.waitApplied(req.ctx, c.acked)
	}
	req.reply(commitOutcome{err: err})
	if err != nil {
		return // the holder does not release a hold it did not get
	}
	select {
	case last := <-req.release:
		switch {
		case last == unknownLast:
			c.acked = 0
		case last > c.acked:
			c.acked = last
		}
	case <-ctx.Done():
	}
}

// heldPartitions is the partitions of parts this node holds, ascending,
// for an append that is not one partition's (ownedPartition): over
// several partitions, or over one and streams of no partition; nil when it
// touches none.
func (r *ReplicatedLog) heldPartitions(parts []eventlog.StreamAppend) []int {
	var ps []int
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sa := range parts {
		if p := PartitionOf(sa.Stream, r.parts); p >= 0 && r.held[p] != nil && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// holdCommitters holds the committers of partitions ps (ascending, so
// that two such appends cannot wait for each other) and returns the
// function that releases them with the stream sequence of the last
// message the caller stored (0: none, unknownLast: unknown). Without
// the holds, such an append and a committer's batch in flight would
// refuse each other's partition check.
func (r *ReplicatedLog) holdCommitters(ctx context.Context, ps []int) (func(last uint64), error) {
	var held []*commitReq
	release := func(last uint64) {
		for _, h := range held {
			h.release <- last
		}
	}
	for _, p := range ps {
		req := &commitReq{ctx: ctx, done: make(chan commitOutcome, 1), release: make(chan uint64, 1)}
		c := r.committerFor(p)
		select {
		case c.reqs <- req:
		case <-ctx.Done():
			release(0)
			return nil, ctx.Err()
		}
		select {
		case o := <-req.done:
			if o.err != nil {
				release(0)
				return nil, o.err
			}
			held = append(held, req)
		case <-ctx.Done():
			// The hold may still be granted: release it then.
			go func() {
				if o := <-req.done; o.err == nil {
					req.release <- 0
				}
			}()
			release(0)
			return nil, ctx.Err()
		}
	}
	return release, nil
}
