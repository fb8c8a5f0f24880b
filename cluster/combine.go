package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// One request for the batches of several partitions (docs/cluster.md,
// "Appends to an owned partition"). JetStream's cost, on a replicated
// stream that fsyncs, is per request far more than per message: the
// servers take about as many requests per second with several in flight
// as with one, so the partitions' committers, each sending its own batch,
// queue behind one another in the servers. The committers therefore hand
// their first attempt at a batch to the node's combiner, which sends the
// batches that are ready at the same moment as one atomic batch: each
// partition's messages in a row, its check (the partition's expected last
// sequence) on its first message, as an append over several partitions
// carries it. At most combineInFlight such requests are in flight; a
// partition is in at most one of them (its committer waits for its
// batch's outcome). The stream's messages are the same as without it.
//
// A batch waiting for the combiner is not sealed: until the combiner
// takes it for a request, the appends that arrive at its partition's
// committer are checked against the batch's view and join it, as they
// would have had they arrived before it was checked. Only the appends
// that arrive once it is taken (in flight) wait for its outcome and go
// as the next batch.
//
// The fence is unchanged: JetStream stores the whole atomic batch or none
// of it, and refuses it if any partition's check fails, so a batch of a
// partition another node moved or took is never stored, and nor are the
// batches sent with it. Those are sent again at once, each by itself
// (errCombined), their committers having caught up; the batch whose
// check failed is then answered as a lone batch is.

// combineInFlight bounds the combined requests in flight at once.
const combineInFlight = 1

// errCombined marks the refusal of a combined request: it may be another
// partition's check that failed.
var errCombined = errors.New("cluster: refused with the batches of other partitions")

// combiner sends the partitions' batches, several as one request.
type combiner struct {
	r    *ReplicatedLog
	reqs chan *combineReq
	// waiting is how many batches wait for a request (tests).
	waiting atomic.Int32
}

// combineReq is one partition's batch: its messages and its parts' checks
// (publish), and where its outcome goes.
type combineReq struct {
	ctx  context.Context     // its committer's: once it ends, the batch is not sent
	done chan combineOutcome // buffered: the combiner never blocks on it
	// mu guards wire, checks and taken: until the combiner takes the
	// batch for a request, its committer may add the appends that
	// arrive meanwhile (join).
	mu     sync.Mutex
	wire   []wireMsg
	checks []check
	taken  bool
}

// join adds an append's messages and its parts' checks (none: the
// batch's check on its first message covers the partition) to a batch
// the combiner has not taken yet; false once taken, or if the messages
// would not fit in one atomic batch.
func (req *combineReq) join(wire []wireMsg, parts int) bool {
	req.mu.Lock()
	defer req.mu.Unlock()
	if req.taken || len(req.wire)+len(wire) > maxBatch {
		return false
	}
	req.wire = append(req.wire, wire...)
	for range parts {
		req.checks = append(req.checks, check{seq: -1})
	}
	return true
}

// take marks the batch taken for a request if its messages fit in room,
// and returns how many it has; 0 and not taken if they do not fit.
func (req *combineReq) take(room int) int {
	req.mu.Lock()
	defer req.mu.Unlock()
	if len(req.wire) > room {
		return 0
	}
	req.taken = true
	return len(req.wire)
}

// combineOutcome is the stream sequence of a batch's last message, or why
// it was not stored.
type combineOutcome struct {
	last uint64
	err  error
}

// combinerFor returns the node's combiner, starting it on first use.
func (r *ReplicatedLog) combinerFor() *combiner {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.combine == nil {
		r.combine = &combiner{r: r, reqs: make(chan *combineReq, maxBatch)}
		go r.combine.run(r.ctx)
	}
	return r.combine
}

// publishCombined publishes one partition's batch (publish), with the
// batches of other partitions that are ready at the same moment. Until
// the combiner takes it for a request, the appends that arrive at the
// partition's committer join it (joinWaiting); it returns the batch's
// appends, those that joined included, in the order of their messages.
func (c *committer) publishCombined(ctx context.Context, batch []*commitReq, v *batchVersions, wire []wireMsg, checks []check) ([]*commitReq, uint64, error) {
	req := &combineReq{ctx: ctx, wire: wire, checks: checks, done: make(chan combineOutcome, 1)}
	select {
	case c.r.combinerFor().reqs <- req:
	case <-ctx.Done():
		return batch, 0, ctx.Err() // not handed over: nothing sent
	}
	reqs := c.reqs
	if c.carry != nil {
		reqs = nil // an append already waits for the next batch: nothing passes it
	}
	for {
		select {
		case o := <-req.done:
			return batch, o.last, o.err
		case next := <-reqs:
			var joined bool
			if batch, joined = c.joinWaiting(ctx, req, batch, v, next); !joined {
				reqs = nil // the batch is taken, or full: the rest waits for the next one
			}
		case <-ctx.Done():
			// It may be in the request in flight.
			return batch, 0, fmt.Errorf("%w: %v", ErrUnknownOutcome, ctx.Err())
		}
	}
}

// joinWaiting adds next, an append that arrived while the partition's
// batch waits for the combiner, to that batch if it is not taken yet: it
// is checked as the batch's own appends were, against the batch's view
// (the copy, moved on by the batch's earlier appends), so the stream
// gets what it would have got had next arrived before the batch was
// checked. An append that conflicts is answered at once (joined: the
// batch may take more). A hold, or an append the batch has no room for,
// waits for the next batch (carry); so does every append once the
// combiner took the batch.
func (c *committer) joinWaiting(ctx context.Context, req *combineReq, batch []*commitReq, v *batchVersions, next *commitReq) ([]*commitReq, bool) {
	if next.release != nil {
		c.carry = next
		return batch, false
	}
	if err := next.ctx.Err(); err != nil {
		c.waiting.Add(-1)
		next.reply(commitOutcome{err: err}) // never sent
		return batch, true
	}
	snapshot := maps.Clone(v.after)
	if err := v.check(ctx, next.parts); err != nil {
		c.waiting.Add(-1)
		next.reply(commitOutcome{err: err})
		return batch, true
	}
	if !req.join(next.wire, len(next.parts)) {
		v.after = snapshot // not in this batch: the next one checks it again
		c.carry = next
		return batch, false
	}
	c.waiting.Add(-1)
	c.r.commits.joined.Add(1)
	return append(batch, next), true
}

// run takes the batches waiting, as many as one atomic batch holds, and
// sends them, until the log closes.
func (c *combiner) run(ctx context.Context) {
	var pending []*combineReq
	done := make(chan struct{}, combineInFlight)
	inFlight := 0
	for {
		if inFlight < combineInFlight && len(pending) > 0 {
			var take []*combineReq
			take, pending = takeCombined(pending)
			c.waiting.Store(int32(len(pending)))
			inFlight++
			go func() { c.send(ctx, take); done <- struct{}{} }()
			continue
		}
		select {
		case req := <-c.reqs:
			pending = append(pending, req)
		gather:
			for {
				select {
				case req := <-c.reqs:
					pending = append(pending, req)
				default:
					break gather
				}
			}
			c.waiting.Store(int32(len(pending)))
		case <-done:
			inFlight--
		case <-ctx.Done():
			for _, req := range pending {
				req.done <- combineOutcome{err: fmt.Errorf("%w: closed", eventlog.ErrClosed)}
			}
			return
		}
	}
}

// takeCombined splits off the first batches of pending whose messages fit
// in one atomic batch (at least one).
// Once taken, a batch's messages are fixed.
func takeCombined(pending []*combineReq) (take, rest []*combineReq) {
	n, msgs := 1, pending[0].take(1<<62)
	for n < len(pending) {
		k := pending[n].take(maxBatch - msgs)
		if k == 0 {
			break
		}
		msgs += k
		n++
	}
	return pending[:n:n], pending[n:]
}

// send publishes reqs' batches as one request and answers each: the
// stream sequence of its own last message, counted back from the
// request's last.
func (c *combiner) send(ctx context.Context, reqs []*combineReq) {
	r := c.r
	// A batch whose committer stopped waiting (its time ran out while
	// the request before was in flight) is not sent.
	live := reqs[:0]
	for _, req := range reqs {
		if err := req.ctx.Err(); err != nil {
			req.done <- combineOutcome{err: err}
			continue
		}
		live = append(live, req)
	}
	if reqs = live; len(reqs) == 0 {
		return
	}
	if h := r.beforeCombine; h != nil {
		h(len(reqs))
	}
	actx, cancel := context.WithTimeout(ctx, r.opts.AckTimeout)
	defer cancel()
	if len(reqs) == 1 {
		last, err := r.publish(actx, reqs[0].wire, reqs[0].checks)
		reqs[0].done <- combineOutcome{last: last, err: err}
		return
	}
	var wire []wireMsg
	var checks []check
	for _, req := range reqs {
		wire = append(wire, req.wire...)
		checks = append(checks, req.checks...)
	}
	last, err := r.publish(actx, wire, checks)
	r.commits.combined.Add(1)
	if err != nil && !errors.Is(err, ErrUnknownOutcome) {
		err = fmt.Errorf("%w: %w", errCombined, err)
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		reqs[i].done <- combineOutcome{last: last, err: err}
		last -= uint64(len(reqs[i].wire))
	}
}
