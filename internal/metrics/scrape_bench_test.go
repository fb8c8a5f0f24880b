package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/replay"
)

// BenchmarkStateScrape is a scrape of the state collector on a daemon with
// 5,000 tasks waiting for its one admission slot, most of them out of
// memory (a 1 MiB budget): "each" is the collector (one pass under the
// fold's read lock, stubs for the tasks out of memory), "active" the count
// it replaced (View.Active: every task copied, those out of memory read
// back from the store), for the ratio in one run.
func BenchmarkStateScrape(b *testing.B) {
	ctx := context.Background()
	a, l, model := startBlocked(b, &replay.Options{MemoryBudget: replay.MinMemoryBudget})
	const tasks = 5000
	input := fmt.Sprintf("%0512d", 0) // half a KiB each: 2.5 MB in all
	var last string
	var err error
	for i := range tasks {
		if last, err = a.Submit(ctx, input, "bench", ""); err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			<-model.called
		}
	}
	if _, err := a.WaitUntil(ctx, last, func(*fsm.Task) bool { return a.Queued(last) }); err != nil {
		b.Fatal(err)
	}
	m := New(a, l, Options{})
	b.Run("each", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Registry().Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("active", func(b *testing.B) {
		for b.Loop() {
			n := map[string]int{}
			now := time.Now()
			var oldest time.Duration
			for _, t := range a.View().Active() {
				n[string(t.State)+t.Machine.String()]++
				if a.Queued(t.ID) {
					oldest = max(oldest, now.Sub(t.CreatedAt))
				}
			}
		}
	})
}
