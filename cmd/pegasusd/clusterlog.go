package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

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

func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster", EnvVars: []string{"PEGASUS_CLUSTER"},
			Usage: "make a NATS JetStream stream at this `URL` (nats://host:4222, or several comma-separated) the log's source of truth; " +
				"the data directory holds this node's copy (docs/cluster.md)"},
		&cli.StringFlag{Name: "cluster-stream", Value: "PEGASUS_LOG", EnvVars: []string{"PEGASUS_CLUSTER_STREAM"},
			Usage: "the JetStream stream of the clustered log (created if missing)"},
		&cli.IntFlag{Name: "cluster-replicas", EnvVars: []string{"PEGASUS_CLUSTER_REPLICAS"},
			Usage: "replicas of the stream when --cluster creates it (default: 3 when the URLs name 3 servers or more, else 1)"},
		&cli.IntFlag{Name: "cluster-partitions", Value: 16, EnvVars: []string{"PEGASUS_CLUSTER_PARTITIONS"},
			Usage: "partitions of the tasks, each run by the daemon holding its lease, when --cluster creates the stream (recorded in it; 0: every daemon runs every task)"},
		&cli.DurationFlag{Name: "cluster-lease-ttl", Value: 10 * time.Second, EnvVars: []string{"PEGASUS_CLUSTER_LEASE_TTL"},
			Usage: "how long a partition's lease lasts without renewal, when --cluster creates the lease bucket (recorded in it)"},
		&cli.DurationFlag{Name: "cluster-start-timeout", Value: time.Minute, EnvVars: []string{"PEGASUS_CLUSTER_START_TIMEOUT"},
			Usage: "how long to wait at start for the NATS servers and JetStream to answer (servers still starting, a leader not yet elected), retrying with a backoff"},
		&cli.StringFlag{Name: "cluster-node", EnvVars: []string{"PEGASUS_CLUSTER_NODE"},
			Usage: "this daemon's name in the partitions' leases, unique among running daemons; a restart under the same name takes its leases back at once (default: a new id at each start)"},
	}
}

// clusterConfig is --cluster's settings; an empty URL: the embedded log.
type clusterConfig struct {
	log   cluster.LogOptions
	lease cluster.LeaseOptions
}

func clusterConfigFrom(cc *cli.Context) (clusterConfig, error) {
	o := cluster.LogOptions{URL: cc.String("cluster"), Stream: cc.String("cluster-stream"), Replicas: cc.Int("cluster-replicas"),
		Partitions: cc.Int("cluster-partitions"), Node: cc.String("cluster-node"), StartTimeout: cc.Duration("cluster-start-timeout")}
	c := clusterConfig{log: o, lease: cluster.LeaseOptions{TTL: cc.Duration("cluster-lease-ttl")}}
	switch {
	case o.URL == "":
		return c, nil
	case o.Replicas < 0 || o.Replicas > 5:
		return c, fmt.Errorf("--cluster-replicas %d: want 1 to 5", o.Replicas)
	case o.Partitions < 0 || o.Partitions > 1024:
		return c, fmt.Errorf("--cluster-partitions %d: want 0 to 1024", o.Partitions)
	case c.lease.TTL < time.Second:
		return c, fmt.Errorf("--cluster-lease-ttl %v: want 1s or more", c.lease.TTL)
	case o.StartTimeout < time.Second:
		return c, fmt.Errorf("--cluster-start-timeout %v: want 1s or more", o.StartTimeout)
	case cc.Duration("retain-finished") > 0:
		// Retention deletes events from the log: the copy would no
		// longer be the stream's.
		return c, errors.New("--retain-finished does not work with --cluster yet (docs/cluster.md)")
	case cc.Bool("accept-data-loss"):
		return c, errors.New("--accept-data-loss does not apply with --cluster: start the node from an empty data directory, its copy is rebuilt from the stream")
	}
	if err := cluster.ValidateStreamName(o.Stream); err != nil {
		return c, fmt.Errorf("--cluster-stream: %w", err)
	}
	if o.Node != "" {
		if err := cluster.ValidateNode(o.Node); err != nil {
			return c, fmt.Errorf("--cluster-node: %w", err)
		}
	}
	return c, nil
}

// openCluster starts the replicated log over the local copy l if
// --cluster is set, and waits until the copy holds everything the stream
// held (so that recovery folds it all). It returns nil without --cluster.
func openCluster(ctx context.Context, cfg *config, l *eventlog.Log, logger *slog.Logger) (*cluster.ReplicatedLog, error) {
	o := cfg.cluster.log
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
func (d *daemon) startSightings(ctx context.Context) error {
	rl := d.replicated
	if !partitioned(rl) || d.server.broker == nil {
		return nil
	}
	s, err := rl.ShareSightings(ctx, cluster.SightingOptions{TTL: d.cfg.broker.workerTTL}, d.server.broker.b.SeenElsewhere)
	if err != nil {
		return fmt.Errorf("--cluster: %w", err)
	}
	d.own.sightings.Store(s)
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
func (d *daemon) startLeases(ctx context.Context) error {
	rl := d.replicated
	if rl == nil || (rl.Partitions() == 0 && d.cfg.publish.URL == "") {
		return nil
	}
	inP := func(p int) func(string) bool {
		return func(id string) bool { return cluster.PartitionOf(id, rl.Partitions()) == p }
	}
	opts := d.cfg.cluster.lease
	opts.Release = func(ctx context.Context, p int) {
		// Running stages finish their step (its outcome is still fenced:
		// the lease is held until this returns), within the drain's time.
		ctx, cancel := context.WithTimeout(ctx, d.cfg.shutdownTimeout)
		defer cancel()
		if err := d.agent.Disown(ctx, inP(p)); err != nil {
			d.log.Warn("a partition's running stages were cancelled to give it back", "partition", p, "err", err)
		}
	}
	if d.cfg.publish.URL != "" {
		opts.Singletons = []cluster.Singleton{{Name: "fanout." + d.cfg.publish.Stream, Start: d.startFanout, Stop: d.stopFanout}}
	}
	l, err := rl.StartLeases(ctx, opts, func(p int) {
		if err := d.agent.ResumeOwned(d.server.base, inP(p)); err != nil && d.server.base.Err() == nil {
			d.log.Error("resuming a partition's tasks failed", "partition", p, "err", err)
		}
		if d.server.broker != nil {
			d.server.broker.b.CheckAll() // its dispatch tasks' timeouts are this daemon's to decide now
		}
	})
	if err != nil {
		return fmt.Errorf("--cluster: %w", err)
	}
	d.own.leases.Store(l)
	d.leases = l
	d.log.Info("taking partition leases", "partitions", rl.Partitions(), "ttl", l.TTL(), "node", rl.Node())
	return nil
}

// stopTaking stops taking partitions, and stops the fan-out if this
// daemon runs it, before the agent drains and closes the copy.
func (d *daemon) stopTaking() {
	if d.leases != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d.leases.StopTaking(ctx)
		cancel()
	}
}

// closeCluster gives the leases back and stops the follower, after the
// agent's last append; the agent closes the copy.
func (d *daemon) closeCluster() {
	d.own.closeSightings()
	if d.leases != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d.leases.Close(ctx)
		cancel()
	}
	if d.replicated != nil {
		d.replicated.Close()
	}
}

// leasesLost is closed when this daemon lost a partition's lease (nil
// without leases).
func (d *daemon) leasesLost() <-chan struct{} {
	if d.leases == nil {
		return nil
	}
	return d.leases.Lost()
}

// clusterFailed is closed when the local copy stops following the stream
// (nil, which never fires, without --cluster).
func (d *daemon) clusterFailed() <-chan struct{} {
	if d.replicated == nil {
		return nil
	}
	return d.replicated.Failed()
}
