package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/replay"
)

// Headers of every message the outbox publishes, besides Nats-Msg-Id (the
// event's id). Stable: subscribers may read them.
const (
	HeaderSeq    = "Pegasus-Seq"    // the event's sequence in the log, decimal
	HeaderStream = "Pegasus-Stream" // the event's stream (task id), unescaped
	HeaderType   = "Pegasus-Type"   // the event's type
)

// cursorKeyPrefix + stream name is the aux key of an outbox's cursor: the
// highest sequence JetStream acknowledged, decimal.
const cursorKeyPrefix = "fanout/cursor/"

// Outbox follows a log's committed events and publishes each one on its
// subject into a JetStream stream, exactly once and in log order (see the
// package comment). It runs until Stop.
type Outbox struct {
	log    *eventlog.Log
	opts   OutboxOptions
	nc     *nats.Conn
	js     jetstream.JetStream
	cancel context.CancelFunc
	done   chan struct{}

	published atomic.Uint64 // highest log sequence JetStream acknowledged

	mu       sync.Mutex
	err      error     // why the outbox stopped for good (ErrForeignStream)
	stored   uint64    // the cursor last written to the aux space
	storedAt time.Time // when
}

// StartOutbox starts publishing l's events. It returns once connected to
// NATS is attempted: an unreachable server or a missing stream is retried
// every RetryInterval in the background (and logged), never fatal, since
// the log, not the stream, is the truth.
func StartOutbox(l *eventlog.Log, opts OutboxOptions) (*Outbox, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(opts.URL, nats.Name("pegasusd outbox"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, fmt.Errorf("cluster: --publish %s: %w", opts.URL, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(opts.AckTimeout),
		jetstream.WithPublishAsyncMaxPending(2*opts.MaxPending))
	if err != nil {
		nc.Close()
		return nil, err
	}
	o := &Outbox{log: l, opts: opts, nc: nc, js: js, done: make(chan struct{})}
	if raw, err := l.GetAux(o.cursorKey()); err == nil {
		c, perr := strconv.ParseUint(string(raw), 10, 64)
		if perr != nil {
			nc.Close()
			return nil, fmt.Errorf("cluster: the outbox cursor %q is not a sequence: %v", raw, perr)
		}
		o.published.Store(c)
		o.stored = c
	} else if !errors.Is(err, eventlog.ErrNotFound) {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go o.run(ctx)
	return o, nil
}

func (o *Outbox) cursorKey() []byte { return []byte(cursorKeyPrefix + o.opts.Stream) }

// Published returns the highest log sequence JetStream has acknowledged
// (or, before the first acknowledgement, the stored cursor).
func (o *Outbox) Published() uint64 { return o.published.Load() }

// Done is closed when the outbox stops: after Stop, or for good on
// ErrForeignStream (Err says).
func (o *Outbox) Done() <-chan struct{} { return o.done }

// Err returns why the outbox stopped for good, or nil while it runs.
func (o *Outbox) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Stop stops reading the log, waits for the acknowledgements in flight
// (each at most AckTimeout), stores the cursor and closes the connection.
// Call it before the log closes.
func (o *Outbox) Stop() {
	o.cancel()
	<-o.done
	o.nc.Close()
}

// run publishes in sessions: each one synchronises with the stream and
// publishes until an error, after which the next starts from the stream's
// last message.
func (o *Outbox) run(ctx context.Context) {
	defer close(o.done)
	defer o.storeCursor(true)
	for {
		err := o.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrForeignStream) {
			o.mu.Lock()
			o.err = err
			o.mu.Unlock()
			o.opts.Logger.Error("fan-out stopped", "stream", o.opts.Stream, "err", err)
			return
		}
		o.opts.Logger.Warn("fan-out interrupted; resuming from the stream's last message",
			"stream", o.opts.Stream, "published", o.Published(), "err", err)
		t := time.NewTimer(o.opts.RetryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// inflight is one publish awaiting its acknowledgement.
type inflight struct {
	ack       jetstream.PubAckFuture
	seq       uint64 // the event's log sequence
	streamSeq uint64 // the stream sequence it must get
}

// session publishes from the stream's resume point until ctx ends (then
// it waits for the acknowledgements in flight) or an error.
func (o *Outbox) session(ctx context.Context) error {
	opCtx, cancelOps := context.WithTimeout(ctx, o.opts.AckTimeout)
	st, err := o.ensureStream(opCtx)
	if err != nil {
		cancelOps()
		return err
	}
	from, last, lastID, err := o.resume(opCtx, st)
	if err == nil && from > o.log.Head()+1 && o.opts.CatchUp != nil {
		// Another node published what this node's copy does not hold yet.
		err = o.opts.CatchUp(opCtx)
	}
	cancelOps()
	if err != nil {
		return err
	}
	if head := o.log.Head(); from > head+1 {
		return fmt.Errorf("%w: stream %s holds sequence %d, the log's head is %d (a stream filled from another log, "+
			"or from this one before a data loss: publish into a new stream)", ErrForeignStream, o.opts.Stream, from-1, head)
	}
	if lastID != "" {
		ev, err := o.log.GetSeq(from - 1)
		switch {
		case err == nil && ev.ID.String() != lastID:
			return fmt.Errorf("%w: stream %s holds event %s as sequence %d, the log holds %s there (a stream filled from another log: "+
				"publish into a new stream)", ErrForeignStream, o.opts.Stream, lastID, from-1, ev.ID)
		case err != nil && !errors.Is(err, eventlog.ErrNotFound):
			return err
		}
	}
	if cursor := o.Published(); from != cursor+1 {
		o.opts.Logger.Info("fan-out resumes after the stream's last message, not the cursor",
			"stream", o.opts.Stream, "cursor", cursor, "from", from)
	}
	o.published.Store(from - 1)

	// read ends on Stop (ctx) or when the acknowledgements fail.
	read, stopRead := context.WithCancel(ctx)
	defer stopRead()
	sub := o.log.Subscribe(read, from)
	defer sub.Close()
	pending := make(chan inflight, o.opts.MaxPending)
	ackErr := make(chan error, 1)
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		if err := o.await(pending); err != nil {
			ackErr <- err
			stopRead()
		}
	}()
	var readErr error
	for next := from; ; {
		ev, err := sub.Next(read)
		if err != nil {
			readErr = err
			break
		}
		if ev.Seq > next {
			// The subscription passes over holes only: retention archived
			// these events before they were published.
			o.opts.Logger.Warn("fan-out passes over events that retention archived before they were published; they are in its archive",
				"stream", o.opts.Stream, "first_seq", next, "last_seq", ev.Seq-1)
		}
		next = ev.Seq + 1
		f, err := o.js.PublishMsgAsync(o.message(ev), jetstream.WithMsgID(ev.ID.String()), jetstream.WithExpectLastSequence(last))
		if err != nil {
			readErr = err
			break
		}
		last++
		select {
		case pending <- inflight{ack: f, seq: ev.Seq, streamSeq: last}:
			continue
		case <-read.Done():
			readErr = read.Err()
		}
		break
	}
	close(pending)
	<-acked
	select {
	case err := <-ackErr:
		return err
	default:
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return readErr
}

// await waits for the acknowledgements in publish order and moves the
// cursor; it returns at the first failure, or when pending is closed and
// drained.
func (o *Outbox) await(pending <-chan inflight) error {
	for p := range pending {
		select {
		case ack := <-p.ack.Ok():
			if ack.Duplicate || ack.Sequence != p.streamSeq {
				return fmt.Errorf("cluster: event %d stored as stream sequence %d (duplicate %v), want %d",
					p.seq, ack.Sequence, ack.Duplicate, p.streamSeq)
			}
			o.published.Store(p.seq)
			o.storeCursor(false)
		case err := <-p.ack.Err():
			return fmt.Errorf("cluster: publish of event %d: %w", p.seq, err)
		}
	}
	return nil
}

// message is an event as the outbox publishes it: the one JSON form on
// its subject, with its id, sequence, stream and type in headers.
func (o *Outbox) message(ev eventlog.Event) *nats.Msg {
	data, err := replay.MarshalEvent(ev)
	if err != nil {
		// The JSON form of a stored event always encodes (its body is
		// bytes, its metadata strings); keep the envelope if not.
		data = fmt.Appendf(nil, `{"id":%q,"seq":%d,"encode_error":%q}`, ev.ID, ev.Seq, err.Error())
	}
	m := nats.NewMsg(Subject(ev.Stream, ev.Type))
	m.Data = data
	m.Header.Set(HeaderSeq, strconv.FormatUint(ev.Seq, 10))
	m.Header.Set(HeaderStream, ev.Stream)
	m.Header.Set(HeaderType, ev.Type)
	m.Header.Set("Content-Type", "application/json")
	return m
}

// ensureStream returns the outbox's stream, creating it if it does not
// exist. An existing stream is used as it is if its subjects cover
// Subjects.
func (o *Outbox) ensureStream(ctx context.Context) (jetstream.Stream, error) {
	st, err := o.js.Stream(ctx, o.opts.Stream)
	if err == nil {
		have := st.CachedInfo().Config.Subjects
		for _, s := range Subjects {
			if !slices.ContainsFunc(have, func(f string) bool { return covers(f, s) }) {
				return nil, fmt.Errorf("%w: stream %s does not capture %s (its subjects: %v); publish into a new stream",
					ErrForeignStream, o.opts.Stream, s, have)
			}
		}
		return st, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, err
	}
	return o.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: o.opts.Stream, Subjects: Subjects, Storage: jetstream.FileStorage,
		Replicas: o.opts.Replicas, Duplicates: o.opts.Duplicates,
		Description: "Pegasus events, one JSON message per event (docs/cluster.md)",
	})
}

// resume returns the next log sequence to publish, the stream's last
// sequence and the event id its last message carries: after the sequence
// in the stream's last message, or after the stored cursor when the
// stream holds no message (no id then).
func (o *Outbox) resume(ctx context.Context, st jetstream.Stream) (from, last uint64, id string, err error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, 0, "", err
	}
	last = info.State.LastSeq
	if info.State.Msgs == 0 {
		return o.Published() + 1, last, "", nil
	}
	m, err := st.GetMsg(ctx, last)
	if err != nil {
		return 0, 0, "", fmt.Errorf("cluster: reading the stream's last message %d: %w", last, err)
	}
	seq, err := strconv.ParseUint(m.Header.Get(HeaderSeq), 10, 64)
	if err != nil || seq == 0 {
		return 0, 0, "", fmt.Errorf("%w: stream %s: its last message (%s) has no %s header: another program publishes into it",
			ErrForeignStream, o.opts.Stream, m.Subject, HeaderSeq)
	}
	return seq + 1, last, m.Header.Get(nats.MsgIdHdr), nil
}

// storeCursor writes the cursor to the aux space if it moved, at most
// once per CursorInterval unless final.
func (o *Outbox) storeCursor(final bool) {
	c := o.Published()
	o.mu.Lock()
	due := c != o.stored && (final || time.Since(o.storedAt) >= o.opts.CursorInterval)
	o.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.opts.AckTimeout)
	defer cancel()
	err := o.log.WriteAux(ctx, func(b *eventlog.AuxBatch) error {
		b.Set(o.cursorKey(), strconv.AppendUint(nil, c, 10))
		return nil
	})
	if err != nil {
		o.opts.Logger.Warn("fan-out cursor not stored", "published", c, "err", err)
		return
	}
	o.mu.Lock()
	o.stored, o.storedAt = c, time.Now()
	o.mu.Unlock()
}
