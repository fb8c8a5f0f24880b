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
	buffered := roomy.buffered()
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

// TestSubscriptionOneSendPerCommit: a live subscription receives a
// commit's events in one send, returns them one by one from Next, and
// counts the ones it has yet to return against its bound.
func TestSubscriptionOneSendPerCommit(t *testing.T) {
	ctx := context.Background()
	l, _, live := boundedLog(t, 1)
	sub := liveSubscription(t, l, live)
	mustAppend(t, l, "s", Any, ev("C", "1"), ev("C", "2"), ev("C", "3"))
	l.subMu.Lock()
	sends, buffered := len(sub.live), sub.buffered()
	l.subMu.Unlock()
	if sends != 1 || buffered != 3 {
		t.Fatalf("a commit of 3 events: %d sends, %d buffered; want 1 and 3", sends, buffered)
	}
	for want := uint64(3); want <= 5; want++ {
		e, err := sub.Next(ctx)
		if err != nil || e.Seq != want || string(e.Body) != string(rune('0'+want-2)) {
			t.Fatalf("got %d %q (%v), want %d", e.Seq, e.Body, err, want)
		}
		if b := sub.buffered(); b != int(5-want) {
			t.Fatalf("after seq %d: %d buffered, want %d", want, b, 5-want)
		}
	}
}

// TestAppendKeepsCallersBodies: an append's results carry the caller's
// bodies and metadata rather than copies, and a subscription, which
// shares its events with the others, sees none of the caller's later
// writes to them.
func TestAppendKeepsCallersBodies(t *testing.T) {
	ctx := context.Background()
	l, _, live := boundedLog(t, 1)
	sub := l.Subscribe(ctx, 2)
	defer sub.Close()
	got := make(chan []Event, 1)
	go func() {
		var evs []Event
		for range 2 {
			e, err := sub.Next(ctx)
			if err != nil {
				break
			}
			evs = append(evs, e)
		}
		got <- evs
	}()
	<-live
	in := []Event{
		{Type: "B", Body: []byte("one"), Metadata: map[string]string{"k": "v"}},
		{Type: "B", Body: []byte("two")},
	}
	res := mustAppend(t, l, "s", Any, in...)
	if &res.Events[0].Body[0] != &in[0].Body[0] || &res.Events[1].Body[0] != &in[1].Body[0] {
		t.Fatal("the results' bodies are copies of the caller's")
	}
	if res.Events[0].Metadata["k"] != "v" {
		t.Fatalf("result metadata %v", res.Events[0].Metadata)
	}
	copy(in[0].Body, "xxx")
	copy(in[1].Body, "yyy")
	in[0].Metadata["k"] = "w"
	evs := <-got
	if len(evs) != 2 || string(evs[0].Body) != "one" || string(evs[1].Body) != "two" || evs[0].Metadata["k"] != "v" {
		t.Fatalf("the subscription saw %+v", evs)
	}
	for seq, want := range map[uint64]string{2: "one", 3: "two"} {
		if e, err := l.GetSeq(seq); err != nil || string(e.Body) != want {
			t.Fatalf("stored seq %d: %q %v", seq, e.Body, err)
		}
	}
}
