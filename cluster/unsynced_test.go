package cluster

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/cluster/natstest"
	"github.com/pegasus-engine/pegasus/eventlog"
)

// TestUnsyncedCopyCatchesUp: a local copy that commits without an fsync
// (eventlog.Options.Unsynced, as pegasusd --cluster opens it) loses its
// unsynced tail at a power loss, acknowledged appends included; at the
// next open it resumes after the last stream sequence it kept and holds
// every acknowledged event again, at the same local sequence, and
// verifies against the stream.
func TestUnsyncedCopyCatchesUp(t *testing.T) {
	nc := natstest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	fs := vfs.NewCrashableMem()
	open := func(fs vfs.FS) (*eventlog.Log, *ReplicatedLog) {
		l, err := eventlog.Open("db", &eventlog.Options{FS: fs, Unsynced: true})
		if err != nil {
			t.Fatal(err)
		}
		rl, err := OpenReplicated(ctx, l, LogOptions{URL: nc.URL(), Stream: "UNSYNCED"})
		if err != nil {
			t.Fatal(err)
		}
		return l, rl
	}
	l, rl := open(fs)
	acked := map[ulid.ULID]uint64{}
	const n = 40
	for i := range n {
		res, err := rl.Append(ctx, "task-1", eventlog.Any, eventlog.Event{Type: "STEP", Body: []byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		acked[res.Events[0].ID] = res.FirstSeq
	}
	// Power loss: nothing unsynced survives.
	clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	rl.Close()
	l.Close()

	kept, err := eventlog.Open("db", &eventlog.Options{FS: clone, ReadOnly: true})
	if err != nil {
		t.Fatalf("the copy does not open after power loss: %v", err)
	}
	head := kept.Head()
	kept.Close()
	if head >= n {
		t.Fatalf("the copy kept all %d appends: the power loss tests nothing", head)
	}
	t.Logf("the copy kept %d of %d acknowledged appends", head, n)

	l, rl = open(clone)
	defer l.Close()
	defer rl.Close()
	if err := rl.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	for id, seq := range acked {
		ev, err := l.Get(id)
		if err != nil || ev.Seq != seq {
			t.Fatalf("acknowledged event %s (seq %d): %d, %v", id, seq, ev.Seq, err)
		}
	}
	if covered, err := VerifyCopy(ctx, l, rl.st); err != nil || covered != n {
		t.Fatalf("verify: %d covered, %v", covered, err)
	}
}
