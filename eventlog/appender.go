package eventlog

import "context"

// Appender writes events with Append's guarantees (expected versions, ids
// that make a retry idempotent, several streams in one atomic append,
// acknowledged only once durable). *Log is one; with pegasusd --cluster
// the agent and the broker are handed the cluster's replicated log
// instead, which appends through the cluster and returns once this node's
// *Log, the copy every read uses, holds the events (docs/cluster.md).
type Appender interface {
	Append(ctx context.Context, stream string, expected ExpectedVersion, events ...Event) (AppendResult, error)
	AppendMulti(ctx context.Context, appends ...StreamAppend) ([]AppendResult, error)
}

var _ Appender = (*Log)(nil)
