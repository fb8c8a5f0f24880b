package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// The appends whose streams all have no partition ($memory, $inputs,
// $system, ...) go through one committer of their own (docs/cluster.md,
// "Appends to streams of no partition"): while batches are in flight, the
// appends that arrive gather, and the next batch takes them all as one
// atomic batch, each append's expected version checked by JetStream on its
// own first message (the check it would carry alone). No partition fences
// these streams and any node may write them, so the committer does not
// answer conflicts from its view: a batch JetStream refuses (a conflict, a
// busy subject, a retry's id, no leader) stored nothing, and each of its
// appends is then sent alone, the way it went before this committer, which
// tells a conflict from a busy subject and waits for a leader.
//
// Up to looseInFlight batches are in flight at once; a stream is in at
// most one of them (its next append waits for the batch's outcome, so that
// its check is read from a copy that holds it).

// looseInFlight bounds the batches of streams of no partition in flight.
const looseInFlight = 4

// looseCommitter is the single writer of this node's appends to streams
// of no partition.
type looseCommitter struct {
	r    *ReplicatedLog
	reqs chan *commitReq
}

// looseDone is a batch's end: the streams it held.
type looseDone struct{ streams []string }

// unpartitioned reports whether no part of an append has a partition.
func (r *ReplicatedLog) unpartitioned(parts []eventlog.StreamAppend) bool {
	for _, sa := range parts {
		if PartitionOf(sa.Stream, r.parts) >= 0 {
			return false
		}
	}
	return true
}

// looseFor returns the committer of streams of no partition, starting it
// on first use.
func (r *ReplicatedLog) looseFor() *looseCommitter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loose == nil {
		r.loose = &looseCommitter{r: r, reqs: make(chan *commitReq, maxBatch)}
		go r.loose.run(r.ctx)
	}
	return r.loose
}

// run gathers the waiting appends into batches until the log closes.
func (c *looseCommitter) run(ctx context.Context) {
	var pending []*commitReq
	busy := map[string]bool{} // streams in a batch in flight
	done := make(chan looseDone, looseInFlight)
	inFlight := 0
	for {
		if inFlight < looseInFlight && len(pending) > 0 {
			var batch []*commitReq
			batch, pending = c.take(pending, busy)
			if len(batch) > 0 {
				inFlight++
				go func() { done <- c.commit(ctx, batch) }()
				continue
			}
		}
		select {
		case req := <-c.reqs:
			pending = append(pending, req)
			// Take what else waits, so that it can join the batch.
		more:
			for len(pending) < maxBatch {
				select {
				case req := <-c.reqs:
					pending = append(pending, req)
				default:
					break more
				}
			}
		case d := <-done:
			inFlight--
			for _, s := range d.streams {
				delete(busy, s)
			}
		case <-ctx.Done():
			closedErr := fmt.Errorf("%w: closed", eventlog.ErrClosed)
			replyAll(pending, closedErr)
			drain(c.reqs, closedErr)
			return
		}
	}
}

// take moves from pending the appends none of whose streams is busy or
// in the batch already, as many as a batch holds, marks their streams
// busy and returns the batch and what stays pending, in order.
func (c *looseCommitter) take(pending []*commitReq, busy map[string]bool) (batch, rest []*commitReq) {
	msgs := 0
	in := map[string]bool{}
	for _, req := range pending {
		free := msgs+len(req.wire) <= maxBatch
		for _, sa := range req.parts {
			free = free && !busy[sa.Stream] && !in[sa.Stream]
		}
		if !free {
			rest = append(rest, req)
			continue
		}
		for _, sa := range req.parts {
			in[sa.Stream] = true
		}
		batch, msgs = append(batch, req), msgs+len(req.wire)
	}
	for s := range in {
		busy[s] = true
	}
	return batch, rest
}

// commit publishes batch and answers each append: with the sequence of
// its last message, with its check's error, or, when JetStream refused
// the batch, with alone (the caller sends it by itself).
func (c *looseCommitter) commit(ctx context.Context, batch []*commitReq) looseDone {
	r := c.r
	var d looseDone
	for _, req := range batch {
		for _, sa := range req.parts {
			d.streams = append(d.streams, sa.Stream)
		}
	}
	actx, cancel := context.WithDeadline(ctx, time.Now().Add(r.opts.AckTimeout))
	defer cancel()
	var parts []eventlog.StreamAppend
	var wire []wireMsg
	var checks []check
	sent := batch[:0]
	for _, req := range batch {
		if err := req.ctx.Err(); err != nil {
			req.reply(commitOutcome{err: err}) // never sent
			continue
		}
		cs, err := r.checks(actx, req.parts)
		if err != nil {
			req.reply(commitOutcome{err: err, alone: true})
			continue
		}
		sent = append(sent, req)
		parts = append(parts, req.parts...)
		wire = append(wire, req.wire...)
		checks = append(checks, cs...)
	}
	if len(sent) == 0 {
		return d
	}
	if len(sent) == 1 {
		// Alone anyway: the caller's own path, with its retries.
		sent[0].reply(commitOutcome{alone: true})
		return d
	}
	if h := r.beforeLoose; h != nil {
		h(len(sent))
	}
	last, err := r.publish(actx, wire, checks)
	switch {
	case err == nil:
		r.answerStored(sent, last)
	case isWrongLastSeq(err) || isDuplicateInFlight(err) || isDuplicateInBatch(err) || isNoResponders(err):
		// Nothing of the batch was stored: each append goes alone.
		if isWrongLastSeq(err) {
			r.commits.refused.Add(1)
		}
		for _, req := range sent {
			req.reply(commitOutcome{alone: true})
		}
	default:
		replyAll(sent, err)
	}
	return d
}

// commitLoose sends an append to streams of no partition through the
// committer and waits for its outcome.
func (r *ReplicatedLog) commitLoose(ctx context.Context, parts []eventlog.StreamAppend, wire []wireMsg) commitOutcome {
	req := &commitReq{ctx: ctx, parts: parts, wire: wire, done: make(chan commitOutcome, 1)}
	return r.enqueue(ctx, r.looseFor().reqs, req, nil)
}
