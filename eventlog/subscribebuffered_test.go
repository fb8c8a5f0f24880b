package eventlog

import (
	"context"
	"testing"
)

// TestSubscribeBuffered holds a subscription's own bound: with room for
// 64 events it stays live while 50 commit unread, where the log's bound
// (4) drops the same reader back to reading the log; both deliver every
// event in order.
func TestSubscribeBuffered(t *testing.T) {
	ctx := context.Background()
	l, _, live := boundedLog(t, 2)
	roomy, tight := l.SubscribeBuffered(ctx, 1, 64), l.Subscribe(ctx, 1)
	defer roomy.Close()
	defer tight.Close()
	got := make(chan Event, 2)
	for _, sub := range []*Subscription{roomy, tight} {
		if e, err := sub.Next(ctx); err != nil || e.Seq != 1 {
			t.Fatalf("first event: %+v %v", e, err)
		}
		go func() {
			e, _ := sub.Next(ctx)
			got <- e
		}()
	}
	<-live // both registered as live; each waits for the next event
	<-live
	mustAppend(t, l, "s", Any, ev("B", ""))
	for range 2 {
		if e := <-got; e.Seq != 2 {
			t.Fatalf("live event %d", e.Seq)
		}
	}
	const n = 50
	for range n {
		mustAppend(t, l, "s", Any, ev("E", "x"))
	}
	l.subMu.Lock()
	_, roomyLive := l.subs[roomy]
	_, tightLive := l.subs[tight]
	buffered := len(roomy.live)
	l.subMu.Unlock()
	if !roomyLive || buffered != n || tightLive {
		t.Fatalf("roomy: live %v with %d buffered (want %d); tight: live %v (want dropped)", roomyLive, buffered, n, tightLive)
	}
	for _, sub := range []*Subscription{roomy, tight} {
		for want := uint64(3); want <= n+2; want++ {
			if e, err := sub.Next(ctx); err != nil || e.Seq != want {
				t.Fatalf("got %d (%v), want %d", e.Seq, err, want)
			}
		}
	}
}
