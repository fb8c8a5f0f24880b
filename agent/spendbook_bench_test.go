package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/pegasus-engine/pegasus/eventlog"
	"github.com/pegasus-engine/pegasus/fsm"
)

// BenchmarkSpendRebuild is the spend book's rebuild at start: a scan of
// the whole log, 100,000 events of 10,000 tasks (an input, a model call
// and eight other events each), on an in-memory file system. It reports
// the time per event of the log: what a restart costs per event ever
// appended, checkpoints or not.
func BenchmarkSpendRebuild(b *testing.B) {
	ctx := context.Background()
	l := openLog(b, vfs.NewMem())
	defer l.Close()
	enc := func(body fsm.Body) eventlog.Event { return logEvent(b, body, time.Time{}) }
	const tasks = 10000
	for i := range tasks {
		evs := []eventlog.Event{
			enc(&fsm.Input{Kind: fsm.MessageReceived, Text: fmt.Sprint("task ", i), Source: "bench", ConcurrencyKey: "acme"}),
			enc(&fsm.ModelCalledBody{Model: "m", PromptTokens: 100, CompletionTokens: 20}),
		}
		for range 8 {
			evs = append(evs, enc(&fsm.StepCompletedBody{}))
		}
		if _, err := l.Append(ctx, fmt.Sprintf("task-%05d", i), eventlog.NoStream, evs...); err != nil {
			b.Fatal(err)
		}
	}
	head := l.Head()
	b.ResetTimer()
	for b.Loop() {
		s := newSpendBook(l, nil, Budgets{})
		if err := s.rebuild(head); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(head), "ns/event")
}
