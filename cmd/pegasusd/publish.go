package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/pegasus-engine/pegasus/cluster"
)

// The fan-out (docs/cluster.md): with --publish, every committed event is
// also published on NATS JetStream by a cluster.Outbox that follows the
// log. Without it nothing here runs: the embedded path has no NATS.

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

// startPublish starts the outbox if --publish is set. An unreachable
// NATS server does not stop the daemon: the outbox retries and logs.
// With --cluster the outbox runs only while this daemon holds the
// fan-out's lease (clusterlog.go): startFanout and stopFanout.
func (d *daemon) startPublish() error {
	if d.cfg.publish.URL == "" || d.replicated != nil {
		return nil
	}
	ob, err := d.newOutbox()
	d.outbox = ob
	return err
}

func (d *daemon) newOutbox() (*cluster.Outbox, error) {
	o := d.cfg.publish
	o.Logger = d.log.With("component", "fanout")
	if d.replicated != nil {
		// Another daemon may have published what this copy does not
		// hold yet.
		o.CatchUp = d.replicated.CatchUp
	}
	ob, err := cluster.StartOutbox(d.events, o)
	if err != nil {
		return nil, err
	}
	d.log.Info("publishing events on NATS JetStream", "url", o.URL, "stream", o.Stream, "from", ob.Published()+1)
	return ob, nil
}

// startFanout starts the outbox once this daemon took the fan-out's
// lease (--cluster --publish).
func (d *daemon) startFanout() error {
	ob, err := d.newOutbox()
	if err != nil {
		return err
	}
	d.fanMu.Lock()
	d.outbox = ob
	d.fanMu.Unlock()
	return nil
}

// stopFanout stops the outbox when this daemon loses or gives back the
// fan-out's lease; the next holder resumes from the stream's last
// message.
func (d *daemon) stopFanout() { _ = d.stopOutbox() }

// stopPublish stops the outbox before the log closes; events committed
// later (the drain) are published at the next start, from the stream's
// last message. With --cluster, stopTaking already stopped it.
func (d *daemon) stopPublish() error {
	if err := d.stopOutbox(); err != nil {
		return fmt.Errorf("--publish: %w", err)
	}
	return nil
}

// stopOutbox stops the outbox this daemon runs, if any, and returns the
// error that ended it.
func (d *daemon) stopOutbox() error {
	d.fanMu.Lock()
	ob := d.outbox
	d.outbox = nil
	d.fanMu.Unlock()
	if ob == nil {
		return nil
	}
	ob.Stop()
	d.log.Info("fan-out stopped", "published", ob.Published(), "err", ob.Err())
	return ob.Err()
}
