package engine

import (
	"fmt"

	"github.com/pegasus-engine/pegasus/cluster"
)

// The fan-out (docs/cluster.md): with --publish, every committed event is
// also published on NATS JetStream by a cluster.Outbox that follows the
// log. Without it nothing here runs: the embedded path has no NATS.

// startPublish starts the outbox if --publish is set. An unreachable
// NATS server does not stop the daemon: the outbox retries and logs.
// With --cluster the outbox runs only while this daemon holds the
// fan-out's lease (clusterlog.go): startFanout and stopFanout.
func (e *Engine) startPublish() error {
	if e.opts.Publish.URL == "" || e.replicated != nil {
		return nil
	}
	ob, err := e.newOutbox()
	e.outbox = ob
	return err
}

func (e *Engine) newOutbox() (*cluster.Outbox, error) {
	o := e.opts.Publish
	o.Logger = e.log.With("component", "fanout")
	if e.replicated != nil {
		// Another daemon may have published what this copy does not
		// hold yet.
		o.CatchUp = e.replicated.CatchUp
	}
	ob, err := cluster.StartOutbox(e.events, o)
	if err != nil {
		return nil, err
	}
	e.log.Info("publishing events on NATS JetStream", "url", o.URL, "stream", o.Stream, "from", ob.Published()+1)
	return ob, nil
}

// startFanout starts the outbox once this daemon took the fan-out's
// lease (--cluster --publish).
func (e *Engine) startFanout() error {
	ob, err := e.newOutbox()
	if err != nil {
		return err
	}
	e.fanMu.Lock()
	e.outbox = ob
	e.fanMu.Unlock()
	return nil
}

// stopFanout stops the outbox when this daemon loses or gives back the
// fan-out's lease; the next holder resumes from the stream's last
// message.
func (e *Engine) stopFanout() { _ = e.stopOutbox() }

// stopPublish stops the outbox before the log closes; events committed
// later (the drain) are published at the next start, from the stream's
// last message. With --cluster, stopTaking already stopped it.
func (e *Engine) stopPublish() error {
	if err := e.stopOutbox(); err != nil {
		return fmt.Errorf("--publish: %w", err)
	}
	return nil
}

// stopOutbox stops the outbox this daemon runs, if any, and returns the
// error that ended it.
func (e *Engine) stopOutbox() error {
	e.fanMu.Lock()
	ob := e.outbox
	e.outbox = nil
	e.fanMu.Unlock()
	if ob == nil {
		return nil
	}
	ob.Stop()
	e.log.Info("fan-out stopped", "published", ob.Published(), "err", ob.Err())
	return ob.Err()
}
