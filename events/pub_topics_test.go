package events

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// TestSubscriptionsNotMatchingHeldNot: a subscriber's subscriptions to
// prefixes of other topics than the server's (its only one) are not kept:
// a peer that sent 2000 distinct subscriptions of 60 KiB each (every one
// under the inbound bound) made the server hold 120 MiB, and more with
// every one it sent, and every batch test each prefix for each subscriber.
func TestSubscriptionsNotMatchingHeldNot(t *testing.T) {
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", Topic: "kv"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pubAddr, _ := s.Addrs()
	c, nc := dialZMTP(t, pubAddr, zmq4.Sub)
	defer nc.Close()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n, size = 2000, 60 << 10
	sub := make([]byte, 1+size)
	sub[0] = 1
	for i := range n {
		copy(sub[1:], fmt.Sprintf("other-%08d", i))
		if err := c.SendMsg(zmq4.NewMsg(sub)); err != nil {
			t.Fatal(err)
		}
	}
	// Subscriptions are applied in order: once a batch comes, every one
	// before was.
	if err := c.SendMsg(zmq4.NewMsg([]byte("\x01kv"))); err != nil {
		t.Fatal(err)
	}
	got := make(chan Frame, 1)
	go func() {
		defer close(got)
		for {
			msg, err := c.RecvMsg()
			if err != nil {
				return
			}
			if msg.Type == zmq4.UsrMsg {
				got <- Frame{}
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for seq := uint64(0); ; seq++ {
		s.Publish(Frame{Seq: seq, Payload: []byte{1}})
		select {
		case <-got:
		case <-time.After(20 * time.Millisecond):
			continue
		case <-ctx.Done():
			t.Fatal("no batch came")
		}
		break
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > n*size/2 {
		t.Fatalf("the server holds %d MiB more after %d subscriptions of %d KiB to topics it never sends", grew>>20, n, size>>10)
	}
}
