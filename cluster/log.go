package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Errors of the replicated log.
var (
	// ErrUnknownOutcome is returned (wrapped) when an append was sent but
	// its acknowledgement did not arrive: it may or may not be in the
	// stream. Retrying with the same event ids is safe.
	ErrUnknownOutcome = errors.New("cluster: append outcome unknown (retry with the same event ids)")
	// ErrUnavailable is returned (wrapped) when an append could not be
	// stored for now and nothing was: no stream leader answered (an
	// election), or JetStream kept refusing its expected-version check as
	// busy with other appends to the same partition although the streams
	// stayed at the expected versions, for AckTimeout. Retrying is safe.
	ErrUnavailable = errors.New("cluster: the stream cannot take the append now (nothing was stored; retry)")
	// ErrApply is returned (wrapped) once the follower cannot write a
	// stream message into the local log; the replicated log then refuses
	// appends (the local copy no longer follows the stream).
	ErrApply = errors.New("cluster: the local copy cannot follow the stream")
)

// Headers and metadata of the replicated log. Stable.
const (
	// HeaderBatch is "i/n" on each message of an n-event append.
	HeaderBatch = "Pegasus-Batch"
	// HeaderSchema is the event's body schema (the JSON form's "schema",
	// kept exactly: the draft parser defaults a zero one).
	HeaderSchema = "Pegasus-Schema"
	// HeaderNode names the node that appended the event (LogOptions.Node):
	// for an audit of who decided what, not read by the follower.
	HeaderNode = "Pegasus-Node"
	// MetaStreamSeq is the metadata key under which the local copy keeps
	// the sequence in the JetStream stream of each event's message (the
	// events of one message share it and are consecutive in the copy):
	// what an expected version maps to (Nats-Expected-Last-Subject-Sequence)
	// and where the follower resumes.
	MetaStreamSeq = "pegasus.js_seq"
)

// LogOptions configure a ReplicatedLog.
type LogOptions struct {
	// URL is the NATS cluster, one or more comma-separated URLs. Required.
	URL string
	// Stream is the JetStream stream that is the log's source of truth,
	// created if missing. The default value is "PEGASUS_LOG".
	Stream string
	// Replicas of the stream when it is created. The default value is 3
	// when the connection knows at least 3 servers, else 1.
	Replicas int
	// Duplicates is the stream's de-duplication window by Nats-Msg-Id.
	// The default value is 2 minutes.
	Duplicates time.Duration
	// AckTimeout bounds the wait for JetStream's acknowledgement of one
	// append. The default value is 5s.
	AckTimeout time.Duration
	// Logger receives the follower's errors. The default value discards
	// them.
	Logger *slog.Logger
	// Partitions is how many partitions task streams are spread over
	// (partition.go), recorded in the stream's metadata when the stream is
	// created; an existing stream keeps the count it recorded. Zero means
	// none (no ownership, no fencing). The default value is 0.
	Partitions int
	// Node names this node in its partitions' PARTITION_OWNED events. The
	// default value is a new ULID for each OpenReplicated.
	Node string
	// KeysBucket is the JetStream key-value bucket that binds idempotency
	// keys to event ids for every node (keys.go), created if missing. The
	// default value is the stream's name followed by "_KEYS".
	KeysBucket string
	// StartTimeout bounds how long OpenReplicated waits for the NATS
	// servers and JetStream to answer (servers still starting, a meta
	// leader not yet elected), retrying with a backoff. The default value
	// is 1 minute.
	StartTimeout time.Duration
	// OneEventPerMessage writes every event as a message of its own (the
	// stream format of builds before packed messages) instead of one
	// message per stream of an append. Set it on every node while a
	// cluster is upgraded one node at a time from such a build, which
	// cannot read packed messages, and clear it once no node runs one.
	// Reading is unchanged: both forms are always read.
	OneEventPerMessage bool
}

func (o *LogOptions) ensureDefaults(nc *nats.Conn) {
	if o.Stream == "" {
		o.Stream = "PEGASUS_LOG"
	}
	if o.Replicas == 0 {
		o.Replicas = 1
		if len(nc.Servers()) >= 3 {
			o.Replicas = 3
		}
	}
	if o.Duplicates == 0 {
		o.Duplicates = 2 * time.Minute
	}
	if o.AckTimeout == 0 {
		o.AckTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Node == "" {
		o.Node = ulid.Make().String()
	}
	if o.KeysBucket == "" {
		o.KeysBucket = o.Stream + "_KEYS"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = time.Minute
	}
}

var _ eventlog.Appender = (*ReplicatedLog)(nil)

// ReplicatedLog is the clustered log (docs/cluster.md): a
// JetStream stream is the source of truth and a local eventlog.Log is
// this node's copy, written only by the ReplicatedLog's follower, in the
// stream's order. Append publishes to the stream and returns once
// JetStream acknowledged the events (replicated to a quorum) and the
// follower has written them locally, with their local positions.
type ReplicatedLog struct {
	local *eventlog.Log
	opts  LogOptions
	nc    *nats.Conn
	js    jetstream.JetStream
	st    jetstream.Stream
	// replicas is the stream's configured replica count.
	replicas int
	// parts is the partition count the stream records (0: none).
	parts int

	mu      sync.Mutex
	applied uint64        // highest stream sequence in the local copy
	changed chan struct{} // closed and replaced when applied moves or err is set
	err     error         // the follower stopped (ErrApply, or closed)
	// Per partition, as far as the local copy holds the stream: the last
	// stream sequence on its subjects, and its last PARTITION_OWNED.
	partLast []uint64
	owners   []Owner
	// keys binds idempotency keys (keys.go).
	keys jetstream.KeyValue
	// committers are the single writers of the partitions this node
	// holds (committer.go), started on first use; commits counts them.
	committers map[int]*committer
	commits    commitCounters
	// loose is the committer of streams of no partition (loose.go).
	loose *looseCommitter
	// combine sends the partitions' batches, several as one request
	// (combine.go).
	combine *combiner
	// beforeBatch, if set (tests), is called before a committer
	// publishes a batch of n appends to partition p.
	beforeBatch func(p, n int)
	// beforeCombine, if set (tests), is called before the combiner
	// publishes a request of n partitions' batches (combine.go).
	beforeCombine func(n int)
	// beforeDeliver, if set (tests), is called before the follower's
	// reader hands it a delivered message.
	beforeDeliver func()
	// beforeLoose, if set (tests), is called before the committer of
	// streams of no partition publishes a batch of n appends.
	beforeLoose func(n int)
	// sending holds the messages of this node's appends in flight, by
	// their first event's id (wire.go).
	sending sync.Map
	// pack is the most bytes of events one message carries (wire.go);
	// -1: the servers' max_payload less packHeadroom.
	pack int
	// acked carries this node's acknowledged appends to the follower,
	// which writes them into the copy without waiting for their delivery
	// (ownacked.go).
	acked chan ackedAppend
	// ctx ends when the log closes: the committers stop.
	ctx    context.Context
	held   map[int]*lease // partitions this node holds (lease.go), by the fence's epoch
	failed chan struct{}  // closed when err is set

	cancel context.CancelFunc
	done   chan struct{}
}

// OpenReplicated connects to the cluster, creates the stream and the
// idempotency key bucket if needed and starts the follower from where the
// local copy ends. local must be written only through the returned
// ReplicatedLog. Servers that do not answer yet, or a JetStream still
// electing its meta leader, are waited for with a backoff up to
// StartTimeout; several nodes may create a new cluster's stream and
// buckets at once.
func OpenReplicated(ctx context.Context, local *eventlog.Log, opts LogOptions) (*ReplicatedLog, error) {
	if opts.URL == "" {
		return nil, fmt.Errorf("%w: a NATS URL is required", ErrInvalid)
	}
	// Servers that are not up yet are retried in the background: the
	// connection comes up when the first one answers.
	nc, err := nats.Connect(opts.URL, nats.Name("pegasusd log"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, fmt.Errorf("cluster: connecting to %s: %w", opts.URL, err)
	}
	opts.ensureDefaults(nc)
	r := &ReplicatedLog{local: local, opts: opts, nc: nc, changed: make(chan struct{}), failed: make(chan struct{}), done: make(chan struct{}),
		acked: make(chan ackedAppend, maxApply), pack: -1}
	if opts.OneEventPerMessage {
		r.pack = 0
	}
	if err := r.start(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return r, nil
}

// startBackoff is the first and the longest pause between two attempts
// to reach JetStream at start.
const (
	startBackoff    = 100 * time.Millisecond
	maxStartBackoff = 2 * time.Second
)

// start opens the stream, waiting for JetStream as OpenReplicated says.
func (r *ReplicatedLog) start(ctx context.Context) error {
	deadline := time.Now().Add(r.opts.StartTimeout)
	wait := startBackoff
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, min(5*time.Second, max(time.Until(deadline), time.Millisecond)))
		err := r.open(actx)
		cancel()
		if err == nil || !startRetryable(err) || ctx.Err() != nil {
			return err
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("cluster: JetStream at %s did not answer within %v (%d attempts): %w", r.opts.URL, r.opts.StartTimeout, attempt, err)
		}
		r.opts.Logger.Warn("waiting for JetStream", "url", r.opts.URL, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, maxStartBackoff)
	}
}

// startRetryable reports whether open may succeed if tried again: the
// servers or JetStream did not answer (yet), or answered that they are
// not ready (a 5xx API error: no meta leader, the cluster forming; a
// stream that another node is creating not found yet), as
// opposed to a request JetStream refused (a 4xx: subjects that overlap
// another stream's, say), a stream that is not a Pegasus log or a copy
// that is not the stream's.
func startRetryable(err error) bool {
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrApply) || errors.Is(err, eventlog.ErrClosed) || errors.Is(err, eventlog.ErrFailed) {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// A stream another node is creating may not be found yet.
		return apiErr.Code >= 500 || apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamNotFound
	}
	return true
}

func (r *ReplicatedLog) open(ctx context.Context) error {
	var err error
	if r.js, err = jetstream.New(r.nc); err != nil {
		return err
	}
	r.st, err = r.js.Stream(ctx, r.opts.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		r.st, err = r.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: r.opts.Stream, Subjects: []string{"pegasus.log.>"}, Storage: jetstream.FileStorage,
			Replicas: r.opts.Replicas, Duplicates: r.opts.Duplicates, AllowAtomicPublish: true,
			Description: "the Pegasus event log (docs/cluster.md)",
			Metadata:    map[string]string{MetaPartitions: strconv.Itoa(r.opts.Partitions)},
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another node created it meanwhile (with its own idea of
			// the replicas, say): use that one.
			r.st, err = r.js.Stream(ctx, r.opts.Stream)
		}
	}
	if err != nil {
		return fmt.Errorf("cluster: stream %s: %w", r.opts.Stream, err)
	}
	info, err := r.st.Info(ctx)
	if err != nil {
		return fmt.Errorf("cluster: stream %s: %w", r.opts.Stream, err)
	}
	if c := info.Config; !c.AllowAtomicPublish || len(c.Subjects) != 1 || c.Subjects[0] != "pegasus.log.>" {
		return fmt.Errorf("%w: stream %s is not a Pegasus log (subjects %v, atomic batches %v)", ErrInvalid, r.opts.Stream, c.Subjects, c.AllowAtomicPublish)
	}
	if info.Config.Storage != jetstream.FileStorage {
		return fmt.Errorf("%w: stream %s keeps its messages in memory: a log must be on disk (file storage)", ErrInvalid, r.opts.Stream)
	}
	r.replicas = info.Config.Replicas
	if v, ok := info.Config.Metadata[MetaPartitions]; ok {
		if r.parts, err = strconv.Atoi(v); err != nil || r.parts < 0 {
			return fmt.Errorf("%w: stream %s records %s %q", ErrInvalid, r.opts.Stream, MetaPartitions, v)
		}
	}
	if err := r.openKeys(ctx); err != nil {
		return err
	}
	if r.applied, err = r.localStreamSeq(); err != nil {
		return err
	}
	if err := r.loadPartitions(ctx); err != nil {
		return err
	}
	if r.applied > info.State.LastSeq {
		return fmt.Errorf("%w: the local copy holds stream sequence %d, the stream %s ends at %d "+
			"(a different or re-created stream: start this node from an empty directory)", ErrApply, r.applied, r.opts.Stream, info.State.LastSeq)
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if r.applied > 0 {
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: r.applied + 1}
	}
	cons, err := r.st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("cluster: following stream %s: %w", r.opts.Stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(context.Background())
	r.ctx, r.cancel = fctx, cancel
	go r.follow(fctx, it)
	return nil
}

// localStreamSeq is the stream sequence of the local copy's last event
// (0 for an empty copy).
func (r *ReplicatedLog) localStreamSeq() (uint64, error) {
	head := r.local.Head()
	if head == 0 {
		return 0, nil
	}
	ev, err := r.local.GetSeq(head)
	if err != nil {
		return 0, err
	}
	s, err := strconv.ParseUint(ev.Metadata[MetaStreamSeq], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: the local log's event %d has no %s: it was not written by the cluster's follower", ErrApply, head, MetaStreamSeq)
	}
	return s, nil
}

// CatchUp waits until the local copy holds everything the stream held
// when it was called.
func (r *ReplicatedLog) CatchUp(ctx context.Context) error { return r.catchUp(ctx) }

// Stream is the name of the JetStream stream.
func (r *ReplicatedLog) Stream() string { return r.opts.Stream }

// Partitions is the partition count the stream records (0: none).
func (r *ReplicatedLog) Partitions() int { return r.parts }

// Node is this node's name in PARTITION_OWNED events.
func (r *ReplicatedLog) Node() string { return r.opts.Node }

// Replicas is the stream's replica count, as JetStream reported it at
// open.
func (r *ReplicatedLog) Replicas() int { return r.replicas }

// Local is this node's copy, for reads (the fold, verify, the CLI).
func (r *ReplicatedLog) Local() *eventlog.Log { return r.local }

// Applied is the highest stream sequence in the local copy.
func (r *ReplicatedLog) Applied() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// Close stops the follower and the connection; it does not close the
// local log.
func (r *ReplicatedLog) Close() error {
	r.cancel()
	<-r.done
	r.nc.Close()
	return nil
}

// maxApply bounds the stream messages the follower writes in one local
// append (one synced commit).
const maxApply = 1024

// follow writes every stream message into the local copy, in stream
// order. A reader goroutine hands messages over a buffered channel; the
// writer takes every message already waiting and writes them with one
// local AppendMulti (one commit), each append's n messages as one part.
// An append whose first event the local copy already holds (JetStream
// stored it twice, past its de-duplication window) is skipped. This
// node's own appends, once JetStream acknowledged them, are written as
// soon as everything before them in the stream is (ownacked.go); their
// messages, delivered later, are then passed over.
func (r *ReplicatedLog) follow(ctx context.Context, it jetstream.MessagesContext) {
	defer close(r.done)
	msgs := make(chan jetstream.Msg, maxApply)
	readErr := make(chan error, 1)
	go func() {
		defer close(msgs)
		for {
			m, err := it.Next()
			if err != nil {
				readErr <- err
				return
			}
			if h := r.beforeDeliver; h != nil {
				h()
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { <-ctx.Done(); it.Stop() }()
	r.mu.Lock()
	applied := r.applied
	r.mu.Unlock()
	own := ownQueue{}
	var group []eventlog.Event // the events of one append's messages read so far
	read := 0                  // and how many of its messages
	var heads []partHead       // its parts, if it is this node's (ownacked.go)
	foreign := false           // some of its messages are not this node's in flight
	for {
		var m jetstream.Msg
		ok := true
		select {
		case m, ok = <-msgs:
		case a := <-r.acked:
			// An acknowledged append of this node: write it (and any
			// that follow it) if the copy holds everything before it.
			own.add(a, applied)
			if n, err := r.applyOwn(ctx, own, &applied); err != nil {
				r.fail(err)
				return
			} else if n > 0 {
				group, read, heads, foreign = nil, 0, nil, false // a partial read of the append written
			}
			continue
		}
		if !ok {
			err := fmt.Errorf("%w: closed", ErrApply)
			select {
			case rerr := <-readErr:
				if ctx.Err() == nil {
					err = fmt.Errorf("%w: %v", ErrApply, rerr)
				}
			default:
			}
			r.fail(err)
			return
		}
		var parts []eventlog.StreamAppend
		var written []ackedAppend // the appends in parts, with their parts' heads
		var last uint64
		moved := map[int]uint64{} // partition -> its last stream sequence in what is read
		owned := map[int]Owner{}  // partition -> its last PARTITION_OWNED in what is read
		for ok {
			if sseq, err := streamSeq(m); err == nil && sseq <= applied {
				// Written already, at its acknowledgement.
			} else {
				var evs []eventlog.Event
				var i, n int
				var w *wireMsg
				if err == nil {
					evs, i, n, w, err = r.decodeMessage(m, sseq)
				}
				if err == nil && i != read+1 {
					err = fmt.Errorf("message %d is part %d/%d of an append, after %d parts", sseq, i, n, read)
				}
				if err != nil {
					r.opts.Logger.Error("the local copy stops following the stream", "err", err)
					r.fail(fmt.Errorf("%w: %v", ErrApply, err))
					return
				}
				group, read = append(group, evs...), read+1
				if w == nil {
					foreign = true
				} else if w.first || len(heads) == 0 {
					heads = append(heads, partHead{res: w.res})
				}
				if w != nil {
					heads[len(heads)-1].n += len(evs)
				}
				if read == n {
					if _, err := r.local.Get(group[0].ID); err != nil {
						parts = appendParts(parts, group)
						if foreign {
							heads = []partHead{{n: len(group)}}
						}
						written = append(written, ackedAppend{evs: group, heads: heads})
					}
					r.notePartitions(group, moved, owned)
					group, read, last, heads, foreign = nil, 0, sseq, nil, false
				}
			}
			if len(parts) >= maxApply {
				break
			}
			select {
			case m, ok = <-msgs:
			default:
				ok = false
			}
		}
		if len(parts) > 0 {
			res, err := r.local.AppendMulti(ctx, parts...)
			if err != nil {
				// The local copy's owner closes it after its last
				// append, before Close stops the follower.
				if ctx.Err() == nil && !errors.Is(err, eventlog.ErrClosed) {
					r.opts.Logger.Error("the local copy stops following the stream", "err", err)
				}
				r.fail(fmt.Errorf("%w: %v", ErrApply, err))
				return
			}
			leaveResults(written, res)
		}
		if last > 0 {
			applied = last
			r.noteApplied(last, moved, owned)
		}
		if n, err := r.applyOwn(ctx, own, &applied); err != nil {
			r.fail(err)
			return
		} else if n > 0 {
			group, read, heads, foreign = nil, 0, nil, false
		}
	}
}

// noteApplied records that the copy holds the stream up to last, with
// the partitions' moves and owners read in what was written, and wakes
// the waiters.
func (r *ReplicatedLog) noteApplied(last uint64, moved map[int]uint64, owned map[int]Owner) {
	r.mu.Lock()
	r.applied = last
	for p, seq := range moved {
		r.partLast[p] = seq
	}
	for p, o := range owned {
		r.owners[p] = o
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// streamSeq is a stream message's sequence in the stream.
func streamSeq(m jetstream.Msg) (uint64, error) {
	md, err := m.Metadata()
	if err != nil {
		return 0, err
	}
	return md.Sequence.Stream, nil
}

// notePartitions records, for the partitions of one append's events (as
// decoded, with their stream sequences), their last stream sequence and
// their last PARTITION_OWNED. A message JetStream stored twice counts too:
// JetStream's expected-sequence checks see it.
func (r *ReplicatedLog) notePartitions(evs []eventlog.Event, moved map[int]uint64, owned map[int]Owner) {
	for _, ev := range evs {
		p := PartitionOf(ev.Stream, r.parts)
		if p < 0 {
			continue
		}
		moved[p], _ = strconv.ParseUint(ev.Metadata[MetaStreamSeq], 10, 64)
		if o, ok := ownerOf(ev); ok && o.Partition == p {
			owned[p] = o
		}
	}
}

// loadPartitions reads where each partition stands in the local copy: its
// last stream sequence (asked of the stream, if the copy holds that
// message; else the follower sets it when it writes it) and its last
// PARTITION_OWNED (read from the copy).
func (r *ReplicatedLog) loadPartitions(ctx context.Context) error {
	r.partLast, r.owners, r.held = make([]uint64, r.parts), make([]Owner, r.parts), map[int]*lease{}
	for p := range r.parts {
		m, err := r.st.GetLastMsgForSubject(ctx, partitionFilter(p))
		switch {
		case err == nil && m.Sequence <= r.applied:
			r.partLast[p] = m.Sequence
		case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("cluster: stream %s, partition %d: %w", r.opts.Stream, p, err)
		}
		v, err := r.local.StreamVersion(PartitionStream(p))
		if err != nil || v == 0 {
			if err != nil {
				return err
			}
			continue
		}
		it := r.local.ReadStream(PartitionStream(p), v)
		if it.Next() {
			r.owners[p], _ = ownerOf(it.Event())
		}
		err = it.Err()
		it.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// appendParts adds one append's events to parts, one part per run of
// events on the same stream (an AppendMulti's streams, in order).
func appendParts(parts []eventlog.StreamAppend, evs []eventlog.Event) []eventlog.StreamAppend {
	start := len(parts)
	for _, ev := range evs {
		if len(parts) > start && parts[len(parts)-1].Stream == ev.Stream {
			parts[len(parts)-1].Events = append(parts[len(parts)-1].Events, ev)
			continue
		}
		parts = append(parts, eventlog.StreamAppend{Stream: ev.Stream, Expected: eventlog.Any, Events: []eventlog.Event{ev}})
	}
	return parts
}

func (r *ReplicatedLog) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
		close(r.changed)
		r.changed = make(chan struct{})
		close(r.failed)
	}
}

// Failed is closed once the local copy stopped following the stream (Err
// says why): appends are refused from then on.
func (r *ReplicatedLog) Failed() <-chan struct{} { return r.failed }

// Err is why the local copy stopped following the stream, or nil.
func (r *ReplicatedLog) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// waitApplied waits until the local copy holds stream sequence seq.
func (r *ReplicatedLog) waitApplied(ctx context.Context, seq uint64) error {
	for {
		r.mu.Lock()
		applied, err, ch := r.applied, r.err, r.changed
		r.mu.Unlock()
		if applied >= seq {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for the local copy to reach stream sequence %d: %w", seq, ctx.Err())
		}
	}
}

// catchUp waits until the local copy holds everything the stream held
// when it was called.
func (r *ReplicatedLog) catchUp(ctx context.Context) error {
	info, err := r.st.Info(ctx)
	if err != nil {
		return err
	}
	return r.waitApplied(ctx, info.State.LastSeq)
}

// decodeMessage returns the events the stream message m at sseq holds
// and its part i of n. A message this node is appending, byte for byte as
// it sent it, is not parsed again: its events are the ones it sent.
// own is the message as this node sent it, nil if it is not one of its
// appends in flight.
func (r *ReplicatedLog) decodeMessage(m jetstream.Msg, sseq uint64) (evs []eventlog.Event, i, n int, own *wireMsg, err error) {
	if evs, i, n, w := r.ownWire(m.Headers(), m.Data(), sseq); w != nil {
		return evs, i, n, w, nil
	}
	evs, i, n, err = decodeEvents(m.Headers(), m.Data(), sseq)
	return evs, i, n, nil, err
}

// Append appends evs to stream with the log's guarantees (eventlog.Append),
// through the cluster: the expected version is checked by JetStream
// (Nats-Expected-Last-Subject-Sequence on the stream's subject), event ids
// de-duplicate retries (Nats-Msg-Id, and the local id index), and several
// events are one atomic batch. It returns once JetStream acknowledged and
// the local copy holds the events; the result's sequences are local ones.
func (r *ReplicatedLog) Append(ctx context.Context, stream string, exp eventlog.ExpectedVersion, evs ...eventlog.Event) (eventlog.AppendResult, error) {
	res, err := r.AppendMulti(ctx, eventlog.StreamAppend{Stream: stream, Expected: exp, Events: evs})
	if err != nil {
		return eventlog.AppendResult{}, err
	}
	return res[0], nil
}

// AppendMulti appends to several streams atomically (eventlog.AppendMulti,
// a parent and a child task): one JetStream atomic batch, each stream's
// expected version on its first message, and one local append. A stream
// may appear once.
func (r *ReplicatedLog) AppendMulti(ctx context.Context, appends ...eventlog.StreamAppend) ([]eventlog.AppendResult, error) {
	r.mu.Lock()
	ferr := r.err
	r.mu.Unlock()
	if ferr != nil {
		return nil, ferr
	}
	parts, wire, fresh, err := r.prepare(appends)
	if err != nil {
		return nil, err
	}
	if !fresh {
		// Ids the caller chose may be a retry's.
		if res, ok, err := r.storedAll(parts); ok || err != nil {
			return res, err
		}
	}
	defer r.noteSent(wire)()
	res, err := r.appendNew(ctx, parts, wire)
	var conflict *eventlog.ConflictError
	if errors.As(err, &conflict) {
		// A retry racing its own first attempt (on this node or another:
		// a client that gave up, an acknowledgement lost) finds its
		// stream moved by the very events it carries: a replay, not a
		// conflict (or ErrIDReused if they are stored with other
		// content).
		if res, ok, serr := r.storedAll(parts); ok || serr != nil {
			return res, serr
		}
	}
	return res, err
}

// appendNew stores parts, which the local copy does not hold (yet):
// through the partition's committer if this node holds the partition of
// every part, else as one publish checked by JetStream.
func (r *ReplicatedLog) appendNew(ctx context.Context, parts []eventlog.StreamAppend, wire []wireMsg) ([]eventlog.AppendResult, error) {
	if p, ok := r.ownedPartition(parts); ok {
		o := r.commit(ctx, p, parts, wire)
		if o.err != nil || o.res != nil {
			return o.res, o.err
		}
		return r.appliedResult(ctx, parts, wire, o.last)
	}
	if r.unpartitioned(parts) {
		o := r.commitLoose(ctx, parts, wire)
		if !o.alone {
			if o.err != nil {
				return nil, o.err
			}
			return r.appliedResult(ctx, parts, wire, o.last)
		}
	}
	var release func(last uint64)
	if ps := r.heldPartitions(parts); ps != nil {
		// Over several partitions this node holds (a task and the one
		// it admits next, a parent and its child): their committers stop
		// between two batches while it is published.
		var err error
		if release, err = r.holdCommitters(ctx, ps); err != nil {
			return nil, err
		}
	}
	last, err := r.publishChecked(ctx, parts, wire)
	if release != nil {
		switch {
		case err == nil:
			release(last)
		case errors.Is(err, ErrUnknownOutcome) || ctx.Err() != nil:
			release(unknownLast)
		default:
			release(0)
		}
	}
	if err != nil {
		return nil, err
	}
	return r.appliedResult(ctx, parts, wire, last) // last 0: found stored
}

// publishChecked publishes parts as one append checked by JetStream (each
// part's expected version, a fenced part's partition), sending it again
// while JetStream refuses it as busy or no leader answers, until
// AckTimeout. It returns the stream sequence of its last message, or 0
// when the events turned out to be stored already.
func (r *ReplicatedLog) publishChecked(ctx context.Context, parts []eventlog.StreamAppend, wire []wireMsg) (uint64, error) {
	deadline := time.Now().Add(r.opts.AckTimeout)
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var last uint64
	var checks []check
	var err error
	wait := firstRetryWait
	for {
		if checks, err = r.checks(ctx, parts); err != nil {
			return 0, err
		}
		fenced := slices.ContainsFunc(checks, func(c check) bool { return c.subj != "" })
		last, err = r.publish(actx, wire, checks)
		if isWrongLastSeq(err) {
			// A real conflict, or a busy subject: on a replicated
			// stream JetStream also refuses an expected-version check
			// while another append to the same subject is being
			// replicated, whatever its outcome. A fenced check also
			// fails when another append to the partition came first,
			// or a new owner took it.
			busy, cerr := r.busy(actx, parts)
			if ferr := r.fenceLost(parts); ferr != nil {
				return 0, ferr
			}
			if cerr != nil || !busy {
				return 0, r.conflict(ctx, parts)
			}
			var apiErr *jetstream.APIError
			if fenced && errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence && actx.Err() == nil {
				continue // the partition moved on, not these streams: check again at once
			}
		} else if isDuplicateInFlight(err) {
			// The same events are being stored by another request: a
			// retry (on this node or another) of an append whose answer
			// was lost. Its outcome is this one's: wait for it.
			if !r.retryPause(ctx, deadline, &wait) {
				return 0, fmt.Errorf("%w: the same events were still being stored by another request", ErrUnknownOutcome)
			}
			if _, ok, err := r.storedAll(parts); ok || err != nil {
				return 0, err
			}
			continue
		} else if !isNoResponders(err) {
			break
		}
		// A busy subject, or no stream leader listens (an election
		// after a server stopped): nothing was stored. Send again,
		// sooner if the copy moves, until AckTimeout.
		if !r.retryPause(ctx, deadline, &wait) {
			if isWrongLastSeq(err) {
				return 0, r.conflict(ctx, parts)
			}
			return 0, fmt.Errorf("%w: stream %s has no leader: %v", ErrUnavailable, r.opts.Stream, err)
		}
	}
	return last, err
}

// appliedResult waits until the local copy holds stream sequence last,
// the append's last message, and returns the append's local positions:
// those the follower wrote them at, if it wrote them at their
// acknowledgement (ownacked.go), else as the copy holds them.
func (r *ReplicatedLog) appliedResult(ctx context.Context, parts []eventlog.StreamAppend, wire []wireMsg, last uint64) ([]eventlog.AppendResult, error) {
	if err := r.waitApplied(ctx, last); err != nil {
		return nil, err
	}
	if res, ok := writtenResults(wire, len(parts)); ok && last > 0 {
		return res, nil
	}
	res, ok, err := r.storedAll(parts)
	if !ok && err == nil {
		err = fmt.Errorf("%w: stream sequence %d is applied but the append is not in the local copy", ErrApply, last)
	}
	return res, err
}

// prepare copies the appends, gives each event an id and a time if it has
// none, checks them all before anything is published and builds the
// append's messages (wireOf: one per part, up to packLimit), once for
// every attempt. It returns the messages, in order, and whether every id
// was given here (then no earlier append can hold them).
func (r *ReplicatedLog) prepare(appends []eventlog.StreamAppend) (parts []eventlog.StreamAppend, wire []wireMsg, fresh bool, err error) {
	if len(appends) == 0 {
		return nil, nil, false, fmt.Errorf("%w: append without streams", eventlog.ErrInvalid)
	}
	parts = make([]eventlog.StreamAppend, len(appends))
	now := time.Now().UTC()
	ids, streams, n := map[ulid.ULID]bool{}, map[string]bool{}, 0
	fresh = true
	for i, sa := range appends {
		if len(sa.Events) == 0 || sa.Stream == "" || streams[sa.Stream] {
			return nil, nil, false, fmt.Errorf("%w: each part of an append needs its own stream and events", eventlog.ErrInvalid)
		}
		streams[sa.Stream] = true
		evs := append([]eventlog.Event(nil), sa.Events...)
		for j := range evs {
			if evs[j].ID == (ulid.ULID{}) {
				evs[j].ID = r.local.NewID()
			} else {
				fresh = false
			}
			if evs[j].Time.IsZero() {
				evs[j].Time = now
			}
			evs[j].Stream = sa.Stream
			if err := validate(evs[j]); err != nil {
				return nil, nil, false, err
			}
			if ids[evs[j].ID] {
				return nil, nil, false, fmt.Errorf("%w: event id %s twice in one append", eventlog.ErrInvalid, evs[j].ID)
			}
			ids[evs[j].ID] = true
		}
		n += len(evs)
		parts[i] = eventlog.StreamAppend{Stream: sa.Stream, Expected: sa.Expected, Events: evs}
	}
	if n > maxBatch {
		return nil, nil, false, fmt.Errorf("%w: %d events in one append, more than %d (JetStream's atomic batch)", eventlog.ErrInvalid, n, maxBatch)
	}
	if wire, err = wireOf(parts, r.packLimit()); err != nil {
		return nil, nil, false, err
	}
	return parts, wire, fresh, nil
}

// storedAll is stored for every part: ok if the local copy holds them all.
func (r *ReplicatedLog) storedAll(parts []eventlog.StreamAppend) ([]eventlog.AppendResult, bool, error) {
	var res []eventlog.AppendResult
	for i, p := range parts {
		pr, ok, err := r.stored(p.Events)
		if err != nil || (!ok && i == 0) {
			return nil, false, err
		}
		if !ok {
			return nil, false, fmt.Errorf("%w: partial replay of an append", eventlog.ErrIDReused)
		}
		res = append(res, pr)
	}
	return res, true, nil
}

// maxBatch is the most events one Append takes: nats-server's default
// limit of an atomic batch.
const maxBatch = 1000

// maxEventBytes is eventlog's default Options.MaxEventBytes: the largest
// encoded event every node's local copy accepts.
const maxEventBytes = 4 << 20

// validate refuses, before anything is published, an event the local
// copies would refuse: once in the stream, a bad event would stop every
// node's follower. It checks the record's limits with the follower's
// metadata key added.
func validate(ev eventlog.Event) error {
	if _, ok := ev.Metadata[MetaStreamSeq]; ok {
		return fmt.Errorf("%w: metadata key %q is the cluster's", eventlog.ErrInvalid, MetaStreamSeq)
	}
	md := make(map[string]string, len(ev.Metadata)+1)
	for k, v := range ev.Metadata {
		md[k] = v
	}
	md[MetaStreamSeq] = "18446744073709551615"
	ev.Metadata = md
	rec, err := eventlog.EncodeRecord(ev)
	if err != nil {
		return err
	}
	if len(rec) > maxEventBytes {
		return fmt.Errorf("%w: event of type %q is %d bytes, more than %d", eventlog.ErrInvalid, ev.Type, len(rec), maxEventBytes)
	}
	return nil
}

// sameEvent reports whether a stored event is a retry of ev: the content
// eventlog compares for idempotency (stream, type, schema, causation,
// metadata but the cluster's key, body).
func sameEvent(stored, ev eventlog.Event) bool {
	if stored.Stream != ev.Stream || stored.Type != ev.Type || stored.Schema != ev.Schema ||
		stored.Causation != ev.Causation || string(stored.Body) != string(ev.Body) ||
		len(stored.Metadata) != len(ev.Metadata)+1 {
		return false
	}
	for k, v := range ev.Metadata {
		if sv, ok := stored.Metadata[k]; !ok || sv != v {
			return false
		}
	}
	return true
}

// stored returns the result of an earlier append of the same events, if
// the local copy holds them all (ok), or ErrIDReused if it holds some, or
// holds one with other content.
func (r *ReplicatedLog) stored(evs []eventlog.Event) (eventlog.AppendResult, bool, error) {
	var res eventlog.AppendResult
	for i, ev := range evs {
		got, err := r.local.Get(ev.ID)
		if errors.Is(err, eventlog.ErrNotFound) {
			if i > 0 {
				return res, false, fmt.Errorf("%w: partial replay of an append", eventlog.ErrIDReused)
			}
			return res, false, nil
		}
		if err != nil {
			return res, false, err
		}
		if !sameEvent(got, ev) {
			return res, false, fmt.Errorf("%w: event %s is stored with other content", eventlog.ErrIDReused, ev.ID)
		}
		res.Events = append(res.Events, got)
	}
	res.FirstSeq, res.LastSeq = res.Events[0].Seq, res.Events[len(res.Events)-1].Seq
	res.Version = res.Events[len(res.Events)-1].Version
	return res, true, nil
}

// expectedSubjectSeq maps an expected version to the stream sequence of
// the stream's event at that version (-1: no check). The local copy must
// hold that event; if it is behind, it catches up with the stream first.
func (r *ReplicatedLog) expectedSubjectSeq(ctx context.Context, stream string, exp eventlog.ExpectedVersion) (int64, error) {
	if exp == eventlog.Any {
		return -1, nil
	}
	if exp < 0 {
		return 0, fmt.Errorf("%w: expected version %d", eventlog.ErrInvalid, exp)
	}
	want := uint64(exp)
	cur, err := r.local.StreamVersion(stream)
	if err != nil {
		return 0, err
	}
	if cur < want {
		if err := r.catchUp(ctx); err != nil {
			return 0, err
		}
		if cur, err = r.local.StreamVersion(stream); err != nil {
			return 0, err
		}
	}
	if cur != want {
		return 0, &eventlog.ConflictError{Stream: stream, Expected: exp, Current: cur}
	}
	if want == 0 {
		return 0, nil
	}
	it := r.local.ReadStream(stream, want)
	defer it.Close()
	if !it.Next() {
		if err := it.Err(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: stream %q version %d vanished", ErrApply, stream, want)
	}
	s, err := strconv.ParseInt(it.Event().Metadata[MetaStreamSeq], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: event %d has no %s", ErrApply, it.Event().Seq, MetaStreamSeq)
	}
	return s, nil
}

// check is a part's expected-sequence check: seq on its own subject, or,
// for a fenced part, on subj (its partition's subjects); seq -1 is none.
type check struct {
	seq  int64
	subj string
}

// check maps a part's expected version to its check. An append at an
// expected version to a partitioned stream is checked against the whole
// partition: its version is checked in the local copy, which holds the
// partition up to the sequence the check then expects of the partition's
// subjects (partition.go). For a partition this node holds that is the
// fence; for the others it is what keeps the fence sound: JetStream
// serialises in-flight checks by the subject they name, so a check on
// one task's own subject would not stop the owner's partition check from
// passing while that append is still being replicated, and both would be
// stored. Creations (NoStream) and Any appends need no fence.
func (r *ReplicatedLog) check(ctx context.Context, sa eventlog.StreamAppend) (check, error) {
	if p := PartitionOf(sa.Stream, r.parts); p >= 0 && sa.Expected > 0 {
		r.mu.Lock()
		l, last := r.held[p], r.partLast[p]
		var err error
		if l != nil {
			err = r.fenceErrLocked(p, l)
		}
		r.mu.Unlock()
		if err != nil {
			return check{}, err
		}
		if _, err := r.expectedSubjectSeq(ctx, sa.Stream, sa.Expected); err != nil {
			return check{}, err
		}
		return check{seq: int64(last), subj: partitionFilter(p)}, nil
	}
	seq, err := r.expectedSubjectSeq(ctx, sa.Stream, sa.Expected)
	return check{seq: seq}, err
}

// checks is the check of each part (check).
func (r *ReplicatedLog) checks(ctx context.Context, parts []eventlog.StreamAppend) ([]check, error) {
	cs := make([]check, len(parts))
	for i, sa := range parts {
		var err error
		if cs[i], err = r.check(ctx, sa); err != nil {
			return nil, err
		}
	}
	return cs, nil
}

// fenceLost is the ErrFenced of the first fenced part whose partition
// this node no longer holds, or nil.
func (r *ReplicatedLog) fenceLost(parts []eventlog.StreamAppend) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sa := range parts {
		if p := PartitionOf(sa.Stream, r.parts); p >= 0 && sa.Expected > 0 && r.held[p] != nil {
			if err := r.fenceErrLocked(p, r.held[p]); err != nil {
				return err
			}
		}
	}
	return nil
}

// fenceErrLocked is ErrFenced if this node's lease on p is lost or the
// copy's last PARTITION_OWNED of p is not its own. r.mu is held.
func (r *ReplicatedLog) fenceErrLocked(p int, l *lease) error {
	if o := r.owners[p]; l.lost || o.Node != r.opts.Node || o.Epoch != l.epoch {
		return fenceError(p, o)
	}
	return nil
}

// busy reports whether, once the local copy holds what the stream holds,
// every part's stream is still at its expected version: JetStream refused
// the append because the subject was busy, not because it moved.
func (r *ReplicatedLog) busy(ctx context.Context, parts []eventlog.StreamAppend) (bool, error) {
	if err := r.catchUp(ctx); err != nil {
		return false, err
	}
	for _, p := range parts {
		if p.Expected == eventlog.Any {
			continue
		}
		cur, err := r.local.StreamVersion(p.Stream)
		if err != nil || cur != uint64(p.Expected) {
			return false, err
		}
	}
	return true, nil
}

// conflict builds the ConflictError of a refused append: for the first
// part whose stream is not at its expected version once the local copy
// has caught up. On a replicated stream JetStream refuses an append that
// conflicts with one still being replicated, so the local copy waits (at
// most AckTimeout) for that one to arrive; if it never commits (every
// stream still at its expected version), the refusal was not a conflict
// and it returns ErrUnavailable: nothing was stored, retry.
func (r *ReplicatedLog) conflict(ctx context.Context, parts []eventlog.StreamAppend) error {
	wctx, cancel := context.WithTimeout(ctx, r.opts.AckTimeout)
	defer cancel()
	for {
		if err := r.catchUp(wctx); err != nil && ctx.Err() != nil {
			return err
		}
		var first *eventlog.ConflictError
		for _, p := range parts {
			if p.Expected == eventlog.Any {
				continue
			}
			cur, err := r.local.StreamVersion(p.Stream)
			if err != nil {
				return err
			}
			c := &eventlog.ConflictError{Stream: p.Stream, Expected: p.Expected, Current: cur}
			if cur != uint64(p.Expected) {
				return c
			}
			if first == nil {
				first = c
			}
		}
		if first == nil || wctx.Err() != nil {
			if first == nil {
				return fmt.Errorf("%w: JetStream refused an append without expected versions", ErrApply)
			}
			// Not a conflict: nothing moved the streams. JetStream
			// refused the check as busy (other appends to the
			// partition in flight) until the time ran out.
			return fmt.Errorf("%w: stream %q is still at version %d, its check refused as busy or the copy behind", ErrUnavailable, first.Stream, first.Current)
		}
		if err := r.waitApplied(wctx, r.Applied()+1); err != nil && ctx.Err() != nil {
			return err
		}
	}
}

// publish sends an append's messages (wireOf: its parts' events, each
// message on its stream's subject), the first of each part with the
// part's check (checks, one per part, in order); several go as one
// atomic batch. It returns the stream sequence of the last.
func (r *ReplicatedLog) publish(ctx context.Context, wire []wireMsg, checks []check) (uint64, error) {
	n := len(wire)
	batchID := ulid.Make().String()
	var ack pubAck
	pi := -1 // the part of wire[k]
	for k, w := range wire {
		if w.first {
			pi++
		}
		m := nats.NewMsg(subjectOf(w.stream, r.parts))
		m.Data = w.data
		w.setHeader(m.Header, k+1, n)
		m.Header.Set(HeaderNode, r.opts.Node)
		if c := checks[pi]; w.first && c.seq >= 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatInt(c.seq, 10))
			if c.subj != "" {
				m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, c.subj)
			}
		}
		if n > 1 {
			m.Header.Set("Nats-Batch-Id", batchID)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(k+1))
			if k+1 < n {
				if err := r.nc.PublishMsg(m); err != nil {
					return 0, err
				}
				continue
			}
			m.Header.Set("Nats-Batch-Commit", "1")
		}
		resp, err := r.nc.RequestMsgWithContext(ctx, m)
		if errors.Is(err, nats.ErrNoResponders) {
			return 0, err
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
		}
		if err := json.Unmarshal(resp.Data, &ack); err != nil {
			return 0, fmt.Errorf("%w: %v", ErrUnknownOutcome, err)
		}
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	if !ack.Duplicate {
		r.noteAcked(wire, ack.Seq)
	}
	return ack.Seq, nil
}

// pubAck is JetStream's answer to a publish.
type pubAck struct {
	Seq       uint64              `json:"seq"`
	Duplicate bool                `json:"duplicate"`
	Error     *jetstream.APIError `json:"error"`
}

// jsErrCodeDuplicateInFlight is JetStream's refusal of a message whose
// Nats-Msg-Id is being stored by another publish still in flight.
const jsErrCodeDuplicateInFlight jetstream.ErrorCode = 10158

func isDuplicateInFlight(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeDuplicateInFlight
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
