//go:build unix

package eventlog_test

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pegasus-engine/pegasus/eventlog"
)

// BenchmarkAppendSubscribed: 16 writers append three events each (with
// 200-byte bodies) to streams of their own while two live subscriptions
// read every event, as the View and a trace follower do in the daemon.
// b.N counts appends; the subscriptions have read them all when it ends.
func BenchmarkAppendSubscribed(b *testing.B) {
	ctx := context.Background()
	l, err := eventlog.Open(filepath.Join(b.TempDir(), "db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	body := make([]byte, 200)
	const writers, per = 16, 3
	total := uint64(b.N * per)
	var readers sync.WaitGroup
	for range 2 {
		sub := l.Subscribe(ctx, 1)
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer sub.Close()
			for seq := uint64(1); seq <= total; seq++ {
				if e, err := sub.Next(ctx); err != nil || e.Seq != seq {
					b.Errorf("subscription: %d %v, want %d", e.Seq, err, seq)
					return
				}
			}
		}()
	}
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	work := make(chan int, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream := "w" + string(rune('a'+w))
			evs := make([]eventlog.Event, per)
			for range work {
				for i := range evs {
					evs[i] = eventlog.Event{Type: "STEP", Body: body}
				}
				if _, err := l.Append(ctx, stream, eventlog.Any, evs...); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	for i := range b.N {
		work <- i
	}
	close(work)
	wg.Wait()
	readers.Wait()
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// cpuTime returns the process's CPU time so far (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
