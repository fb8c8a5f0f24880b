package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// Task ownership (docs/cluster.md). A clustered log created with
// LogOptions.Partitions > 0 spreads task streams over that many
// partitions, by a hash of the stream name; the count is recorded in the
// stream's metadata (MetaPartitions) and never changes. Each partition's
// events go on its own subjects, pegasus.log.p<n>.<stream>, so that one
// expected-sequence check can cover a whole partition: that is the fence.
//
// A node that holds a partition's lease (lease.go) first appends a
// PARTITION_OWNED event to the partition's own stream ($partition-<n>),
// naming itself and the lease's epoch. From then on its appends at an
// expected version to the partition's tasks carry
// Nats-Expected-Last-Subject-Sequence = the partition's last stream
// sequence in its copy, on the subject pegasus.log.p<n>.>; a new owner's
// PARTITION_OWNED moves that sequence, so every later append of a stale
// owner is refused by JetStream, whatever the task. The refused node then
// reads the new owner's event in its copy and returns ErrFenced.

// ErrFenced is returned (wrapped, with eventlog.ErrConflict) for an
// append to a partition this node held and another node has taken over:
// the append was refused by the stream, nothing was written.
var ErrFenced = errors.New("cluster: another node took over this partition's lease")

// Metadata and event types of partitions. Stable.
const (
	// MetaPartitions is the stream metadata key recording the partition
	// count.
	MetaPartitions = "pegasus.partitions"
	// PartitionOwned is the event a new owner appends to its partition's
	// stream before it runs the partition's tasks.
	PartitionOwned = "PARTITION_OWNED"
)

// partitionStreamPrefix names the partitions' own streams. Reserved "$"
// streams are counted and otherwise ignored by the fold.
const partitionStreamPrefix = "$partition-"

// PartitionStream is partition p's own stream, where its owners record
// themselves.
func PartitionStream(p int) string { return partitionStreamPrefix + strconv.Itoa(p) }

// PartitionOf is the partition of a stream among n: a task stream's
// (FNV-1a of its name, modulo n), or a partition's own stream's; -1 for
// the other reserved "$" streams, or when n is 0.
func PartitionOf(stream string, n int) int {
	if n <= 0 {
		return -1
	}
	if rest, ok := strings.CutPrefix(stream, partitionStreamPrefix); ok {
		if p, err := strconv.Atoi(rest); err == nil && p >= 0 && p < n && strconv.Itoa(p) == rest {
			return p
		}
	}
	if strings.HasPrefix(stream, "$") {
		return -1
	}
	h := fnv.New32a()
	h.Write([]byte(stream))
	return int(h.Sum32() % uint32(n))
}

// subjectOf is the stream subject of a log stream's events: under its
// partition's subjects if it has one.
func subjectOf(stream string, parts int) string {
	if p := PartitionOf(stream, parts); p >= 0 {
		return partitionPrefix(p) + Token(stream)
	}
	return "pegasus.log." + Token(stream)
}

func partitionPrefix(p int) string { return "pegasus.log.p" + strconv.Itoa(p) + "." }

// partitionFilter is every subject of partition p: what a fenced append's
// expected sequence covers.
func partitionFilter(p int) string { return partitionPrefix(p) + ">" }

// partitionOfSubject is the partition of a stream subject, or -1.
func partitionOfSubject(subj string) int {
	rest, ok := strings.CutPrefix(subj, "pegasus.log.p")
	if !ok {
		return -1
	}
	n, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	p, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return p
}

// Owner is the body of a PARTITION_OWNED event.
type Owner struct {
	Partition int    `json:"partition"`
	Node      string `json:"node"`
	Epoch     uint64 `json:"epoch"` // the lease's revision when the node took it
}

func ownedEvent(o Owner) eventlog.Event {
	b, _ := json.Marshal(o)
	return eventlog.Event{Type: PartitionOwned, Body: b}
}

// ownerOf decodes a PARTITION_OWNED event (ok false for another event).
func ownerOf(ev eventlog.Event) (Owner, bool) {
	var o Owner
	if ev.Type != PartitionOwned || json.Unmarshal(ev.Body, &o) != nil {
		return o, false
	}
	return o, true
}

// fenceError is the error of an append refused because p moved on.
func fenceError(p int, now Owner) error {
	return fmt.Errorf("%w (partition %d, now node %s at epoch %d): %w", ErrFenced, p, now.Node, now.Epoch, eventlog.ErrConflict)
}
