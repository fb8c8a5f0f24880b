package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

// ErrFanoutMismatch is returned (wrapped) by VerifyFanout when the stream
// does not hold the log's events as the outbox publishes them.
var ErrFanoutMismatch = errors.New("cluster: the stream does not match the log")

// FanoutRange is the part of the log a fan-out stream holds: log
// sequences First to Last, one message each.
type FanoutRange struct{ First, Last uint64 }

// VerifyFanout checks a fan-out stream against the log it was published
// from: its messages, in stream order, hold consecutive log sequences
// (no gap, no duplicate), each event on its subject, with its id as
// Nats-Msg-Id and exactly the JSON form the log's event has today. It
// returns the range of the log the stream holds (zero for an empty
// stream). It reads the stream one message at a time (a request per
// message): it is meant for tests and audits of modest streams.
func VerifyFanout(ctx context.Context, l *eventlog.Log, st jetstream.Stream) (FanoutRange, error) {
	var r FanoutRange
	info, err := st.Info(ctx)
	if err != nil {
		return r, err
	}
	for sseq := info.State.FirstSeq; sseq <= info.State.LastSeq && info.State.Msgs > 0; sseq++ {
		m, err := st.GetMsg(ctx, sseq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return r, fmt.Errorf("%w: stream message %d is missing (deleted)", ErrFanoutMismatch, sseq)
		}
		if err != nil {
			return r, err
		}
		seq, err := strconv.ParseUint(m.Header.Get(HeaderSeq), 10, 64)
		if err != nil {
			return r, fmt.Errorf("%w: stream message %d has no %s header", ErrFanoutMismatch, sseq, HeaderSeq)
		}
		if r.Last != 0 && seq != r.Last+1 {
			return r, fmt.Errorf("%w: stream message %d holds event %d after event %d", ErrFanoutMismatch, sseq, seq, r.Last)
		}
		if r.First == 0 {
			r.First = seq
		}
		r.Last = seq
		ev, err := l.GetSeq(seq)
		if err != nil {
			return r, fmt.Errorf("%w: stream message %d holds event %d: %v", ErrFanoutMismatch, sseq, seq, err)
		}
		want, err := replay.MarshalEvent(ev)
		if err != nil {
			return r, err
		}
		switch {
		case m.Subject != Subject(ev.Stream, ev.Type):
			return r, fmt.Errorf("%w: event %d on %s, want %s", ErrFanoutMismatch, seq, m.Subject, Subject(ev.Stream, ev.Type))
		case m.Header.Get(jetstream.MsgIDHeader) != ev.ID.String():
			return r, fmt.Errorf("%w: event %d has Nats-Msg-Id %q, want %s", ErrFanoutMismatch, seq, m.Header.Get(jetstream.MsgIDHeader), ev.ID)
		case !bytes.Equal(m.Data, want):
			return r, fmt.Errorf("%w: event %d: %s\nwant %s", ErrFanoutMismatch, seq, m.Data, want)
		}
	}
	return r, nil
}
