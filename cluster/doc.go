// Package cluster takes Pegasus beyond one machine on NATS JetStream
// (docs/cluster.md).
//
// ReplicatedLog (log.go) makes a JetStream stream the log's source of
// truth (pegasusd --cluster): Append publishes (expected versions as
// Nats-Expected-Last-Subject-Sequence, ids as Nats-Msg-Id, several events
// as one atomic batch) and returns once JetStream acknowledged and this
// node's local eventlog.Log, written only by one follower in the stream's
// order, holds the events. It is an eventlog.Appender, what the agent and
// the broker write through.
//
// Task ownership (partition.go, lease.go): task streams are spread over a
// fixed number of partitions recorded in the stream; Leases takes and
// renews one lease per partition in a JetStream key-value bucket
// (create, and update at the last revision), records each new owner as a
// PARTITION_OWNED event, and the owner's appends to its partition carry
// the partition's last sequence as their expected sequence, so that a
// stale owner's appends are refused by JetStream (ErrFenced). Live nodes
// announce themselves in the bucket (node.<name>) and share the
// partitions: a node holds at most ceil(partitions / live nodes), gives
// back what is above (its tasks stop running first, the lease and the
// fence held until then) and takes free ones below. Singletons (the
// fan-out with pegasusd --cluster) run on one node at a time under a
// lease of their own.
//
// The fan-out (outbox.go): an Outbox follows a committed log and
// publishes every event, in the one JSON form of an event
// (replay.MarshalEvent), on subjects other programs subscribe to without
// reading the log's format:
//
//	dispatch.task events   swarm.task.<task id>.<event>    (created, assigned, started,
//	                                                        progress, completed, failed,
//	                                                        timeout, retry, dlq; requeued, updated)
//	system streams ($...)  pegasus.system.<name>.<TYPE>    (pegasus.system.memory.MEMORY_WRITTEN)
//	every other event      pegasus.task.<task id>.<TYPE>   (pegasus.task.01J....TASK_CREATED)
//
// Invariants of the fan-out:
//   - The log is the truth; the stream is a copy. The outbox reads only
//     committed events (eventlog.Subscribe), in sequence order, and never
//     writes to the log but its cursor (an aux key).
//   - Exactly once, in log order, without a gap: every message is
//     published with the stream's expected last sequence (the outbox is
//     the stream's only publisher; two outboxes over copies of one
//     clustered log may overlap, harmlessly), so the stream holds a
//     gap-free prefix of the log; on any error the outbox drops what is in flight, reads
//     the stream's last message (its Pegasus-Seq header) and resumes after
//     it. Each message also carries the event's id as Nats-Msg-Id, so a
//     retry JetStream already stored is a duplicate it drops.
//   - The cursor (the highest sequence JetStream acknowledged) is stored
//     in the log's aux space at most once per CursorInterval; it is where
//     the outbox resumes when the stream holds none of its messages (a
//     purged or new stream), so a purge does not republish history.
//   - Nothing here is on the embedded path: the daemon starts an Outbox
//     only with --publish, and a lint test keeps NATS out of eventlog,
//     replay, agent and broker.
//
// Invariants of the replicated log:
//   - The local copy is written only by the follower, in stream order;
//     each event keeps its message's stream sequence in its metadata
//     (MetaStreamSeq), where the follower resumes; a message's events
//     (one, or several packed: wire.go) are written in one commit. A copy with an event
//     written otherwise is refused (ErrApply) and VerifyCopy reports it.
//   - An append is acknowledged only after JetStream acknowledged it (a
//     quorum of replicas stored it) and the local copy holds it (synced).
//
// natstest, a sub-package, starts in-process JetStream servers and
// clusters for tests.
package cluster
