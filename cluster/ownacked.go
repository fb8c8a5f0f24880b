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
	// heads are its parts, in order: how many of evs each has, and
	// where its local positions go once written.
	heads []partHead
}

// partHead is one part of an acknowledged append.
type partHead struct {
	n   int
	res *partResult
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
		if w.first || len(a.heads) == 0 {
			a.heads = append(a.heads, partHead{res: w.res})
		}
		a.heads[len(a.heads)-1].n += len(w.evs)
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
	var written []ackedAppend
	end, n := *applied, 0
	for {
		a, ok := q[end+1]
		if !ok {
			break
		}
		delete(q, a.first)
		if _, err := r.local.Get(a.evs[0].ID); err != nil {
			parts = appendParts(parts, a.evs)
			written = append(written, a)
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
		res, err := r.local.AppendMulti(ctx, parts...)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, eventlog.ErrClosed) {
				r.opts.Logger.Error("the local copy stops following the stream", "err", err)
			}
			return 0, fmt.Errorf("%w: %v", ErrApply, err)
		}
		leaveResults(written, res)
	}
	*applied = end
	r.noteApplied(end, moved, owned)
	return n, nil
}

// leaveResults hands each part of the written appends its local positions
// (res: the local append's, whose parts merged the runs of one stream),
// before the copy says it holds them: their appenders need not read them
// back.
func leaveResults(written []ackedAppend, res []eventlog.AppendResult) {
	var evs []eventlog.Event
	for _, pr := range res {
		evs = append(evs, pr.Events...)
	}
	total := 0
	for _, a := range written {
		total += len(a.evs)
	}
	if len(evs) != total {
		return // the appenders read them from the copy
	}
	for _, a := range written {
		for _, h := range a.heads {
			part := evs[:h.n:h.n]
			evs = evs[h.n:]
			if h.res == nil || h.n == 0 {
				continue
			}
			h.res.v.Store(&eventlog.AppendResult{FirstSeq: part[0].Seq, LastSeq: part[h.n-1].Seq, Version: part[h.n-1].Version, Events: part})
		}
	}
}

// writtenResults is the local positions of an append's n parts, if the
// follower wrote it at its acknowledgement and left them all.
func writtenResults(wire []wireMsg, n int) ([]eventlog.AppendResult, bool) {
	res := make([]eventlog.AppendResult, 0, n)
	for _, w := range wire {
		if !w.first {
			continue
		}
		if w.res == nil {
			return nil, false
		}
		pr := w.res.v.Load()
		if pr == nil {
			return nil, false
		}
		res = append(res, *pr)
	}
	return res, len(res) == n
}
