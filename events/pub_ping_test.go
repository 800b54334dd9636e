package events

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// TestPingDuringPublishKeepsFraming: a subscriber that sends ZMTP PING
// commands (libzmq does, every ZMQ_HEARTBEAT_IVL) while batches stream
// to it gets each batch as a well-formed [topic, seq, payload] message,
// in order, and its PONGs between them. zmq4's RecvMsg wrote the PONG
// from the reader goroutine while the writer sent batches: the
// subscriber got ["kv" seq "\x04\x05\x04PONG"] (the PONG frame as a
// batch's payload) or "zmq4: invalid length command".
func TestPingDuringPublishKeepsFraming(t *testing.T) {
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", Topic: "kv", SubscriberQueue: 1 << 16}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pubAddr, _ := s.Addrs()
	c, nc := dialZMTP(t, pubAddr, zmq4.Sub)
	defer nc.Close()
	if err := c.SendMsg(zmq4.NewMsg([]byte("\x01kv"))); err != nil {
		t.Fatal(err)
	}
	// Pings, as fast as the connection takes them, until the test ends.
	stop := make(chan struct{})
	pinged := make(chan struct{})
	published := make(chan struct{})
	defer func() { close(stop); <-pinged; <-published }()
	go func() {
		defer close(pinged)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := c.SendCmd(zmq4.CmdPing, []byte{0, 10}); err != nil {
				return
			}
		}
	}()
	const n = 100000
	payload := []byte("payload")
	go func() { // until the test ends: the subscription reaches the server when it will
		defer close(published)
		for seq := uint64(0); ; {
			select {
			case <-stop:
				return
			default:
			}
			if s.Publish(Frame{Seq: seq, Payload: payload}) {
				seq++
			} else {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	_ = nc.SetReadDeadline(time.Now().Add(3 * time.Minute))
	next, pongs := uint64(0), 0
	defer func() { t.Logf("%d pongs", pongs) }()
	for got := 0; got < n; {
		msg, err := c.RecvMsg()
		if err != nil {
			t.Fatalf("after batch %d: %v", next, err)
		}
		if msg.Type == zmq4.CmdMsg {
			pongs++
			continue // a PONG
		}
		if len(msg.Frames) != 3 || string(msg.Frames[0]) != "kv" || len(msg.Frames[1]) != 8 || string(msg.Frames[2]) != string(payload) {
			t.Fatalf("after batch %d: a malformed message %q", next, msg.Frames)
		}
		seq := binary.BigEndian.Uint64(msg.Frames[1])
		if seq < next {
			t.Fatalf("batch %d after %d", seq, next)
		}
		next = seq
		got++
	}
}
