package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Sightings shares the liveness of the broker's workers among the daemons
// of a cluster (docs/cluster.md). A worker talks to any daemon, but only
// the owner of a task's partition assigns it, so the owner must know that
// the worker is alive: the daemon a worker polls puts a sighting (the
// worker, when, by which node) under the worker's key in a JetStream
// key-value bucket, and every daemon watches the bucket and hands each
// sighting to its broker. Sightings are hints, not the log: the bucket
// keeps each worker's last one for its TTL, and nothing is lost for good
// when a put fails (the worker's next request is shared again).
type Sightings struct {
	kv     jetstream.KeyValue
	node   string
	seen   func(worker string, at time.Time)
	logger *slog.Logger

	mu      sync.Mutex
	pending map[string]time.Time // the sightings Share queued, by worker
	sent    map[string]time.Time // the latest sighting put (or being put), by worker
	wake    chan struct{}        // buffered 1: pending has something

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// SightingOptions configure Sightings.
type SightingOptions struct {
	// Bucket is the key-value bucket of the sightings, created if missing
	// (with the log stream's replicas). The default value is
	// "PEGASUS_WORKERS".
	Bucket string
	// TTL is how long the bucket keeps a worker's last sighting, recorded
	// when it is created: a daemon that starts within it learns of the
	// workers alive at once. The default value is 90s (the broker's
	// default worker TTL).
	TTL time.Duration
}

// sighting is the value under a worker's key. Stable: JSON.
type sighting struct {
	Worker string    `json:"worker"`
	At     time.Time `json:"at"`
	Node   string    `json:"node"`
}

// sightingKey is a worker's key: worker ids are free text, keys are not.
func sightingKey(worker string) string {
	return "w." + base64.RawURLEncoding.EncodeToString([]byte(worker))
}

// ShareSightings opens (or creates) the sightings bucket, calls seen for
// every sighting it holds and then for every one put, by this node or
// another, until Close, and returns the Sightings whose Share puts this
// node's. seen is called from one goroutine, never concurrently.
func (r *ReplicatedLog) ShareSightings(ctx context.Context, opts SightingOptions, seen func(worker string, at time.Time)) (*Sightings, error) {
	if opts.Bucket == "" {
		opts.Bucket = "PEGASUS_WORKERS"
	}
	if opts.TTL <= 0 {
		opts.TTL = 90 * time.Second
	}
	kv, err := r.openBucket(ctx, jetstream.KeyValueConfig{Bucket: opts.Bucket, TTL: opts.TTL,
		Description: "Pegasus broker workers' last requests (docs/cluster.md)"})
	if err != nil {
		return nil, fmt.Errorf("cluster: sightings bucket %s: %w", opts.Bucket, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Sightings{kv: kv, node: r.opts.Node, seen: seen, logger: r.opts.Logger, pending: map[string]time.Time{}, sent: map[string]time.Time{},
		wake: make(chan struct{}, 1), cancel: cancel}
	w, err := kv.WatchAll(sctx, jetstream.IgnoreDeletes()) // ends with Close
	if err != nil {
		cancel()
		return nil, fmt.Errorf("cluster: watching sightings bucket %s: %w", opts.Bucket, err)
	}
	s.wg.Add(2)
	go s.watch(sctx, w)
	go s.put(sctx)
	return s, nil
}

// Share queues a sighting of worker at time at, to be put in the bucket;
// it never blocks. Of several sightings of one worker queued meanwhile,
// the latest is put, and one older than the last put is not.
func (s *Sightings) Share(worker string, at time.Time) {
	s.mu.Lock()
	if !at.After(s.sent[worker]) || !at.After(s.pending[worker]) {
		s.mu.Unlock()
		return
	}
	s.pending[worker] = at
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// put puts the queued sightings until ctx ends. One that fails is queued
// again (unless a later one of the worker was) and retried a second
// later.
func (s *Sightings) put(ctx context.Context) {
	defer s.wg.Done()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-retry:
		}
		retry = nil
		s.mu.Lock()
		batch := s.pending
		s.pending = map[string]time.Time{}
		for worker, at := range batch {
			s.sent[worker] = at
		}
		s.mu.Unlock()
		for worker, at := range batch {
			v, err := json.Marshal(sighting{Worker: worker, At: at, Node: s.node})
			if err == nil {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = s.kv.Put(pctx, sightingKey(worker), v)
				cancel()
			}
			if err != nil && ctx.Err() == nil {
				s.logger.Warn("sharing a worker's request with the cluster failed; retrying", "worker", worker, "err", err)
				s.mu.Lock()
				if _, later := s.pending[worker]; !later {
					s.pending[worker] = at
				}
				if s.sent[worker].Equal(at) {
					delete(s.sent, worker) // not put after all: the retry may be
				}
				s.mu.Unlock()
				retry = time.After(time.Second)
			}
		}
	}
}

// watch hands every sighting in the bucket to seen until ctx ends; a
// watch that ends (its consumer lost) is started again.
func (s *Sightings) watch(ctx context.Context, w jetstream.KeyWatcher) {
	defer s.wg.Done()
	for {
		for e := range w.Updates() {
			if e == nil {
				continue // the end of the initial values
			}
			var v sighting
			if err := json.Unmarshal(e.Value(), &v); err != nil || v.Worker == "" || sightingKey(v.Worker) != e.Key() {
				s.logger.Warn("a malformed worker sighting in the cluster's bucket was skipped", "key", e.Key())
				continue
			}
			s.seen(v.Worker, v.At)
		}
		_ = w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			var err error
			if w, err = s.kv.WatchAll(ctx, jetstream.IgnoreDeletes()); err == nil {
				break
			}
			s.logger.Warn("watching the workers' sightings failed; retrying", "err", err)
		}
	}
}

// Close stops sharing and watching.
func (s *Sightings) Close() {
	s.cancel()
	s.wg.Wait()
}
