package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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
	}
}

func clusterConfigFrom(cc *cli.Context) (cluster.LogOptions, error) {
	o := cluster.LogOptions{URL: cc.String("cluster"), Stream: cc.String("cluster-stream"), Replicas: cc.Int("cluster-replicas")}
	switch {
	case o.URL == "":
		return o, nil
	case o.Replicas < 0 || o.Replicas > 5:
		return o, fmt.Errorf("--cluster-replicas %d: want 1 to 5", o.Replicas)
	case cc.Duration("retain-finished") > 0:
		// Retention deletes events from the log: the copy would no
		// longer be the stream's.
		return o, errors.New("--retain-finished does not work with --cluster yet (docs/cluster.md)")
	case cc.Bool("accept-data-loss"):
		return o, errors.New("--accept-data-loss does not apply with --cluster: start the node from an empty data directory, its copy is rebuilt from the stream")
	}
	if err := cluster.ValidateStreamName(o.Stream); err != nil {
		return o, fmt.Errorf("--cluster-stream: %w", err)
	}
	return o, nil
}

// openCluster starts the replicated log over the local copy l if
// --cluster is set, and waits until the copy holds everything the stream
// held (so that recovery folds it all). It returns nil without --cluster.
func openCluster(ctx context.Context, cfg *config, l *eventlog.Log, logger *slog.Logger) (*cluster.ReplicatedLog, error) {
	o := cfg.cluster
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
		"applied", rl.Applied())
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

// closeCluster stops the follower after the agent's last append; the
// agent closes the copy.
func (d *daemon) closeCluster() {
	if d.replicated != nil {
		d.replicated.Close()
	}
}

// clusterFailed is closed when the local copy stops following the stream
// (nil, which never fires, without --cluster).
func (d *daemon) clusterFailed() <-chan struct{} {
	if d.replicated == nil {
		return nil
	}
	return d.replicated.Failed()
}
