package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// LeaseOptions configure a node's leases on partitions.
type LeaseOptions struct {
	// Bucket is the JetStream key-value bucket of the leases, one key per
	// partition, created if missing (with the log stream's replicas). The
	// default value is "PEGASUS_LEASES".
	Bucket string
	// TTL is how long a lease lasts without renewal, recorded in the
	// bucket when it is created (an existing bucket keeps its own). The
	// default value is 10s.
	TTL time.Duration
	// Renew is how often the node renews its leases and looks for free
	// partitions. The default value is a third of the bucket's TTL.
	Renew time.Duration
}

// lease is a partition this node holds.
type lease struct {
	epoch   uint64 // the key's revision when the node created it
	rev     uint64 // its latest revision (renewals)
	renewed time.Time
	lost    bool
}

// Leases keeps this node's leases on partitions (docs/cluster.md): every
// Renew it renews those it holds (a compare-and-set update at the last
// revision) and takes free ones (a create, which fails if the key
// exists); a lease not renewed for the bucket's TTL expires and another
// node takes it. Taking partition p, the node appends PARTITION_OWNED to
// p's stream, then holds p (its appends to p's tasks are fenced from then
// on) and calls the acquired callback. A lease found taken over or
// expired (its update refused) is lost: the node's
// appends to that partition are refused from then on (ErrFenced) and Lost
// is closed; the node should stop.
type Leases struct {
	r        *ReplicatedLog
	kv       jetstream.KeyValue
	ttl      time.Duration
	renew    time.Duration
	acquired func(p int)

	takeMu sync.Mutex // held while taking a partition
	noTake bool       // StopTaking was called

	lostOnce sync.Once
	lost     chan struct{}
	paused   chan struct{} // tests: closed to stop renewing and acquiring
	cancel   context.CancelFunc
	done     chan struct{}
}

// StartLeases opens (or creates) the lease bucket and starts taking and
// renewing leases on the stream's partitions. acquired is called, from
// the leases' goroutine, each time this node takes a partition, once its
// PARTITION_OWNED is in the local copy. The log must have partitions.
func (r *ReplicatedLog) StartLeases(ctx context.Context, opts LeaseOptions, acquired func(p int)) (*Leases, error) {
	if r.parts == 0 {
		return nil, fmt.Errorf("%w: stream %s has no partitions", ErrInvalid, r.opts.Stream)
	}
	if opts.Bucket == "" {
		opts.Bucket = "PEGASUS_LEASES"
	}
	if opts.TTL == 0 {
		opts.TTL = 10 * time.Second
	}
	kv, err := r.js.KeyValue(ctx, opts.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = r.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: opts.Bucket, TTL: opts.TTL, Replicas: r.replicas,
			Description: "Pegasus partition leases (docs/cluster.md)"})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = r.js.KeyValue(ctx, opts.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: lease bucket %s: %w", opts.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: lease bucket %s: %w", opts.Bucket, err)
	}
	if st.TTL() <= 0 {
		return nil, fmt.Errorf("%w: lease bucket %s has no TTL", ErrInvalid, opts.Bucket)
	}
	l := &Leases{r: r, kv: kv, ttl: st.TTL(), renew: opts.Renew, acquired: acquired,
		lost: make(chan struct{}), paused: make(chan struct{}), done: make(chan struct{})}
	if l.renew <= 0 {
		l.renew = l.ttl / 3
	}
	lctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(lctx)
	return l, nil
}

// TTL is the leases' time to live, as the bucket records it.
func (l *Leases) TTL() time.Duration { return l.ttl }

func leaseKey(p int) string { return "partition." + strconv.Itoa(p) }

func (l *Leases) run(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.renew)
	defer t.Stop()
	for {
		select {
		case <-l.paused:
			<-ctx.Done()
			return
		default:
		}
		l.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// step renews the leases held and takes free partitions.
func (l *Leases) step(ctx context.Context) {
	r := l.r
	for p := range r.parts {
		if ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, l.renew)
		r.mu.Lock()
		h := r.held[p]
		var rev uint64
		if h != nil {
			rev = h.rev
		}
		r.mu.Unlock()
		if h != nil {
			l.renewOne(rctx, p, rev)
		} else {
			l.take(rctx, p)
		}
		cancel()
	}
}

func (l *Leases) renewOne(ctx context.Context, p int, rev uint64) {
	r := l.r
	next, err := l.kv.Update(ctx, leaseKey(p), []byte(r.opts.Node), rev)
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.held[p]
	switch {
	case h.lost:
	case err == nil:
		h.rev, h.renewed = next, time.Now()
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		l.loseLocked(p, err)
	default:
		// The bucket is unreachable: keep trying. If the lease expires
		// meanwhile, the next update says so; and if another node took
		// the partition, this node's appends are fenced anyway.
		r.opts.Logger.Warn("renewing a partition lease failed; retrying", "partition", p, "err", err,
			"since", time.Since(h.renewed).Round(time.Millisecond))
	}
}

// loseLocked marks p lost: the node's appends to it are refused from now
// on. r.mu is held.
func (l *Leases) loseLocked(p int, err error) {
	l.r.held[p].lost = true
	l.r.opts.Logger.Error("lost the lease on a partition: another node may own it; this node's appends to it are refused", "partition", p, "err", err)
	l.lostOnce.Do(func() { close(l.lost) })
}

// take tries to create p's lease (or to take over one in this node's
// name: Node names must be unique among running nodes); on success it
// appends PARTITION_OWNED and holds p.
func (l *Leases) take(ctx context.Context, p int) {
	l.takeMu.Lock()
	defer l.takeMu.Unlock()
	if l.noTake {
		return
	}
	r := l.r
	epoch, err := l.kv.Create(ctx, leaseKey(p), []byte(r.opts.Node))
	if errors.Is(err, jetstream.ErrKeyExists) {
		// A lease in this node's name is an earlier run's (killed before
		// it expired): take it over at its revision, as a new epoch.
		if e, gerr := l.kv.Get(ctx, leaseKey(p)); gerr == nil && string(e.Value()) == r.opts.Node {
			epoch, err = l.kv.Update(ctx, leaseKey(p), []byte(r.opts.Node), e.Revision())
		}
	}
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			r.opts.Logger.Debug("taking a partition lease failed", "partition", p, "err", err)
		}
		return
	}
	if _, err := r.Append(ctx, PartitionStream(p), eventlog.Any, ownedEvent(Owner{Partition: p, Node: r.opts.Node, Epoch: epoch})); err != nil {
		r.opts.Logger.Warn("recording a partition's new owner failed; giving the lease back", "partition", p, "err", err)
		_ = l.kv.Delete(context.WithoutCancel(ctx), leaseKey(p), jetstream.LastRevision(epoch))
		return
	}
	r.mu.Lock()
	r.held[p] = &lease{epoch: epoch, rev: epoch, renewed: time.Now()}
	r.mu.Unlock()
	r.opts.Logger.Info("took a partition lease", "partition", p, "epoch", epoch)
	if l.acquired != nil {
		l.acquired(p)
	}
}

// StopTaking stops taking free partitions (it waits for a take under
// way); the leases held are still renewed. Call it when the node starts
// to stop, before its local copy closes.
func (l *Leases) StopTaking() {
	l.takeMu.Lock()
	defer l.takeMu.Unlock()
	l.noTake = true
}

// Owns reports whether this node holds the partition of a task stream
// (and has not lost it): whether it runs the task.
func (l *Leases) Owns(stream string) bool {
	p := PartitionOf(stream, l.r.parts)
	if p < 0 {
		return false
	}
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	h := l.r.held[p]
	return h != nil && !h.lost
}

// Held returns the partitions this node holds, in order.
func (l *Leases) Held() []int {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	var ps []int
	for p := range l.r.parts {
		if h := l.r.held[p]; h != nil && !h.lost {
			ps = append(ps, p)
		}
	}
	return ps
}

// Lost is closed once a lease this node held was lost.
func (l *Leases) Lost() <-chan struct{} { return l.lost }

// pause stops renewing and taking leases, as a paused process would
// (tests).
func (l *Leases) pause() { close(l.paused) }

// Close stops renewing and gives the leases held back (a delete at their
// last revision), so that other nodes take the partitions at once. Call
// it once this node no longer appends to them.
func (l *Leases) Close(ctx context.Context) {
	l.cancel()
	<-l.done
	r := l.r
	r.mu.Lock()
	revs := map[int]uint64{}
	for p, h := range r.held {
		if !h.lost {
			revs[p] = h.rev
			h.lost = true
		}
	}
	r.mu.Unlock()
	for p, rev := range revs {
		if err := l.kv.Delete(ctx, leaseKey(p), jetstream.LastRevision(rev)); err != nil {
			r.opts.Logger.Warn("giving a partition lease back failed; it expires after its TTL", "partition", p, "err", err)
		}
	}
}
