package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/engine"
	"github.com/pegasus-engine/pegasus/server"
)

// The flags of serve's parts, read into engine.Options and
// server.Options.

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
		&cli.BoolFlag{Name: "cluster-packed-messages", Value: true, EnvVars: []string{"PEGASUS_CLUSTER_PACKED_MESSAGES"},
			Usage: "write an append's events on one stream as one JetStream message; set false on every node while upgrading a cluster one node at a time from a build that cannot read packed messages (docs/cluster.md)"},
		&cli.StringFlag{Name: "cluster-node", EnvVars: []string{"PEGASUS_CLUSTER_NODE"},
			Usage: "this daemon's name in the partitions' leases, unique among running daemons; a restart under the same name takes its leases back at once (default: a new id at each start)"},
	}
}

// clusterConfigFrom reads --cluster's settings into e; an empty URL: the
// embedded log.
func clusterConfigFrom(cc *cli.Context, e *engine.Options) error {
	o := cluster.LogOptions{URL: cc.String("cluster"), Stream: cc.String("cluster-stream"), Replicas: cc.Int("cluster-replicas"),
		Partitions: cc.Int("cluster-partitions"), Node: cc.String("cluster-node"), StartTimeout: cc.Duration("cluster-start-timeout"),
		OneEventPerMessage: !cc.Bool("cluster-packed-messages")}
	e.Cluster, e.Lease = o, cluster.LeaseOptions{TTL: cc.Duration("cluster-lease-ttl")}
	switch {
	case o.URL == "":
		return nil
	case o.Replicas < 0 || o.Replicas > 5:
		return fmt.Errorf("--cluster-replicas %d: want 1 to 5", o.Replicas)
	case o.Partitions < 0 || o.Partitions > 1024:
		return fmt.Errorf("--cluster-partitions %d: want 0 to 1024", o.Partitions)
	case e.Lease.TTL < time.Second:
		return fmt.Errorf("--cluster-lease-ttl %v: want 1s or more", e.Lease.TTL)
	case o.StartTimeout < time.Second:
		return fmt.Errorf("--cluster-start-timeout %v: want 1s or more", o.StartTimeout)
	case cc.Duration("retain-finished") > 0:
		// Retention deletes events from the log: the copy would no
		// longer be the stream's.
		return errors.New("--retain-finished does not work with --cluster yet (docs/cluster.md)")
	case cc.Bool("accept-data-loss"):
		return errors.New("--accept-data-loss does not apply with --cluster: start the node from an empty data directory, its copy is rebuilt from the stream")
	}
	if err := cluster.ValidateStreamName(o.Stream); err != nil {
		return fmt.Errorf("--cluster-stream: %w", err)
	}
	if o.Node != "" {
		if err := cluster.ValidateNode(o.Node); err != nil {
			return fmt.Errorf("--cluster-node: %w", err)
		}
	}
	return nil
}

func publishFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "publish", EnvVars: []string{"PEGASUS_PUBLISH"},
			Usage: "publish every committed event on NATS JetStream at this `URL` (nats://host:4222, or several comma-separated): " +
				"swarm.task.<id>.<event> for dispatch tasks, pegasus.task.<id>.<TYPE> for the others (docs/cluster.md)"},
		&cli.StringFlag{Name: "publish-stream", Value: "PEGASUS", EnvVars: []string{"PEGASUS_PUBLISH_STREAM"},
			Usage: "the JetStream stream --publish writes into (created if missing; pegasusd must be its only publisher)"},
		&cli.IntFlag{Name: "publish-replicas", Value: 1, EnvVars: []string{"PEGASUS_PUBLISH_REPLICAS"},
			Usage: "replicas of the stream when --publish creates it (3 on a three-server NATS cluster)"},
	}
}

func publishConfigFrom(cc *cli.Context) (cluster.OutboxOptions, error) {
	o := cluster.OutboxOptions{URL: cc.String("publish"), Stream: cc.String("publish-stream"), Replicas: cc.Int("publish-replicas")}
	if o.URL == "" {
		return o, nil
	}
	v := o
	v.EnsureDefaults()
	if err := v.Validate(); err != nil {
		return o, fmt.Errorf("--publish: %w", err)
	}
	return o, nil
}

// retentionFlags are serve's retention flags (docs/retention.md).
func retentionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "retain-finished", EnvVars: []string{"PEGASUS_RETAIN_FINISHED"},
			Usage: "archive finished tasks whose last event is older than this (e.g. 720h) and remove them from the live log; 0: keep everything (docs/retention.md)"},
		&cli.DurationFlag{Name: "retention-interval", Value: time.Hour, EnvVars: []string{"PEGASUS_RETENTION_INTERVAL"},
			Usage: "how often retention runs, with --retain-finished"},
		&cli.StringFlag{Name: "archive-dir", EnvVars: []string{"PEGASUS_ARCHIVE_DIR"},
			Usage: "where retention writes its archives (default: DATA_DIR/archive)"},
	}
}

func retentionConfigFrom(cc *cli.Context, dataDir string) (engine.RetentionOptions, error) {
	c := engine.RetentionOptions{Window: cc.Duration("retain-finished"), Interval: cc.Duration("retention-interval"), ArchiveDir: cc.String("archive-dir")}
	switch {
	case c.Window < 0:
		return c, errors.New("--retain-finished must not be negative")
	case c.Window > 0 && c.Interval <= 0:
		return c, errors.New("--retention-interval must be positive")
	}
	if c.ArchiveDir == "" {
		c.ArchiveDir = filepath.Join(dataDir, "archive")
	}
	return c, nil
}

func brokerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "admin-token", EnvVars: []string{"PEGASUS_ADMIN_TOKEN"}, Usage: "bearer token of the broker's admin routes (/api/v1/stats, agents, drain, dlq); empty: admin routes are open on loopback only"},
		&cli.DurationFlag{Name: "timeout-check-interval", Value: 30 * time.Second, EnvVars: []string{"PEGASUS_TIMEOUT_CHECK_INTERVAL"}, Usage: "longest the broker sleeps between checks of deadlines (it also wakes at each deadline)"},
		&cli.StringFlag{Name: "agent-token", EnvVars: []string{"PEGASUS_AGENT_TOKEN"}, Usage: "bearer token the broker's worker routes require (register, poll, progress, complete, fail); empty: not required"},
		&cli.BoolFlag{Name: "agent-worker", Value: true, EnvVars: []string{"PEGASUS_AGENT_WORKER"}, Usage: "the built-in agent is a broker worker (\"pegasus\": agent, general, explore, plan)"},
		&cli.DurationFlag{Name: "worker-ttl", Value: 90 * time.Second, EnvVars: []string{"PEGASUS_WORKER_TTL"}, Usage: "a worker not heard from for this long gets no new task"},
	}
}

// brokerConfigFrom reads the broker's flags: its loop's into e, its
// tokens into s.
func brokerConfigFrom(cc *cli.Context, e *engine.Options, s *server.Options) error {
	e.Broker = engine.BrokerOptions{AgentWorker: cc.Bool("agent-worker"),
		CheckInterval: cc.Duration("timeout-check-interval"), WorkerTTL: cc.Duration("worker-ttl")}
	s.AdminToken, s.AgentToken = cc.String("admin-token"), cc.String("agent-token")
	if err := checkToken(s.AdminToken); err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), "--token (PEGASUS_TOKEN)", "--admin-token (PEGASUS_ADMIN_TOKEN)"))
	}
	if err := checkToken(s.AgentToken); err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), "--token (PEGASUS_TOKEN)", "--agent-token (PEGASUS_AGENT_TOKEN)"))
	}
	if e.Broker.CheckInterval < time.Second {
		return errors.New("--timeout-check-interval must be at least 1s")
	}
	return nil
}

// checkToken refuses a --token that no request could present: header
// values lose their surrounding whitespace on the way, so a token of only
// whitespace (or with some around it) would lock every client out.
func checkToken(token string) error {
	switch {
	case token == "":
		return nil
	case strings.TrimSpace(token) == "":
		return errors.New("--token (PEGASUS_TOKEN) is only whitespace: no request could authenticate; give a real token, or none to listen on loopback only")
	case strings.TrimSpace(token) != token:
		return errors.New("--token (PEGASUS_TOKEN) begins or ends with whitespace, which no Authorization header can carry: remove it")
	}
	return nil
}

// checkBearerTokens refuses a --token with a different --admin-token or
// --agent-token: every token travels in the one Authorization: Bearer
// header, and the daemon's token is checked on every request before any
// route, so no request could carry both and the routes that need the
// second would refuse everything.
func checkBearerTokens(s server.Options) error {
	daemon := s.Token
	for _, t := range []struct{ flag, value string }{
		{"--admin-token (PEGASUS_ADMIN_TOKEN)", s.AdminToken},
		{"--agent-token (PEGASUS_AGENT_TOKEN)", s.AgentToken},
	} {
		if daemon != "" && t.value != "" && t.value != daemon {
			return fmt.Errorf("%s differs from --token (PEGASUS_TOKEN): both travel in the one Authorization: Bearer header, "+
				"which every request must fill with --token, so no request could carry the other; give them the same value", t.flag)
		}
	}
	return nil
}

// scheduleSpecs returns the --schedule flags or, when none is given, the
// lines of $PEGASUS_SCHEDULE. The variable is not bound to the flag, which
// would split it on commas and so break an input that holds one; a line
// break cannot occur in a schedule, so it separates them.
func scheduleSpecs(flags []string, env string) []string {
	if len(flags) > 0 {
		return flags
	}
	var specs []string
	for line := range strings.Lines(env) {
		if line = strings.TrimRight(line, "\r\n"); strings.TrimSpace(line) != "" {
			specs = append(specs, line)
		}
	}
	return specs
}
