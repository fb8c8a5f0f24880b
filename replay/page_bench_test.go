package replay

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
	"github.com/pegasus-engine/pegasus/projection"
)

var pageTasks = flag.Int("replay.page-tasks", 1_000_000, "persisted task summaries in BenchmarkTasksPage's store")

// pageStore returns a log whose aux space holds the persisted summaries and
// queue index entries of -replay.page-tasks tasks (no events: the list
// reads only these), built once, under -replay.dir when given.
func pageStore(b *testing.B) *eventlog.Log {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "db")
	if *benchDir != "" {
		dir = filepath.Join(*benchDir, fmt.Sprintf("tasks-page-%d", *pageTasks), "db")
	}
	l, err := eventlog.Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := l.GetAux([]byte("bench/complete")); err == nil {
		return l
	}
	start := time.Now()
	rng := rand.New(rand.NewPCG(7, 8))
	entropy := rand.NewChaCha8([32]byte{9})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	states := []fsm.State{fsm.StateCompleted, fsm.StateCompleted, fsm.StateCompleted, fsm.StateCompleted,
		fsm.StateCompleted, fsm.StateCompleted, fsm.StateCompleted, fsm.StateCompleted, fsm.StateFailed, fsm.StateSuspended}
	input := strings.Repeat("summarise the quarterly report and list the open questions ", 3)
	for done := 0; done < *pageTasks; {
		n := min(20000, *pageTasks-done)
		err := l.WriteAux(context.Background(), func(batch *eventlog.AuxBatch) error {
			for i := range n {
				created := t0.Add(time.Duration(done+i) * 10 * time.Millisecond)
				s := projection.Summary{
					ID: ulid.MustNew(ulid.Timestamp(created), entropy).String(), Type: "general",
					State: states[rng.IntN(len(states))], Machine: "pegasus.task@1", Source: "api",
					Priority: rng.IntN(3), CreatedAt: created, UpdatedAt: created.Add(time.Second),
					Iteration: 2, Events: 11, Seq: uint64(done+i) * 11, Input: input[:projection.MaxSummaryText],
				}
				if rng.IntN(4) == 0 {
					s.Machine, s.Priority = fsm.DispatchMachineName+"@1", rng.IntN(11)
				}
				v, err := s.Encode()
				if err != nil {
					return err
				}
				batch.Set(taskKey(prefSum, s.ID), v)
				batch.Set(append([]byte(prefQueue), s.QueueKey()...), nil)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		done += n
	}
	if err := l.WriteAux(context.Background(), func(batch *eventlog.AuxBatch) error {
		batch.Set([]byte("bench/complete"), nil)
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "tasks page store: %d summaries written in %v\n", *pageTasks, time.Since(start).Round(time.Millisecond))
	return l
}

// BenchmarkTasksPage is one page of the task list (View.Tasks, what
// GET /v1/tasks and `pegasus-replay tasks` serve) over -replay.page-tasks
// (default 1,000,000) persisted tasks: page 1 and page 1,000 of 50, in
// each order and with a filter that keeps a tenth of the tasks. Each op
// reads both pages; the ratio page1000/page1 is the figure (1 means a page
// costs the same wherever it is).
func BenchmarkTasksPage(b *testing.B) {
	l := pageStore(b)
	defer l.Close()
	v, err := NewView(nil)
	if err != nil {
		b.Fatal(err)
	}
	v.st = &store{log: l}
	ctx := context.Background()
	failed := projection.Filter{States: []fsm.State{fsm.StateFailed}}
	for _, c := range []struct {
		name string
		q    Query
	}{
		{"order=asc", Query{}},
		{"order=desc", Query{Desc: true}},
		{"order=queue", Query{Queue: true}},
		{"order=queue/state=failed", Query{Queue: true, Filter: failed}},
		{"order=desc/state=failed", Query{Desc: true, Filter: failed}},
	} {
		b.Run(c.name, func(b *testing.B) {
			q := c.q
			q.Limit = 50
			deep := q
			for range 999 {
				p, err := v.Tasks(ctx, deep)
				if err != nil || p.Next == "" {
					b.Fatalf("walking to page 1000: %v", err)
				}
				deep.Cursor = p.Next
			}
			var first, last time.Duration
			b.ResetTimer()
			for range b.N {
				for _, qq := range []*Query{&q, &deep} {
					start := time.Now()
					p, err := v.Tasks(ctx, *qq)
					d := time.Since(start)
					if err != nil || len(p.Tasks) != 50 {
						b.Fatalf("page: %d tasks, %v", len(p.Tasks), err)
					}
					if qq == &q {
						first += d
					} else {
						last += d
					}
				}
			}
			b.ReportMetric(float64(first.Microseconds())/float64(b.N), "page1-µs")
			b.ReportMetric(float64(last.Microseconds())/float64(b.N), "page1000-µs")
			b.ReportMetric(float64(last)/float64(first), "ratio")
		})
	}
}
