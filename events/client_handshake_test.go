package events

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// silent is a fake publisher or replay server's connection that accepts
// and never sends its greeting.
func silent(net.Conn) {}

// TestClientHandshakeTimesOut: a publisher or replay server that accepts
// the connection and never greets fails Subscribe, SubscribeListen's
// connection, Replay and FetchSnapshot after handshakeTimeout, as libzmq's
// ZMQ_HANDSHAKE_IVL ends it, not when the caller's context ends: the
// client's handshake had no deadline, and each call stalled until its
// context did.
func TestClientHandshakeTimesOut(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 100 * time.Millisecond
	p := newFakePeer(t, silent)
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if sub, err := Subscribe(ctx, p.addr, "kv"); err == nil {
		_ = sub.Close()
		t.Fatal("Subscribe to a publisher that never greets succeeded")
	}
	if _, err := Replay(ctx, p.addr, 0); err == nil {
		t.Fatal("Replay from a server that never greets succeeded")
	}
	if _, err := FetchSnapshot(ctx, p.addr); err == nil {
		t.Fatal("FetchSnapshot from a server that never greets succeeded")
	}
	if ctx.Err() != nil {
		t.Fatal("the calls failed only when their context ended: the handshake has no deadline")
	}

	// A publisher that dials a SubscribeListen socket and never greets
	// loses its connection: the Subscriber closes it.
	sub, err := SubscribeListen(ctx, "tcp://127.0.0.1:0", "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	nc, err := net.Dial("tcp", strings.TrimPrefix(sub.Addr(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer stop()
	_, _ = io.Copy(io.Discard, nc) // the Subscriber's greeting, until it closes the connection
	if ctx.Err() != nil {
		t.Fatal("SubscribeListen kept a connection whose handshake never completed")
	}
}

// TestSubscribeRedialsPastSilentPublisher: when a Subscriber's connection
// drops and the publisher's next connection accepts and never greets, the
// Subscriber drops it after handshakeTimeout and dials again, as after
// any failed connection, and reads the batches published after. It stalled
// on that connection until its context ended.
func TestSubscribeRedialsPastSilentPublisher(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 100 * time.Millisecond
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", Topic: "kv"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pub, _ := s.Addrs()
	pubAddr := strings.TrimPrefix(pub, "tcp://")

	// A proxy to the server: its first connection is relayed until the
	// test cuts it, its second never greets, later ones are relayed.
	var (
		mu    sync.Mutex
		n     int
		first net.Conn
	)
	p := newFakePeer(t, func(nc net.Conn) {
		mu.Lock()
		n++
		k := n
		if k == 1 {
			first = nc
		}
		mu.Unlock()
		if k == 2 {
			return // silent
		}
		up, err := net.Dial("tcp", pubAddr)
		if err != nil {
			return
		}
		defer up.Close()
		go func() { _, _ = io.Copy(nc, up); _ = nc.Close() }()
		_, _ = io.Copy(up, nc)
	})
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := Subscribe(ctx, p.addr, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := recvAll(sub)
	joined(t, s, got, nil)
	mu.Lock()
	_ = first.Close()
	mu.Unlock()
	// Frames numbered from 1<<20 on are published after the cut.
	for seq := uint64(1 << 20); ; seq++ {
		if !s.Publish(Frame{Seq: seq}) {
			t.Fatal("queue full")
		}
		select {
		case f, ok := <-got:
			if !ok {
				t.Fatal("subscriber closed: it never read past the silent connection")
			}
			if f.Seq >= 1<<20 {
				return
			}
		case <-time.After(20 * time.Millisecond):
		}
	}
}
