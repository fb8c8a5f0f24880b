package natstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestClusterKeepsQuorum starts three servers, writes to a stream with
// three replicas, stops one server and keeps writing (two of three are a
// quorum), then restarts it and reads every message back in order.
func TestClusterKeepsQuorum(t *testing.T) {
	c := Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := c.JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			// A request in flight when its server stops is never
			// answered: retry with a short timeout; the message id
			// makes a retry of a stored message a duplicate.
			var ack *jetstream.PubAck
			var err error
			for attempt := 0; attempt < 30; attempt++ {
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				ack, err = js.Publish(actx, "t.x", []byte{byte(i)}, jetstream.WithMsgID(fmt.Sprint(i)))
				acancel()
				if err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
			if ack.Sequence != uint64(i+1) {
				t.Fatalf("publish %d: stream sequence %d", i, ack.Sequence)
			}
		}
	}
	publish(0, 10)
	c.Stop(0)
	publish(10, 20)
	c.Restart(0)
	c.WaitReady(3)
	publish(20, 30)

	st, err := js.Stream(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		m, err := st.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if len(m.Data) != 1 || m.Data[0] != byte(i) {
			t.Fatalf("message %d: %v", i, m.Data)
		}
	}
}

// TestSingleServer is the plain JetStream server the fan-out tests use.
func TestSingleServer(t *testing.T) {
	c := Start(t, 1)
	js := c.JetStream()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.x", []byte("a")); err != nil {
		t.Fatal(err)
	}
}
