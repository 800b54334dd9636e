package events

import (
	"testing"
	"time"
)

// TestHandshakeTimesOut: a peer of the PUB or replay end that connects and
// never completes the ZMTP handshake loses its connection after
// handshakeTimeout, as libzmq's ZMQ_HANDSHAKE_IVL (30 s) ends it. The
// Server kept such a connection, its goroutine and descriptor, until the
// peer left or Close: anyone who could connect held them at will.
func TestHandshakeTimesOut(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 100 * time.Millisecond
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv"}, &lockedSource{p: NewPublisher(Config{BlockSize: 1})})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pub, replay := s.Addrs()
	for _, addr := range []string{pub, replay} {
		nc := dialRaw(t, addr)
		_, _ = nc.Write([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f}) // a greeting's first 10 bytes, no more
		closedByServer(t, nc, addr+", a handshake that never completed")
	}
}
