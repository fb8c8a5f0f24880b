package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// An append of this node that JetStream acknowledged is stored, byte for
// byte as this node sent it, at the stream sequences the acknowledgement
// gives (an atomic batch's messages are consecutive, its acknowledgement
// names the last). So the follower need not wait for the stream to deliver
// it: publish hands the append's events to the follower (acked), which
// writes them into the copy as soon as the copy holds everything before
// their first sequence, in one commit with any of this node's
// acknowledged appends that follow, and passes over their messages when
// they are delivered. The copy so stays the stream's events in the
// stream's order, each exactly what parsing its message gives (the events
// are built as ownMessage builds them), and an append's caller, the next
// batch of its partition and the fold see it one delivery sooner. An
// append whose first sequence the copy does not reach yet (another node's
// messages, or an earlier append of this node whose acknowledgement has
// not arrived, come first) waits for them; one that the delivered
// messages covered first is dropped. A duplicate's acknowledgement (an id
// stored earlier) is not handed over: its sequence is the first copy's.

// ackedAppend is one acknowledged append of this node: its events as the
// stream holds them, in msgs messages from stream sequence first on.
type ackedAppend struct {
	first uint64
	msgs  int
	evs   []eventlog.Event
}

// last is the stream sequence of the append's last message.
func (a ackedAppend) last() uint64 { return a.first + uint64(a.msgs) - 1 }

// ownQueue holds the acknowledged appends the copy does not reach yet, by
// first stream sequence.
type ownQueue map[uint64]ackedAppend

// add queues a unless the copy holds it already.
func (q ownQueue) add(a ackedAppend, applied uint64) {
	if a.first > applied {
		q[a.first] = a
	}
}

// noteAcked hands an acknowledged append (its messages, the last at
// stream sequence last) to the follower. It never blocks: if the follower
// is that far behind, the append is written when it is delivered.
func (r *ReplicatedLog) noteAcked(wire []wireMsg, last uint64) {
	if uint64(len(wire)) > last {
		return
	}
	a := ackedAppend{first: last - uint64(len(wire)) + 1, msgs: len(wire), evs: make([]eventlog.Event, 0, events(wire))}
	for k, w := range wire {
		for _, ev := range w.evs {
			a.evs = append(a.evs, asStored(ev, a.first+uint64(k)))
		}
	}
	select {
	case r.acked <- a:
	default:
	}
}

// asStored is an event as the follower writes it into the copy from its
// message at stream sequence sseq: ev as sent (onWire), with its own body
// and metadata (the appender's are not the follower's to keep: its append
// may return, an ended context, while this is written) and the stream
// sequence in its metadata.
func asStored(ev eventlog.Event, sseq uint64) eventlog.Event {
	ev.Body = append([]byte(nil), ev.Body...)
	if len(ev.Body) == 0 {
		ev.Body = nil
	}
	md := make(map[string]string, len(ev.Metadata)+1)
	maps.Copy(md, ev.Metadata)
	md[MetaStreamSeq] = strconv.FormatUint(sseq, 10)
	ev.Metadata = md
	return ev
}

// applyOwn writes the queued appends that follow the copy's end (applied,
// moved on), in one local commit, and drops those the copy holds already.
// It returns how many it wrote.
func (r *ReplicatedLog) applyOwn(ctx context.Context, q ownQueue, applied *uint64) (int, error) {
	var parts []eventlog.StreamAppend
	moved := map[int]uint64{}
	owned := map[int]Owner{}
	end, n := *applied, 0
	for {
		a, ok := q[end+1]
		if !ok {
			break
		}
		delete(q, a.first)
		if _, err := r.local.Get(a.evs[0].ID); err != nil {
			parts = appendParts(parts, a.evs)
		}
		r.notePartitions(a.evs, moved, owned)
		end, n = a.last(), n+1
	}
	for first := range q {
		if first <= end {
			delete(q, first)
		}
	}
	if n == 0 {
		return 0, nil
	}
	if len(parts) > 0 {
		if _, err := r.local.AppendMulti(ctx, parts...); err != nil {
			if ctx.Err() == nil && !errors.Is(err, eventlog.ErrClosed) {
				r.opts.Logger.Error("the local copy stops following the stream", "err", err)
			}
			return 0, fmt.Errorf("%w: %v", ErrApply, err)
		}
	}
	*applied = end
	r.noteApplied(end, moved, owned)
	return n, nil
}
