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

// ErrCopyMismatch is returned (wrapped) by VerifyCopy when a node's local
// copy is not the stream's events in the stream's order.
var ErrCopyMismatch = errors.New("cluster: the local copy does not match the stream")

// VerifyCopy checks a node's local copy against the replicated log's
// stream: walking the stream in order, the events of every message (one,
// or several packed, wire.go) not seen before are the next events of the
// local copy, with the same id, stream, type,
// schema, time, causation, body and the message's stream sequence in
// their metadata; a message stored twice is skipped. The copy may end
// before the stream (it is behind) but must hold nothing else. It returns
// the last stream sequence the copy holds. It reads the stream one message
// at a time: for tests and audits of modest streams.
func VerifyCopy(ctx context.Context, local *eventlog.Log, st jetstream.Stream) (uint64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	it := local.Scan(1, eventlog.Forward)
	defer it.Close()
	var covered uint64
	for sseq := info.State.FirstSeq; sseq <= info.State.LastSeq && info.State.Msgs > 0; sseq++ {
		m, err := st.GetMsg(ctx, sseq)
		if err != nil {
			return covered, fmt.Errorf("stream message %d: %w", sseq, err)
		}
		wants, _, _, err := decodeEvents(m.Header, m.Data, sseq)
		if err != nil {
			return covered, fmt.Errorf("%w: %v", ErrCopyMismatch, err)
		}
		for k, want := range wants {
			if prev, err := local.Get(want.ID); err == nil && prev.Metadata[MetaStreamSeq] != want.Metadata[MetaStreamSeq] {
				continue // stored twice; the copy holds the first
			}
			if !it.Next() {
				if err := it.Err(); err != nil {
					return covered, err
				}
				if k > 0 {
					return covered, fmt.Errorf("%w: the copy ends inside stream message %d, after %d of its %d events", ErrCopyMismatch, sseq, k, len(wants))
				}
				return covered, nil // the copy is behind
			}
			got := it.Event()
			if got.ID != want.ID || got.Stream != want.Stream || got.Type != want.Type || got.Schema != want.Schema ||
				!got.Time.Equal(want.Time) || got.Causation != want.Causation || !bytes.Equal(got.Body, want.Body) ||
				got.Metadata[MetaStreamSeq] != want.Metadata[MetaStreamSeq] {
				return covered, fmt.Errorf("%w: local event %d (%s %s) is not event %d of stream message %d (%s %s)",
					ErrCopyMismatch, got.Seq, got.ID, got.Type, k+1, sseq, want.ID, want.Type)
			}
		}
		covered = sseq
	}
	if it.Next() {
		return covered, fmt.Errorf("%w: local event %d (%s) is not in the stream", ErrCopyMismatch, it.Event().Seq, it.Event().ID)
	}
	return covered, it.Err()
}
