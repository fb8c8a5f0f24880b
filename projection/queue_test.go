package projection

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/fsm"
)

// TestQueueOrder: the documented cross-machine queue order, and QueueKey
// sorting as QueueCompare orders, for random summaries of both machines
// (negative priorities, times before 1970, equal times).
func TestQueueOrder(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC) }
	id := func(n byte) string { return ulid.ULID{15: n}.String() }
	pt := func(n byte, prio, sec int) Summary {
		return Summary{ID: id(n), Machine: "pegasus.task@1", Priority: prio, CreatedAt: at(sec)}
	}
	dt := func(n byte, prio, sec int) Summary {
		return Summary{ID: id(n), Machine: fsm.DispatchMachineName + "@1", Priority: prio, CreatedAt: at(sec)}
	}
	want := []Summary{
		dt(1, 10, 9),  // dispatch 10 ranks as -10
		pt(2, -7, 5),  // -7 ties with dispatch 7, older
		dt(3, 7, 6),   // dispatch 7: -7
		dt(4, 7, 6),   // same time: by id
		pt(5, -1, 9),  //
		dt(6, 0, 1),   // the defaults interleave by age
		pt(7, 0, 2),   //
		dt(8, 0, 3),   //
		pt(9, 1, 0),   // pegasus 1: after every default task
		dt(10, 0, 10), // ... but not a newer default dispatch task: 0 < 1
	}
	want[9], want[8] = want[8], want[9]
	got := slices.Clone(want)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
	slices.SortFunc(got, func(a, b Summary) int { return QueueCompare(&a, &b) })
	for i := range want {
		if got[i].ID != want[i].ID {
			t.Fatalf("position %d: %s %d, want %s %d", i, got[i].Machine, got[i].Priority, want[i].Machine, want[i].Priority)
		}
	}

	rng := rand.New(rand.NewPCG(3, 4))
	machines := []string{"pegasus.task@0", "pegasus.task@1", "dispatch.task@1", "dispatch.task", "other@2"}
	random := func() Summary {
		return Summary{
			ID:        ulid.ULID{14: byte(rng.IntN(4)), 15: byte(rng.IntN(256))}.String(),
			Machine:   machines[rng.IntN(len(machines))],
			Priority:  rng.IntN(25) - 12,
			CreatedAt: time.Unix(int64(rng.IntN(5))-2+int64(rng.IntN(2))*1_800_000_000, int64(rng.IntN(3))*500_000_000).UTC(),
		}
	}
	for range 20000 {
		a, b := random(), random()
		want := QueueCompare(&a, &b)
		if got := bytes.Compare(a.QueueKey(), b.QueueKey()); got != want {
			t.Fatalf("QueueKey compares %d, QueueCompare %d:\n%+v\n%+v", got, want, a, b)
		}
		if len(a.QueueKey()) != QueueKeyLen+ulid.EncodedSize {
			t.Fatalf("key length %d", len(a.QueueKey()))
		}
	}
}
