package events

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// libzmqSub receives n batches from a PUB endpoint with libzmq's SUB socket
// (python3-zmq), heartbeats on (a PING every millisecond), after
// subscribing to "kv" twice and cancelling once (libzmq counts them: the
// socket stays subscribed), and checks each is [topic, 8-byte increasing
// seq, 300-byte payload].
const libzmqSub = `
import sys, struct, zmq
s = zmq.Context().socket(zmq.SUB)
s.setsockopt(zmq.HEARTBEAT_IVL, 1)
s.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
s.setsockopt(zmq.SUBSCRIBE, b"kv")
s.setsockopt(zmq.SUBSCRIBE, b"kv")
s.setsockopt(zmq.UNSUBSCRIBE, b"kv")
s.RCVTIMEO = 30000
s.connect(sys.argv[1])
last = -1
for i in range(int(sys.argv[2])):
    m = s.recv_multipart()
    assert len(m) == 3 and m[0] == b"kv@m" and len(m[1]) == 8 and len(m[2]) == 300, m
    seq = struct.unpack(">Q", m[1])[0]
    assert seq > last, (seq, last)
    last = seq
print("ok", last)
`

// TestLibzmqSubscriber: libzmq's SUB socket, with heartbeats, gets every
// batch well formed. Skipped without python3-zmq (Debian's package, which
// brings libzmq), unless KVTIER_REQUIRE_LIBZMQ is set, as CI sets it: then
// it fails. Before the PUB end answered PINGs from its writer, libzmq got
// the frames kv@m, \x04\x05\x04PONG\x04 and an empty payload (a PONG
// inside a batch).
func TestLibzmqSubscriber(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import zmq").Run(); err != nil {
		if os.Getenv("KVTIER_REQUIRE_LIBZMQ") != "" {
			t.Fatalf("KVTIER_REQUIRE_LIBZMQ is set but /usr/bin/python3 cannot import zmq: %v", err)
		}
		t.Skip("no python3-zmq at /usr/bin/python3 (apt-get install python3-zmq): libzmq interoperability not checked")
	}
	s, err := Listen(ServerConfig{Endpoint: "tcp://*:0", Topic: "kv@m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pub, _ := s.Addrs()
	stop := make(chan struct{})
	published := make(chan struct{})
	defer func() { close(stop); <-published }()
	go func() { // until the subscriber has what it wants; it joins when it will
		defer close(published)
		payload := make([]byte, 300)
		for seq := uint64(0); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			if !s.Publish(Frame{Seq: seq, Payload: payload}) {
				t.Error("queue full")
				return
			}
			time.Sleep(20 * time.Microsecond)
		}
	}()
	out, err := exec.Command("/usr/bin/python3", "-c", libzmqSub, pub, "20000").CombinedOutput()
	if err != nil {
		t.Fatalf("libzmq SUB: %v\n%s", err, out)
	}
}
