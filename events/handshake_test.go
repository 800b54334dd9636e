package events

import (
	"testing"
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
		nc := dialRaw(t, addr)
		if _, err := nc.Write(append(nullGreeting(false), badReady...)); err != nil {
			t.Fatal(err)
		}
		closedByServer(t, nc, addr)
	}
	stillServes(t, s, "the malformed handshakes")
}
