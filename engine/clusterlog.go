package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// The clustered log (docs/cluster.md): with --cluster, a JetStream stream
// is the log's source of truth and the data directory holds this node's
// copy, written only by the cluster's follower. Every event the agent,
// the broker and the daemon write goes through a cluster.ReplicatedLog,
// acknowledged once JetStream stored it on a quorum and the copy holds
// it; every read (the fold, the API, the dashboard) uses the copy.
// Without --cluster nothing here runs.

// openCluster starts the replicated log over the local copy l if
// --cluster is set, and waits until the copy holds everything the stream
// held (so that recovery folds it all). It returns nil without --cluster.
func openCluster(ctx context.Context, opts *Options, l *eventlog.Log, logger *slog.Logger) (*cluster.ReplicatedLog, error) {
	o := opts.Cluster
	if o.URL == "" {
		return nil, nil
	}
	o.Logger = logger.With("component", "cluster")
	rl, err := cluster.OpenReplicated(ctx, l, o)
	if err != nil {
		return nil, fmt.Errorf("--cluster: %w", err)
	}
	if err := rl.CatchUp(ctx); err != nil {
		rl.Close()
		return nil, fmt.Errorf("--cluster: catching up with the stream: %w", err)
	}
	logger.Info("the log is clustered on NATS JetStream", "url", o.URL, "stream", rl.Stream(), "replicas", rl.Replicas(),
		"partitions", rl.Partitions(), "applied", rl.Applied())
	if rl.Replicas() < 3 {
		logger.Warn("the log's stream has fewer than 3 replicas: one server's disk holds acknowledged events alone (docs/cluster.md)",
			"stream", rl.Stream(), "replicas", rl.Replicas())
	}
	return rl, nil
}

// appender is what the agent and the broker write through: the
// replicated log with --cluster, else the log itself.
func appender(rl *cluster.ReplicatedLog, l *eventlog.Log) eventlog.Appender {
	if rl == nil {
		return l
	}
	return rl
}

// ownership is what the agent and the broker ask whether they run a
// task: with partitions, whether this daemon holds the task's
// partition's lease. Until the leases start (after recovery) it holds
// none. It also carries the broker's workers' requests to the other
// daemons (sightings), so that the owners of their tasks count them
// alive.
type ownership struct {
	leases    atomic.Pointer[cluster.Leases]
	sightings atomic.Pointer[cluster.Sightings]
}

// partitioned reports whether --cluster runs with partitions, each
// daemon running the tasks of those it holds.
func partitioned(rl *cluster.ReplicatedLog) bool { return rl != nil && rl.Partitions() > 0 }

// shareFunc is broker.Options.Share: nil without partitions (every
// daemon assigns every task to the workers that talk to it).
func (o *ownership) shareFunc(rl *cluster.ReplicatedLog) func(string, time.Time) {
	if !partitioned(rl) {
		return nil
	}
	return func(worker string, at time.Time) {
		if s := o.sightings.Load(); s != nil {
			s.Share(worker, at)
		}
	}
}

// closeSightings stops sharing the workers' requests (after the broker
// stopped).
func (o *ownership) closeSightings() {
	if s := o.sightings.Swap(nil); s != nil {
		s.Close()
	}
}

// startSightings opens the workers' sightings bucket with --cluster and
// partitions: what any daemon's workers ask is told to this daemon's
// broker (broker.SeenElsewhere), before the daemon serves a request.
func (e *Engine) startSightings(ctx context.Context) error {
	rl := e.replicated
	if !partitioned(rl) || e.broker == nil {
		return nil
	}
	s, err := rl.ShareSightings(ctx, cluster.SightingOptions{TTL: e.opts.Broker.WorkerTTL}, e.broker.SeenElsewhere)
	if err != nil {
		return fmt.Errorf("--cluster: %w", err)
	}
	e.own.sightings.Store(s)
	return nil
}

func (o *ownership) owns(id string) bool {
	l := o.leases.Load()
	return l != nil && l.Owns(id)
}

// ownsFunc is agent.Options.Owns: nil (every task) without partitions.
func (o *ownership) ownsFunc(rl *cluster.ReplicatedLog) func(string) bool {
	if !partitioned(rl) {
		return nil
	}
	return o.owns
}

// startLeases starts taking and renewing partition leases once the agent
// has recovered; each partition taken resumes its tasks through the
// agent's recovery path (ResumeOwned) and has the broker look at its
// dispatch tasks (the owner decides their timeouts, retries and dead
// letters, and its built-in worker runs them), each one given back to balance the
// partitions over the live daemons stops running its tasks first
// (Disown). With --publish, the fan-out is a singleton: the daemon holding
// its lease runs the outbox (publish.go).
func (e *Engine) startLeases(ctx context.Context) error {
	rl := e.replicated
	if rl == nil || (rl.Partitions() == 0 && e.opts.Publish.URL == "") {
		return nil
	}
	inP := func(p int) func(string) bool {
		return func(id string) bool { return cluster.PartitionOf(id, rl.Partitions()) == p }
	}
	opts := e.opts.Lease
	opts.Release = func(ctx context.Context, p int) {
		// Running stages finish their step (its outcome is still fenced:
		// the lease is held until this returns), within the drain's time.
		ctx, cancel := context.WithTimeout(ctx, e.opts.ShutdownTimeout)
		defer cancel()
		if err := e.agent.Disown(ctx, inP(p)); err != nil {
			e.log.Warn("a partition's running stages were cancelled to give it back", "partition", p, "err", err)
		}
	}
	if e.opts.Publish.URL != "" {
		opts.Singletons = []cluster.Singleton{{Name: "fanout." + e.opts.Publish.Stream, Start: e.startFanout, Stop: e.stopFanout}}
	}
	l, err := rl.StartLeases(ctx, opts, func(p int) {
		if err := e.agent.ResumeOwned(e.base, inP(p)); err != nil && e.base.Err() == nil {
			e.log.Error("resuming a partition's tasks failed", "partition", p, "err", err)
		}
		if e.broker != nil {
			e.broker.CheckAll() // its dispatch tasks' timeouts are this daemon's to decide now
		}
	})
	if err != nil {
		return fmt.Errorf("--cluster: %w", err)
	}
	e.own.leases.Store(l)
	e.leases = l
	e.log.Info("taking partition leases", "partitions", rl.Partitions(), "ttl", l.TTL(), "node", rl.Node())
	return nil
}

// stopTaking stops taking partitions, and stops the fan-out if this
// daemon runs it, before the agent drains and closes the copy.
func (e *Engine) stopTaking() {
	if e.leases != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		e.leases.StopTaking(ctx)
		cancel()
	}
}

// closeCluster gives the leases back and stops the follower, after the
// agent's last append; the agent closes the copy.
func (e *Engine) closeCluster() {
	e.own.closeSightings()
	if e.leases != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e.leases.Close(ctx)
		cancel()
	}
	if e.replicated != nil {
		e.replicated.Close()
	}
}

// leasesLost is closed when this daemon lost a partition's lease (nil
// without leases).
func (e *Engine) leasesLost() <-chan struct{} {
	if e.leases == nil {
		return nil
	}
	return e.leases.Lost()
}

// clusterFailed is closed when the local copy stops following the stream
// (nil, which never fires, without --cluster).
func (e *Engine) clusterFailed() <-chan struct{} {
	if e.replicated == nil {
		return nil
	}
	return e.replicated.Failed()
}
