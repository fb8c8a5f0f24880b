// Package eventlog is Pegasus's durable, append-only event log on Pebble.
//
// Every state change of every task is an Event appended here; everything else
// (task state, read models, the audit trail) is a fold over the log. The log
// therefore promises a few things and keeps them by construction:
//
//   - Durability. Append returns only after a synced (fsync'd) commit.
//   - One order. A single committer goroutine assigns global sequences, gap
//     free from 1, and stream versions, gap free from 1 per stream. It commits
//     each group of concurrent appends as ONE Pebble batch with one fsync
//     (group commit), then publishes the new head. Head, iterators and
//     subscriptions never show a sequence before every lower one is durable.
//   - Atomicity. An event and all its index entries are in the same batch; an
//     append (even across streams, AppendMulti) is in one batch: all or none.
//   - Idempotency. An event whose ID is already stored is not written again;
//     the append returns the first position. This is the id index on disk, so
//     it survives restarts.
//   - Fail-stop. If a synced commit fails, its outcome is unknown, so the log
//     is poisoned: every later write returns ErrFailed. Reads continue.
//     Health and Failed report it.
//   - No writes on damage. Records missing below the head (found at Open
//     from Pebble's table metadata: every table carries the range and count
//     of the records it holds, see findMissing) or a corrupt file found
//     while running make every later append return ErrDamaged with the
//     *CorruptionError; Health reports it. Reads of intact data continue.
//   - No silent loss. A head marker file (PEGASUS-HEAD) records the
//     acknowledged head, bounds every sequence handed out and names the
//     newest WAL; Open refuses a log that recovers to a lower head or whose
//     newest WAL is gone (ErrDataLoss) unless told to accept the loss,
//     which then never reuses a sequence. See docs/format.md.
//   - Checked reads. Every record carries a CRC32C that is verified on every
//     read; corrupt or missing records are reported with their position
//     (IsCorruption), never skipped.
//   - Honest holes. Retire removes whole streams in one batch with the
//     EVENTS_ARCHIVED event that records it and a hole key per removed
//     range: reads step over holes, Verify accepts them and no other gap,
//     and sequences are never reused.
//   - Bounded memory. Iterators stream from Pebble; subscriptions buffer at
//     most Options.SubscriberBuffer events and fall back to reading the log.
//
// # On-disk layout
//
// One Pebble database. Keys start with a one-byte namespace; integers are
// big-endian so that byte order is numeric order. docs/format.md is the
// complete specification, sufficient to write an independent reader.
//
//	key                                             value
//	---------------------------------------------   ---------------------------
//	'c' | causation ULID (16) | seq (8)             (empty)         causation index
//	'e' | seq (8)                                   record          the log
//	'i' | ULID (16)                                 seq (8)         id index
//	'm' | "format"                                  version (4)     format version (5)
//	'm' | "marker"                                  01              a head marker exists
//	'm' | "hole" | first seq (8)                    last (8) |      a range removed by Retire
//	                                                manifest (8)    (format 6)
//	's' | stream (1..256, no 0x00) | 0x00 |         first seq (8)   stream index: one
//	      last version (8)                          [uvarint count] entry per append
//	                                                                and stream
//	'x' | aux key                                   aux value       read models (WriteAux)
//
// A record (the value of an 'e' key), record format 1 (EncodeRecord):
//
//	+--------+--------+---------+--------------+-----------------+--------------+
//	| crc32c | format |   id    | seq          | stream          | version      |
//	| 4 B BE | 1 B =1 | 16 B    | uvarint      | uvarint n, n B  | uvarint      |
//	+--------+--------+---------+--------------+-----------------+--------------+
//	| type            | time         | causation | correlation | schema        |
//	| uvarint n, n B  | 8 B BE int64 | 16 B      | 16 B        | 2 B BE        |
//	|                 | unix nanos   |           |             |               |
//	+-----------------+--------------+-----------+-------------+---------------+
//	| metadata: uvarint count, then count x (uvarint n, key, uvarint n, value), |
//	|           keys strictly ascending                                         |
//	+---------------------------------------------------------------------------+
//	| body: uvarint n, n B (msgpack, opaque to the log)                         |
//	+---------------------------------------------------------------------------+
//
// The CRC32C (Castagnoli polynomial) covers every byte after the checksum.
// Nothing may follow the body.
//
// The log stores record format 2 (EncodeCompactRecord) since format version
// 3: format byte 2, then a flags byte, then the fields above, with the
// causation stored only if flag 0x01 is set (else zero) and the correlation
// only if flag 0x02 is set (else the causation if there is one, the id if
// not). DecodeRecord reads both; logs at format 1 and 2 hold format 1 records
// only and are upgraded to 3 and 4 by a writable Open.
//
// # Concurrency
//
// Appenders validate and copy their events, then hand a request to the
// committer over a channel and wait. The committer takes whatever queued up
// while the previous fsync ran, checks each request (idempotency through
// the id index; expected versions against an in-memory version cache that
// includes versions pending in the group), builds one batch, commits it with
// a WAL fsync, publishes the new head to readers and subscriptions, and only
// then acknowledges the appenders. A request that fails its checks fails
// alone; the rest of the group commits.
//
// After acknowledging k appenders the committer waits briefly (at most
// Options.MaxGroupWait and half the recent commit latency) for k requests
// to gather. Without that, closed-loop appenders split into two cohorts that
// alternate fsyncs with half the events each, which is what concurrent
// committers get from Pebble's WAL writer alone.
//
// Pebble makes a batch visible to its readers before the WAL sync returns,
// so every read here is bounded by Head rather than by what Pebble shows:
// readers never see an event that is not yet durable, nor one from a commit
// that failed.
//
// If a commit fails, Pebble reports it through Logger.Fatalf; the log's
// Pebble logger panics with a private value that the committer recovers
// into an error, and the log is poisoned (ErrFailed) instead of the process
// exiting or, worse, the commit being taken as done. Every other Fatalf
// (a MANIFEST write in a background flush) poisons the log and returns, and
// Pebble's corruption reports go to an event listener instead of Fatalf, so
// no Pebble goroutine ever takes the process down.
package eventlog
