package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// NoBalance makes the node take every free partition, so that the
	// first node up holds them all and the others take over only when it
	// stops or dies. The default value is false: live nodes share the
	// partitions (each holds at most its share, ceil(partitions / live
	// nodes), and gives back what is above it).
	NoBalance bool
	// Release is called, in a goroutine of its own, when the node gives a
	// partition back to balance them: it must stop running the
	// partition's tasks and return once none runs (agent.Disown). The
	// lease is renewed, and the node's appends to the partition fenced,
	// until it returns; only then is the lease deleted. The default value
	// is nil: nothing to stop.
	Release func(ctx context.Context, p int)
	// Singletons are jobs that one node of the cluster runs at a time
	// (the fan-out): each under its own lease in the bucket. The default
	// value is none.
	Singletons []Singleton
}

// Singleton is a job one node at a time runs, while it holds the lease
// under the key Name (not "partition.<n>" nor "node.<name>"). Nothing
// fences it: the job must make two runs at once harmless itself (the
// outbox does: every publish carries the stream's expected last
// sequence).
type Singleton struct {
	Name string
	// Start is called, from the leases' goroutine, when this node takes
	// the lease. It must not block. If it fails, the lease is given back
	// (and taken again at a later renewal, by this node or another).
	Start func() error
	// Stop is called when the node loses the lease or gives it back; it
	// returns once the job stopped. The lease is taken again only after.
	Stop func()
}

// lease is a partition this node holds.
type lease struct {
	epoch   uint64 // the key's revision when the node created it
	rev     uint64 // its latest revision (renewals)
	renewed time.Time
	lost    bool
	// releasing: the node gives the partition back (balancing); it no
	// longer runs its tasks. released is closed once none runs.
	releasing bool
	released  chan struct{}
}

// runs reports whether the node runs the partition's tasks under this
// lease: held, not lost, not being given back. r.mu is held.
func (h *lease) runs() bool { return h != nil && !h.lost && !h.releasing }

// singleState is what the leases' goroutine knows of one singleton.
type singleState struct {
	rev      uint64        // the lease's latest revision; 0: not held
	stopping chan struct{} // closed once Stop returned after a loss; nil: never stopped
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
	opts     LeaseOptions
	acquired func(p int)
	singleMu sync.Mutex    // held while the singletons are renewed, taken or stopped
	singles  []singleState // by index in opts.Singletons

	takeMu sync.Mutex // held while taking a partition
	noTake bool       // StopTaking was called

	live      atomic.Int64  // live nodes as last counted (announce); 0: unknown
	announced chan struct{} // closed when the counting goroutine returns

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
	if r.parts == 0 && len(opts.Singletons) == 0 {
		return nil, fmt.Errorf("%w: stream %s has no partitions", ErrInvalid, r.opts.Stream)
	}
	if err := ValidateNode(r.opts.Node); err != nil {
		return nil, err
	}
	for _, s := range opts.Singletons {
		if !validKey(s.Name) || strings.HasPrefix(s.Name, "partition.") || strings.HasPrefix(s.Name, "node.") {
			return nil, fmt.Errorf("%w: singleton lease key %q", ErrInvalid, s.Name)
		}
	}
	if opts.Bucket == "" {
		opts.Bucket = "PEGASUS_LEASES"
	}
	if opts.TTL == 0 {
		opts.TTL = 10 * time.Second
	}
	kv, err := r.openBucket(ctx, jetstream.KeyValueConfig{Bucket: opts.Bucket, TTL: opts.TTL,
		Description: "Pegasus partition leases (docs/cluster.md)"})
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
	l := &Leases{r: r, kv: kv, ttl: st.TTL(), renew: opts.Renew, opts: opts, acquired: acquired,
		singles: make([]singleState, len(opts.Singletons)),
		lost:    make(chan struct{}), paused: make(chan struct{}), done: make(chan struct{}), announced: make(chan struct{})}
	if l.renew <= 0 {
		l.renew = l.ttl / 3
	}
	r.mu.Lock()
	for p, h := range r.held {
		if h.lost { // an earlier Leases' (closed): free to take again
			delete(r.held, p)
		}
	}
	r.mu.Unlock()
	lctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.live.Store(int64(l.announce(ctx)))
	go l.every(lctx, l.announced, l.count)
	go l.every(lctx, l.done, l.step)
	return l, nil
}

// openBucket opens the key-value bucket cfg names, or creates it as cfg
// says with the log stream's replicas (another node may create it
// meanwhile: then it is opened). An existing bucket keeps its own
// settings.
func (r *ReplicatedLog) openBucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := r.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg.Replicas = r.replicas
		kv, err = r.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = r.js.KeyValue(ctx, cfg.Bucket)
		}
	}
	return kv, err
}

// TTL is the leases' time to live, as the bucket records it.
func (l *Leases) TTL() time.Duration { return l.ttl }

func leaseKey(p int) string { return "partition." + strconv.Itoa(p) }

// nodeKey is where a live node announces itself (renewed every step,
// expiring with the bucket's TTL).
func nodeKey(node string) string { return "node." + node }

// ValidateNode refuses a node name that cannot be a key of the lease
// bucket (it names the node's announcement, node.<name>).
func ValidateNode(name string) error {
	if !validKey(name) {
		return fmt.Errorf("%w: node name %q (letters, digits, '-', '_', '=' and inner dots)", ErrInvalid, name)
	}
	return nil
}

// validKey reports whether s is a key of the bucket made of letters,
// digits, '-', '_', '=' and dots between them.
func validKey(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_=.", c)) {
			return false
		}
	}
	return true
}

// every calls f at once and then every Renew, until ctx ends or the
// leases are paused, and closes done.
func (l *Leases) every(ctx context.Context, done chan struct{}, f func(context.Context)) {
	defer close(done)
	t := time.NewTicker(l.renew)
	defer t.Stop()
	for {
		select {
		case <-l.paused:
			<-ctx.Done()
			return
		default:
		}
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// count renews the node's announcement and counts the live nodes: apart
// from the leases' renewals (step), which a slow listing must not delay.
// A count that fails keeps the last one (step takes nothing while none
// is known): on a loaded cluster a failed listing now and then must not
// stop the balancing.
func (l *Leases) count(ctx context.Context) {
	if n := l.announce(ctx); n > 0 {
		l.live.Store(int64(n))
	}
}

// step renews the leases held, gives back the partitions above the
// node's share (by the live nodes last counted) and takes free ones up
// to it, then renews or takes the singletons.
func (l *Leases) step(ctx context.Context) {
	r := l.r
	live := int(l.live.Load())
	defer l.stepSingletons(ctx)
	var mine []int // partitions held and not being given back
	// Every lease is renewed at once, within one Renew: one after the
	// other, a bucket slow to answer (an election after a server stopped)
	// would let the last ones expire.
	rctx, cancel := context.WithTimeout(ctx, l.renew)
	var renewing sync.WaitGroup
	for p := range r.parts {
		if ctx.Err() != nil {
			break
		}
		r.mu.Lock()
		h := r.held[p]
		var rev uint64
		if h != nil {
			rev = h.rev
		}
		r.mu.Unlock()
		if h == nil {
			continue
		}
		if h.releasing {
			select {
			case <-h.released:
				l.giveBack(ctx, p)
				continue
			default:
			}
		}
		renewing.Go(func() { l.renewOne(rctx, p, rev) })
		mine = append(mine, p)
	}
	renewing.Wait()
	cancel()
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	mine = slices.DeleteFunc(mine, func(p int) bool { return !r.held[p].runs() })
	r.mu.Unlock()
	share := r.parts
	if !l.opts.NoBalance {
		if live == 0 {
			return // the live nodes are unknown: keep what is held
		}
		share = (r.parts + live - 1) / live
	}
	for len(mine) > share {
		l.release(ctx, mine[len(mine)-1])
		mine = mine[:len(mine)-1]
	}
	n := len(mine)
	// Taking, one partition after the other, gets one Renew in all: the
	// next renewals must not wait behind slow takes (a copy catching up
	// after a server stopped); what is left is taken at the next step.
	tctx, cancel := context.WithTimeout(ctx, l.renew)
	defer cancel()
	for p := 0; p < r.parts && n < share && tctx.Err() == nil; p++ {
		r.mu.Lock()
		free := r.held[p] == nil
		r.mu.Unlock()
		if !free {
			continue
		}
		if l.take(tctx, p) {
			n++
		}
	}
}

// announce renews this node's announcement and returns how many nodes
// are live (announced within the TTL), or 0 if that is unknown.
func (l *Leases) announce(ctx context.Context) int {
	if l.opts.NoBalance || l.r.parts == 0 {
		return 0
	}
	// Up to the TTL, after which the announcement would have expired
	// anyway: a listing slower than Renew is still a count.
	ctx, cancel := context.WithTimeout(ctx, l.ttl)
	defer cancel()
	if _, err := l.kv.Put(ctx, nodeKey(l.r.opts.Node), []byte(l.r.opts.Node)); err != nil {
		l.r.opts.Logger.Warn("announcing this node failed; partitions are not balanced until it works", "err", err)
		return 0
	}
	keys, err := l.kv.ListKeysFiltered(ctx, nodeKey(">"))
	if err != nil {
		l.r.opts.Logger.Warn("listing the live nodes failed", "err", err)
		return 0
	}
	defer keys.Stop()
	nodes := map[string]bool{}
	for k := range keys.Keys() {
		nodes[k] = true
	}
	if ctx.Err() != nil || !nodes[nodeKey(l.r.opts.Node)] {
		return 0
	}
	return len(nodes)
}

// release starts giving p back: its tasks stop running here (Owns says
// no, Release stops what runs) while the lease is still renewed and the
// node's appends to p fenced; a later step deletes the lease once
// Release returned.
func (l *Leases) release(ctx context.Context, p int) {
	r := l.r
	r.mu.Lock()
	h := r.held[p]
	h.releasing, h.released = true, make(chan struct{})
	r.mu.Unlock()
	r.opts.Logger.Info("giving a partition back to balance the partitions over the live nodes", "partition", p)
	go func() {
		defer close(h.released)
		if l.opts.Release != nil {
			l.opts.Release(ctx, p)
		}
	}()
}

// giveBack deletes the lease on p, whose tasks no longer run here: from
// now on the node appends to p as any node that does not hold it.
func (l *Leases) giveBack(ctx context.Context, p int) {
	r := l.r
	r.mu.Lock()
	h := r.held[p]
	delete(r.held, p)
	r.mu.Unlock()
	if h.lost {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, l.renew)
	defer cancel()
	if err := l.kv.Delete(dctx, leaseKey(p), jetstream.LastRevision(h.rev)); err != nil {
		r.opts.Logger.Warn("giving a partition lease back failed; it expires after its TTL", "partition", p, "err", err)
		return
	}
	r.opts.Logger.Info("gave a partition lease back", "partition", p)
}

// stepSingletons renews the singletons' leases held and takes free ones.
func (l *Leases) stepSingletons(ctx context.Context) {
	l.singleMu.Lock()
	defer l.singleMu.Unlock()
	for i, s := range l.opts.Singletons {
		st := &l.singles[i]
		rctx, cancel := context.WithTimeout(ctx, l.renew)
		switch {
		case st.rev != 0:
			rev, err := l.kv.Update(rctx, s.Name, []byte(l.r.opts.Node), st.rev)
			switch {
			case err == nil:
				st.rev = rev
			case leaseGone(err):
				l.r.opts.Logger.Warn("lost a singleton's lease: another node runs it now", "lease", s.Name, "err", err)
				st.rev, st.stopping = 0, make(chan struct{})
				go func(done chan struct{}) { defer close(done); s.Stop() }(st.stopping)
			default:
				l.r.opts.Logger.Warn("renewing a singleton's lease failed; retrying", "lease", s.Name, "err", err)
			}
		case l.noTaking():
		case st.stopping == nil || isClosed(st.stopping):
			rev, err := l.create(rctx, s.Name)
			if err != nil {
				break
			}
			if err := s.Start(); err != nil {
				l.r.opts.Logger.Error("a singleton did not start; giving its lease back", "lease", s.Name, "err", err)
				_ = l.kv.Delete(rctx, s.Name, jetstream.LastRevision(rev))
				break
			}
			st.rev = rev
			l.r.opts.Logger.Info("took a singleton's lease", "lease", s.Name)
		}
		cancel()
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (l *Leases) noTaking() bool {
	l.takeMu.Lock()
	defer l.takeMu.Unlock()
	return l.noTake
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
	case leaseGone(err):
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

// create creates the lease key in this node's name, or takes over one
// already in its name (an earlier run's, killed before it expired) at its
// revision, as a new epoch. It returns the revision, or ErrKeyExists when
// another node holds the key.
func (l *Leases) create(ctx context.Context, key string) (uint64, error) {
	node := []byte(l.r.opts.Node)
	rev, err := l.kv.Create(ctx, key, node)
	if errors.Is(err, jetstream.ErrKeyExists) {
		if e, gerr := l.kv.Get(ctx, key); gerr == nil && string(e.Value()) == l.r.opts.Node {
			rev, err = l.kv.Update(ctx, key, node, e.Revision())
		}
	}
	return rev, err
}

// leaseGone reports whether a renewal's error says the lease is no longer
// this node's (another revision, or expired or deleted), rather than that
// the bucket could not be reached.
func leaseGone(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)
}

// take tries to create p's lease (or to take over one in this node's
// name: Node names must be unique among running nodes); on success it
// appends PARTITION_OWNED and holds p.
func (l *Leases) take(ctx context.Context, p int) bool {
	l.takeMu.Lock()
	defer l.takeMu.Unlock()
	if l.noTake {
		return false
	}
	r := l.r
	epoch, err := l.create(ctx, leaseKey(p))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			r.opts.Logger.Debug("taking a partition lease failed", "partition", p, "err", err)
		}
		return false
	}
	// At the partition stream's version: a partition check, which an
	// old owner's fenced check in flight at the same time cannot pass
	// (check).
	var v uint64
	err = r.catchUp(ctx)
	if err == nil {
		v, err = r.local.StreamVersion(PartitionStream(p))
	}
	if err == nil {
		_, err = r.Append(ctx, PartitionStream(p), eventlog.Exactly(v), ownedEvent(Owner{Partition: p, Node: r.opts.Node, Epoch: epoch}))
	}
	if err != nil {
		r.opts.Logger.Warn("recording a partition's new owner failed; giving the lease back", "partition", p, "err", err)
		_ = l.kv.Delete(context.WithoutCancel(ctx), leaseKey(p), jetstream.LastRevision(epoch))
		return false
	}
	r.mu.Lock()
	r.held[p] = &lease{epoch: epoch, rev: epoch, renewed: time.Now()}
	r.mu.Unlock()
	r.opts.Logger.Info("took a partition lease", "partition", p, "epoch", epoch)
	if l.acquired != nil {
		l.acquired(p)
	}
	return true
}

// StopTaking stops taking free partitions and singletons (it waits for a
// take under way); the partitions' leases held are still renewed. The
// singletons are stopped and their leases given back, so that another
// node takes them at once. Call it when the node starts to stop, before
// its local copy closes.
func (l *Leases) StopTaking(ctx context.Context) {
	l.takeMu.Lock()
	l.noTake = true
	l.takeMu.Unlock()
	l.stopSingletons(ctx)
}

// stopSingletons stops the singletons this node runs (or waits for a
// stop under way) and gives their leases back.
func (l *Leases) stopSingletons(ctx context.Context) {
	l.singleMu.Lock()
	defer l.singleMu.Unlock()
	for i, s := range l.opts.Singletons {
		st := &l.singles[i]
		if st.stopping != nil {
			<-st.stopping
		}
		if st.rev == 0 {
			continue
		}
		s.Stop()
		if err := l.kv.Delete(ctx, s.Name, jetstream.LastRevision(st.rev)); err != nil {
			l.r.opts.Logger.Warn("giving a singleton's lease back failed; it expires after its TTL", "lease", s.Name, "err", err)
		}
		st.rev = 0
	}
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
	return l.r.held[p].runs()
}

// Held returns the partitions this node holds, in order.
func (l *Leases) Held() []int {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	var ps []int
	for p := range l.r.parts {
		if l.r.held[p].runs() {
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
	<-l.announced
	l.stopSingletons(ctx)
	if !l.opts.NoBalance && l.r.parts > 0 {
		_ = l.kv.Delete(ctx, nodeKey(l.r.opts.Node))
	}
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
