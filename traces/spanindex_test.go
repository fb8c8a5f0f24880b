package traces

import (
	"testing"

	"github.com/oklog/ulid/v2"
)

// TestSpanIndex: the build's index of event ids gives what a map gives,
// below and beyond the ids it keeps in slices, and after a reset.
func TestSpanIndex(t *testing.T) {
	var x spanIndex
	for round, n := range []int{5, spanIndexSlice, 3 * spanIndexSlice, 2, 200} {
		x.reset()
		want := map[ulid.ULID]int{}
		ids := make([]ulid.ULID, n)
		for i := range ids {
			ids[i] = ulid.MustNew(uint64(round*1000+i+1), nil)
		}
		for i := range 3 * n {
			id := ids[(i*7)%n]
			x.set(id, i)
			want[id] = i
			probe := ids[(i*5)%n]
			got, ok := x.get(probe)
			w, wok := want[probe]
			if got != w || ok != wok {
				t.Fatalf("round %d, step %d: get gave %d, %v; want %d, %v", round, i, got, ok, w, wok)
			}
		}
		if _, ok := x.get(ulid.MustNew(1<<40, nil)); ok {
			t.Fatalf("round %d: an id never set was found", round)
		}
	}
}
