package main

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pegasus-engine/pegasus/cluster"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// clusterCopy is verify --cluster's finding: a node's data directory (its
// copy of a clustered log) checked against the log's JetStream stream
// (cluster.VerifyCopy, docs/cluster.md).
type clusterCopy struct {
	Stream string `json:"stream"`
	// Covered is the last stream sequence the copy holds, Last the
	// stream's: a stopped node's copy may be behind, which is not a
	// problem (it catches up at its next start).
	Covered uint64 `json:"covered"`
	Last    uint64 `json:"stream_last"`
	Problem string `json:"problem,omitempty"`
}

// verifyClusterCopy checks the log l, a node's copy, against stream at the
// NATS servers url.
func verifyClusterCopy(ctx context.Context, l *eventlog.Log, url, stream string) (*clusterCopy, error) {
	nc, err := nats.Connect(url, nats.Name("pegasus-replay verify"))
	if err != nil {
		return nil, sourceErr(fmt.Errorf("--cluster %s: %w", url, err))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, sourceErr(fmt.Errorf("--cluster %s: stream %s: %w", url, stream, err))
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	cc := &clusterCopy{Stream: stream, Last: info.State.LastSeq}
	cc.Covered, err = cluster.VerifyCopy(ctx, l, st)
	if err != nil {
		cc.Problem = err.Error()
	}
	return cc, nil
}

func printClusterCopy(p *printer, cc *clusterCopy) {
	switch {
	case cc.Problem != "":
		p.Printf("%s\n", p.paint(red, fmt.Sprintf("cluster: FAILED: the copy does not match stream %s: %s", cc.Stream, cc.Problem)))
	case cc.Covered < cc.Last:
		p.Printf("%s\n", p.paint(green, fmt.Sprintf("cluster: the copy is stream %s's messages to %d, in order; the stream goes on to %d (the node catches up at its next start)",
			cc.Stream, cc.Covered, cc.Last)))
	default:
		p.Printf("%s\n", p.paint(green, fmt.Sprintf("cluster: the copy is stream %s's messages to %d, in order, all of them", cc.Stream, cc.Covered)))
	}
}
