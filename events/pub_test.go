package events

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/goleak"
)

// recvAll receives sub's frames on a channel until sub fails.
func recvAll(sub *Subscriber) <-chan Frame {
	got := make(chan Frame, 1<<14)
	go func() {
		defer close(got)
		for {
			_, f, err := sub.Recv()
			if err != nil {
				return
			}
			got <- f
		}
	}()
	return got
}

// joined publishes numbered frames until one reaches got (a SUB socket
// joins asynchronously) and returns the next number.
func joined(t *testing.T, s *Server, got <-chan Frame, payload []byte) uint64 {
	t.Helper()
	for seq := uint64(0); ; seq++ {
		if !s.Publish(Frame{Seq: seq, Payload: payload}) {
			t.Fatal("queue full")
		}
		select {
		case _, ok := <-got:
			if !ok {
				t.Fatal("subscriber closed")
			}
			return seq + 1
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestSlowSubscriberDelaysNoOther: a subscriber that stops reading fills
// its connection and then its own queue, and loses batches (counted); a
// subscriber beside it still gets every batch. zmq4's PUB socket wrote to
// its subscribers in turn from one goroutine, so the stuck write held up
// the other subscriber for good (it got 101 of 2001 batches) while an
// unbounded queue grew, and Publish never reported a drop.
func TestSlowSubscriberDelaysNoOther(t *testing.T) {
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", Topic: "kv", SubscriberQueue: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pubAddr, _ := s.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	payload := make([]byte, 64<<10) // shared by every frame

	stuck, err := Subscribe(ctx, pubAddr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	// The stuck subscriber reads one batch, to show it has joined, and no
	// more.
	stuckGot := make(chan Frame, 1)
	go func() {
		if _, f, err := stuck.Recv(); err == nil {
			stuckGot <- f
		}
	}()
	joined(t, s, stuckGot, payload)

	sub, err := Subscribe(ctx, pubAddr, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := recvAll(sub)
	seq := joined(t, s, got, payload)

	// Paced by the healthy subscriber, which must get each batch: 128 MiB
	// in all, far past what the stuck one's connection buffers.
	for range 2000 {
		if !s.Publish(Frame{Seq: seq, Payload: payload}) {
			t.Fatal("queue full")
		}
		for {
			f, ok := <-got
			if !ok {
				t.Fatal("subscriber closed")
			}
			if f.Seq == seq {
				break
			}
		}
		seq++
		if ctx.Err() != nil {
			t.Fatalf("the healthy subscriber stalled at batch %d", seq)
		}
	}
	if s.SubscriberDrops() == 0 {
		t.Fatal("no batch dropped for the subscriber that stopped reading")
	}
}

// TestCloseSendsQueued: every batch queued before Close reaches a
// subscriber that reads, and no goroutine of the Server outlives Close.
// zmq4's PUB socket closed its connections while its own queue still held
// batches: the subscriber got between 0 and 474 of 5000.
func TestCloseSendsQueued(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", Topic: "kv"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pubAddr, _ := s.Addrs()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := Subscribe(ctx, pubAddr, "")
	if err != nil {
		t.Fatal(err)
	}
	got := recvAll(sub)
	payload := make([]byte, 1024)
	seq := joined(t, s, got, payload)
	const n = 5000
	for range n {
		if !s.Publish(Frame{Seq: seq, Payload: payload}) {
			t.Fatal("queue full")
		}
		seq++
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	last := seq - 1
	for f := range got {
		if f.Seq == last {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("batch %d queued before Close never arrived", last)
	}
	_ = sub.Close()
	for range got { // the receiving goroutine ends
	}
}

// TestSubscriptionMessages: a SUB socket's [1, prefix] subscribes to the
// topics with that prefix ("" to every one) and [0, prefix] cancels it;
// anything else, commands included, is not a subscription.
func TestSubscriptionMessages(t *testing.T) {
	topics := map[string]bool{}
	for _, tt := range []struct {
		msg       zmq4.Msg
		topic     string
		on, ok    bool
		wantsKVA  bool // after applying it, topics wants "kv@a"
		wantsKVBx bool // and "kv@b-x"
	}{
		{zmq4.NewMsg([]byte("\x01kv@b")), "kv@b", true, true, false, true},
		{zmq4.NewMsg([]byte("\x01kv@a")), "kv@a", true, true, true, true},
		{zmq4.NewMsg([]byte("\x00kv@b")), "kv@b", false, true, true, false},
		{zmq4.NewMsg([]byte("\x02kv@b")), "", false, false, true, false},
		{zmq4.NewMsgFrom([]byte("\x01"), []byte("kv")), "", false, false, true, false},
		{zmq4.Msg{Frames: [][]byte{[]byte("\x01")}, Type: zmq4.CmdMsg}, "", false, false, true, false},
		{zmq4.NewMsg([]byte("\x01")), "", true, true, true, true},
	} {
		topic, on, ok := subscription(tt.msg)
		if topic != tt.topic || on != tt.on || ok != tt.ok {
			t.Fatalf("subscription(%q) = %q %v %v", tt.msg.Frames, topic, on, ok)
		}
		if ok && on {
			topics[topic] = true
		} else if ok {
			delete(topics, topic)
		}
		if wants(topics, "kv@a") != tt.wantsKVA || wants(topics, "kv@b-x") != tt.wantsKVBx {
			t.Fatalf("after %q: topics %v want kv@a %v, kv@b-x %v", tt.msg.Frames, topics, wants(topics, "kv@a"), wants(topics, "kv@b-x"))
		}
	}
}

// TestPubOverIPC: an ipc:// endpoint binds a Unix socket that a SUB socket
// reaches; inproc://, which only zmq4's own sockets speak, is refused.
func TestPubOverIPC(t *testing.T) {
	if _, err := Listen(ServerConfig{Endpoint: "inproc://kv"}, nil); err == nil {
		t.Fatal("an inproc:// PUB endpoint was accepted")
	}
	// A replay endpoint with no Source to answer it is refused, rather than
	// a nil Source crashing the process at the first request.
	if _, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0"}, nil); err == nil {
		t.Fatal("a replay endpoint without a Source was accepted")
	}
	ep := "ipc://" + t.TempDir() + "/kv.sock"
	s, err := Listen(ServerConfig{Endpoint: ep, Topic: "kv"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if pub, _ := s.Addrs(); pub != ep {
		t.Fatalf("Addrs %q, want %q", pub, ep)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := Subscribe(ctx, ep, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	joined(t, s, recvAll(sub), []byte{1})
}

// TestHugeInboundMessage: a peer of the PUB or replay end that declares a
// frame of 2^62 bytes (one 9-byte header), or a message of many frames
// that add up past maxInbound, loses its connection; the Server goes on
// serving others. zmq4 allocated the claimed size first: the process
// crashed (makeslice: len out of range).
func TestHugeInboundMessage(t *testing.T) {
	src := &lockedSource{p: NewPublisher(Config{BlockSize: 1})}
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv"}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pubAddr, replayAddr := s.Addrs()
	long := func(more bool, size uint64) []byte {
		h := []byte{0x02, 0, 0, 0, 0, 0, 0, 0, 0}
		if more {
			h[0] |= 0x01
		}
		binary.BigEndian.PutUint64(h[1:], size)
		return h
	}
	chunk := make([]byte, 16<<10)
	for _, tc := range []struct {
		name  string
		addr  string
		typ   zmq4.SocketType
		bytes [][]byte
	}{
		{"PUB, one huge frame", pubAddr, zmq4.Sub, [][]byte{long(false, 1<<62)}},
		{"replay, one huge frame", replayAddr, zmq4.Dealer, [][]byte{long(true, 1<<62)}},
		{"replay, frames adding up", replayAddr, zmq4.Dealer, [][]byte{long(true, 16<<10), chunk, long(true, 16<<10), chunk,
			long(true, 16<<10), chunk, long(true, 16<<10), chunk, long(false, 16<<10), chunk}},
	} {
		c, nc := dialZMTP(t, tc.addr, tc.typ)
		for _, b := range tc.bytes {
			if _, err := c.Write(b); err != nil {
				break // the server may have closed already
			}
		}
		closedByServer(t, nc, tc.name)
	}
	stillServes(t, s, "the huge messages")
}
