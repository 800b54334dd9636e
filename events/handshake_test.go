package events

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMalformedHandshake: a peer of the PUB or replay end whose READY
// command claims metadata longer than it holds loses its connection, and
// the Server goes on serving. zmq4's handshake sliced past the command's
// end: the process crashed (slice bounds out of range), whoever could
// connect.
func TestMalformedHandshake(t *testing.T) {
	src := &lockedSource{p: NewPublisher(Config{BlockSize: 1})}
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "tcp://*:0", Topic: "kv"}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pubAddr, replayAddr := s.Addrs()
	badReady := []byte{0x04, 8, 5, 'R', 'E', 'A', 'D', 'Y', 2, 'a'} // a property name of 2 bytes, 1 sent
	for _, addr := range []string{pubAddr, replayAddr} {
		nc, err := net.Dial("tcp", strings.TrimPrefix(addr, "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(append(nullGreeting(false), badReady...)); err != nil {
			t.Fatal(err)
		}
		// The server closes the connection: the read ends (EOF or reset).
		_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadAll(nc); err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: the server kept the connection", addr)
		}
		_ = nc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := Subscribe(ctx, pubAddr, "kv")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	joined(t, s, recvAll(sub), nil)
	if _, err := Replay(ctx, replayAddr, 0); err != nil {
		t.Fatalf("replay after the malformed handshakes: %v", err)
	}
}
